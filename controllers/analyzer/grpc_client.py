"""`AnalysisRecordAPI` over gRPC: the analyzer controller's client of AnalysisRecordService.

Messages become the frozen views of `controllers.analyzer.contract`; failed calls become the
`FalconError` the server raised (`core.grpc.errors.error_from_rpc_error`), except ALREADY_EXISTS,
which becomes `AlreadyExists` carrying the existing record's id from the `falcon-analysis-id`
trailing metadata. UNAVAILABLE / DEADLINE_EXCEEDED become `ApiUnavailable` (retryable): reads are
retried a few times with exponential back-off (tenacity); writes are not, the next tick retries
them from the records' state (level-triggered).

Every call has a deadline (`timeout` seconds); lists follow `next_page_token` to the end.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import timezone
from typing import Any

import grpc
import tenacity
from google.protobuf import field_mask_pb2

from controllers.grpc_client import GrpcClient
from core.grpc.channel import auth_metadata
from core.grpc.errors import ApiUnavailable, error_from_rpc_error
from core.domain.statuses import AnalysisStatus
from falcon_proto.falcon.v1 import analysis_pb2, analysis_pb2_grpc

from .contract import ANALYSIS_ID_KEY, WRITABLE_FIELDS, AlreadyExists, AnalysisView, AwaitingView

READ_ATTEMPTS = 3


def _dt(message: Any, field: str):
    if not message.HasField(field):
        return None
    return getattr(message, field).ToDatetime(tzinfo=timezone.utc)


def analysis_view(rec: analysis_pb2.AnalysisRecord) -> AnalysisView:
    """Return the `AnalysisView` of a `falcon.v1.AnalysisRecord`."""
    return AnalysisView(
        analysis_id=rec.analysis_id, name=rec.name, exp_id=rec.exp_id,
        analysis_type=rec.analysis_type, plugin_name=rec.plugin_name,
        status=AnalysisStatus(rec.status),
        result_path=rec.result_path, error_message=rec.error_message, command=rec.command,
        script_content=rec.script_content, script_bytes=rec.script_bytes,
        script_name=rec.script_name,
        artifact_id=rec.artifact_id, artifact_path=rec.artifact_path,
        artifact_type=rec.artifact_type, creator_email=rec.creator_email, attempts=rec.attempts,
        cluster_object_name=rec.cluster_object_name, reason=rec.reason,
        created_at=_dt(rec, "created_at"), updated_at=_dt(rec, "updated_at"),
        started_at=_dt(rec, "started_at"), finished_at=_dt(rec, "finished_at"))


def analysis_message(view: AnalysisView) -> analysis_pb2.AnalysisRecord:
    """Return the `falcon.v1.AnalysisRecord` of a view (the inverse of `analysis_view`)."""
    rec = analysis_pb2.AnalysisRecord(
        analysis_id=view.analysis_id, name=view.name, exp_id=view.exp_id,
        analysis_type=view.analysis_type, plugin_name=view.plugin_name, status=view.status,
        result_path=view.result_path, error_message=view.error_message, command=view.command,
        script_content=view.script_content, script_bytes=view.script_bytes,
        script_name=view.script_name, artifact_id=view.artifact_id, artifact_path=view.artifact_path,
        artifact_type=view.artifact_type, creator_email=view.creator_email,
        attempts=view.attempts, cluster_object_name=view.cluster_object_name,
        reason=view.reason)
    for field in ("created_at", "updated_at", "started_at", "finished_at"):
        value = getattr(view, field)
        if value is not None:
            getattr(rec, field).FromDatetime(value.astimezone(timezone.utc))
    return rec


def awaiting_view(item: analysis_pb2.ExpAwaiting) -> AwaitingView:
    """Return the `AwaitingView` of a `falcon.v1.ExpAwaiting`."""
    return AwaitingView(exp_id=item.exp_id, exp_name=item.exp_name, exp_type=item.exp_type,
                        creator_email=item.creator_email, artifact_id=item.artifact_id,
                        artifact_path=item.artifact_path, artifact_type=item.artifact_type,
                        plugin_name=item.plugin_name, finished_at=_dt(item, "finished_at"))


def rebuild_error(exc: grpc.RpcError) -> Exception:
    """Return the domain error of a failed call: `AlreadyExists` for ALREADY_EXISTS (with the
    `falcon-analysis-id` trailer), else `core.grpc.errors.error_from_rpc_error(exc)`."""
    if hasattr(exc, "code") and exc.code() == grpc.StatusCode.ALREADY_EXISTS:
        trailers = dict(exc.trailing_metadata() or ())
        return AlreadyExists(exc.details() or "already exists", metadata={
            ANALYSIS_ID_KEY: str(trailers.get(ANALYSIS_ID_KEY, ""))})
    return error_from_rpc_error(exc)


class GrpcAnalysisRecordAPI(GrpcClient):
    """The `AnalysisRecordAPI` contract over falcon.v1.AnalysisRecordService.

    Args:
        target, token, timeout, channel: as `controllers.grpc_client.GrpcClient`.
        retry_wait: first back-off between two attempts of a read, in seconds (doubles).

    Raises:
        ValueError: `token` is empty or `timeout` is not positive.
    """

    def __init__(self, target: str, token: str | Callable[[], str], timeout: float = 10.0, *,
                 channel: grpc.Channel | None = None, retry_wait: float = 0.2):
        super().__init__(target, token, timeout, channel=channel)
        self._retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(READ_ATTEMPTS),
            wait=tenacity.wait_exponential(multiplier=retry_wait, max=2.0),
            retry=tenacity.retry_if_exception_type(ApiUnavailable), reraise=True)

    def _stubs(self, channel: grpc.Channel) -> None:
        self.stub = analysis_pb2_grpc.AnalysisRecordServiceStub(channel)

    def call(self, method: Callable, request: Any) -> Any:
        """Call one stub method once with the deadline and credentials.

        Raises:
            FalconError: the domain error the server's status maps back to (`rebuild_error`).
        """
        try:
            return method(request, timeout=self.timeout, metadata=auth_metadata(self._token()))
        except grpc.RpcError as exc:
            raise rebuild_error(exc) from None

    def read(self, method: Callable, request: Any) -> Any:
        """`call` for a read: retried on ApiUnavailable (READ_ATTEMPTS attempts in all)."""
        return self._retrying(self.call, method, request)

    def _pages(self, method: Callable, request: Any) -> list[AnalysisView]:
        out: list[AnalysisView] = []
        while True:
            response = self.read(method, request)
            out.extend(analysis_view(rec) for rec in response.records)
            if not response.next_page_token:
                return out
            request.page_token = response.next_page_token

    # -- AnalysisRecordAPI ------------------------------------------------------------------

    def list_awaiting(self, plugins: dict[str, tuple[str, ...]],
                      limit: int = 100) -> list[AwaitingView]:
        """ListExpsAwaitingAnalysis with the catalog's plugin -> artifact types map."""
        request = analysis_pb2.ListExpsAwaitingAnalysisReq(limit=limit, plugins=[
            analysis_pb2.PluginArtifactTypes(plugin_name=name, artifact_types=list(types))
            for name, types in plugins.items()])
        return [awaiting_view(item)
                for item in self.read(self.stub.ListExpsAwaitingAnalysis, request).items]

    def create_record(self, *, exp_id: int, analysis_type: str, result_root: str,
                      plugin_name: str = "", command: str = "", script_content: str = "",
                      artifact_id: int = 0, creator_email: str = "", name: str = "",
                      analysis_id: str = "", script_name: str = "",
                      plugin_artifact_types: tuple[str, ...] = ()) -> AnalysisView:
        """CreateAnalysisRecord (a pending record); with `plugin_artifact_types`, refused
        (ValidationFailed on plugin_name) for an artifact of another type.

        Raises:
            AlreadyExists: an offline record of (artifact, plugin), or one with `analysis_id`,
                exists; its id is in `.analysis_id`.
            ValidationFailed, NotFound, Conflict: as the server says.
        """
        request = analysis_pb2.CreateAnalysisRecordReq(
            name=name, exp_id=exp_id, analysis_type=analysis_type, plugin_name=plugin_name,
            command=command, script_content=script_content, artifact_id=artifact_id,
            creator_email=creator_email, result_root=result_root, analysis_id=analysis_id,
            script_name=script_name, plugin_artifact_types=list(plugin_artifact_types))
        return analysis_view(self.call(self.stub.CreateAnalysisRecord, request).record)

    def get_record(self, analysis_id: str, with_script: bool = False) -> AnalysisView:
        """GetAnalysisRecord. Raises NotFound for an unknown id."""
        request = analysis_pb2.GetAnalysisRecordReq(analysis_id=analysis_id,
                                                    with_script=with_script)
        return analysis_view(self.read(self.stub.GetAnalysisRecord, request))

    def list_records(self, *, statuses: tuple[str, ...] = (), exp_id: int = 0,
                     analysis_type: str = "") -> list[AnalysisView]:
        """ListAnalysisRecords, every page, by ascending (created_at, analysis_id)."""
        request = analysis_pb2.ListAnalysisRecordsReq(
            exp_id=exp_id, statuses=list(statuses), analysis_type=analysis_type, page_size=1000)
        return self._pages(self.stub.ListAnalysisRecords, request)

    def list_running(self) -> list[AnalysisView]:
        """ListRunningAnalyses, every page."""
        return self._pages(self.stub.ListRunningAnalyses,
                           analysis_pb2.ListRunningAnalysesReq(page_size=1000))

    def update_record(self, analysis_id: str, *, expected_status: str | None = None,
                      **fields) -> AnalysisView:
        """UpdateAnalysisRecord of the named `fields` only (a FieldMask of their names).

        Args:
            analysis_id: the record.
            expected_status: the status the caller read; another one answers TransitionRace.
            fields: values of status, reason, error_message, attempts, cluster_object_name.

        Raises:
            ValueError: a field that is not writable (no call is made).
            TransitionRace, InvalidTransition, NotFound: as the server says.
        """
        unknown = set(fields) - WRITABLE_FIELDS
        if unknown:
            raise ValueError(f"not writable by UpdateAnalysisRecord: {sorted(unknown)}; "
                             f"writable: {sorted(WRITABLE_FIELDS)}")
        request = analysis_pb2.UpdateAnalysisRecordReq(
            analysis_id=analysis_id, record=analysis_pb2.AnalysisRecord(**fields),
            update_mask=field_mask_pb2.FieldMask(paths=sorted(fields)))
        if expected_status is not None:
            request.expected_status = expected_status
        return analysis_view(self.call(self.stub.UpdateAnalysisRecord, request).record)

    def delete_record(self, analysis_id: str) -> None:
        """DeleteAnalysisRecord. Raises Conflict for a non-terminal record, NotFound."""
        self.call(self.stub.DeleteAnalysisRecord,
                  analysis_pb2.DeleteAnalysisRecordReq(analysis_id=analysis_id))
