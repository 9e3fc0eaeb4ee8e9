"""AnalysisRecordService (falcon.v1): parse the request, call the service or selector, map the
result.

No business rules here: they are in `analysis.services` and `analysis.selectors`. Domain errors
propagate to `falcon_site.grpc.interceptors`, which maps them to gRPC status codes once (a
duplicate create is ALREADY_EXISTS with the existing id in `falcon-analysis-id`). The write RPCs,
ListExpsAwaitingAnalysis and ListRunningAnalyses are for the controllers' identity only
(`accounts.grpc_auth.CONTROLLER_ONLY_METHODS`); any authenticated caller may get and list
records, as experiments, but a script's body only its creator, staff and the analyzer
(`selectors.analysis_script_readable`); lists never carry it.
"""
from __future__ import annotations

from typing import Any

from accounts.grpc_auth import current_principal
from core.errors import ValidationFailed
from core.grpc.from_proto import optional, repeated_values, require_choice
from core.grpc.paging import ordered_keyset_page
from core.domain.statuses import AnalysisStatus
from falcon_proto.falcon.v1 import analysis_pb2, analysis_pb2_grpc

from .. import selectors, services
from ..filters import AnalysisFilter
from .to_proto import awaiting_to_proto, record_to_proto

# UpdateAnalysisRecord's writable paths (AnalysisRecord field -> `analysis_record_update` key).
WRITABLE_PATHS = {
    "status": "status",
    "reason": "reason",
    "error_message": "error_message",
    "attempts": "attempts",
    "cluster_object_name": "cluster_object_name",
}
RECORD_FIELDS = frozenset(analysis_pb2.AnalysisRecord.DESCRIPTOR.fields_by_name)
# ListAnalysisRecordsReq field -> `AnalysisFilter` name.
LIST_FIELDS = {"exp_id": "exp", "statuses": "status", "analysis_type": "analysis_type"}


def require_analysis_id(value: str, field: str = "analysis_id") -> str:
    """Return `value` if it is a non-empty id.

    Raises:
        ValidationFailed: it is empty, reported under `field`.
    """
    if not value:
        raise ValidationFailed({field: [
            "is required: the analysis' id, e.g. an-0f3c9a1b2d4e5f60."]})
    return value


def update_fields(request: analysis_pb2.UpdateAnalysisRecordReq) -> dict[str, Any]:
    """Return `{service key: value}` of the paths in `update_mask` (the record's fields).

    Paths are AnalysisRecord field names, optionally prefixed `record.`; `error_message` is the
    model's `message`.

    Raises:
        ValidationFailed: the mask is empty, or names an unknown or read-only path (each named,
            under `update_mask`).
    """
    paths = list(request.update_mask.paths)
    if not paths:
        raise ValidationFailed({"update_mask": [
            "is required: name the fields to write (status, reason, error_message, attempts, "
            "cluster_object_name)."]})
    problems, fields = [], {}
    for path in paths:
        name = path.removeprefix("record.")
        if name in WRITABLE_PATHS:
            fields[WRITABLE_PATHS[name]] = getattr(request.record, name)
        elif name in RECORD_FIELDS:
            problems.append(f"{path!r} is read-only")
        else:
            problems.append(f"{path!r} is not a field of AnalysisRecord")
    if problems:
        raise ValidationFailed({"update_mask": [
            "; ".join(problems) + ". Writable paths: " + ", ".join(WRITABLE_PATHS) + "."]})
    return fields


class AnalysisRecordServicer(analysis_pb2_grpc.AnalysisRecordServiceServicer):
    """AnalysisRecordService over the service layer."""

    def ListExpsAwaitingAnalysis(self, request, context):
        """ListExpsAwaitingAnalysis -> `services.analysis_offline_discovery` (the owed triples;
        the artifacts examined that owe nothing are settled, so a poll is O(awaiting))."""
        triples = services.analysis_offline_discovery(
            limit=request.limit,
            plugins=[(p.plugin_name, list(p.artifact_types)) for p in request.plugins])
        return analysis_pb2.ListExpsAwaitingAnalysisResp(
            items=[awaiting_to_proto(triple) for triple in triples])

    def CreateAnalysisRecord(self, request, context):
        """CreateAnalysisRecord -> `services.analysis_record_create` (ALREADY_EXISTS on a
        duplicate, with `falcon-analysis-id`)."""
        record = services.analysis_record_create(
            name=request.name, exp_id=request.exp_id, analysis_type=request.analysis_type,
            plugin_name=request.plugin_name, command=request.command,
            script_content=request.script_content, script_name=request.script_name,
            artifact_id=request.artifact_id,
            creator_email=request.creator_email, result_root=request.result_root,
            analysis_id=request.analysis_id,
            plugin_artifact_types=tuple(request.plugin_artifact_types))
        record = selectors.analysis_get(analysis_id=record.analysis_id)
        return analysis_pb2.AnalysisRecordResp(record=record_to_proto(record), changed=True)

    def GetAnalysisRecord(self, request, context):
        """GetAnalysisRecord -> `selectors.analysis_get`; with `with_script`,
        `selectors.analysis_get_with_script` (PERMISSION_DENIED unless the caller may read it)."""
        analysis_id = require_analysis_id(request.analysis_id)
        if not request.with_script:
            return record_to_proto(selectors.analysis_get(analysis_id=analysis_id))
        record = selectors.analysis_get_with_script(analysis_id=analysis_id,
                                                    actor=current_principal().actor)
        return record_to_proto(record, with_script=True)

    def ListAnalysisRecords(self, request, context):
        """ListAnalysisRecords -> `selectors.analysis_list`, one keyset page by
        `(created_at, analysis_id)`."""
        data: dict[str, Any] = {}
        if request.exp_id:
            data["exp"] = [request.exp_id]
        if request.statuses:
            data["status"] = repeated_values(request.statuses, "statuses")
        if request.analysis_type:
            data["analysis_type"] = [request.analysis_type]
        try:
            filters = AnalysisFilter.validate(data)
        except ValidationFailed as exc:
            proto_field = {name: field for field, name in LIST_FIELDS.items()}
            raise ValidationFailed({proto_field.get(name, name): messages
                                    for name, messages in exc.errors.items()}) from None
        return self._page(selectors.analysis_list(filters=filters), request,
                          "ListAnalysisRecords")

    def UpdateAnalysisRecord(self, request, context):
        """UpdateAnalysisRecord -> `services.analysis_record_update` (masked paths only; a
        status change is a guarded transition)."""
        analysis_id = require_analysis_id(request.analysis_id)
        expected = optional(request, "expected_status")
        record, changed = services.analysis_record_update(
            analysis_id, update_fields(request),
            expected_status=None if expected is None else require_choice(
                expected, "expected_status", list(AnalysisStatus)))
        record = selectors.analysis_get(analysis_id=record.analysis_id)
        return analysis_pb2.AnalysisRecordResp(record=record_to_proto(record), changed=changed)

    def DeleteAnalysisRecord(self, request, context):
        """DeleteAnalysisRecord -> `services.analysis_record_delete` (terminal records only)."""
        services.analysis_record_delete(require_analysis_id(request.analysis_id))
        return analysis_pb2.DeleteAnalysisRecordResp()

    def ListRunningAnalyses(self, request, context):
        """ListRunningAnalyses -> `selectors.analysis_running`, paged as ListAnalysisRecords."""
        return self._page(selectors.analysis_running(), request, "ListRunningAnalyses")

    @staticmethod
    def _page(queryset, request, rpc: str) -> analysis_pb2.ListAnalysisRecordsResp:
        page = ordered_keyset_page(queryset, ordering=selectors.LIST_ORDERING,
                                   page_size=request.page_size, page_token=request.page_token,
                                   to_message=record_to_proto, rpc=rpc)
        return analysis_pb2.ListAnalysisRecordsResp(records=page.items,
                                                    next_page_token=page.next_page_token)
