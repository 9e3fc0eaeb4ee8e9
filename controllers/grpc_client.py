"""`FalconAPI` over gRPC: what the controllers use to reach the API server.

Controllers never touch the database; every read and write goes through the falcon.v1 services
(decisions.md#dec-grpc-only).
This client turns messages into the frozen views of `controllers.contract` and failed calls back into
the `FalconError` subclasses the server raised (`core.grpc.errors.error_from_rpc_error`):
NotFound, ValidationFailed, Conflict, InvalidTransition, TransitionRace, ..., and
`ApiUnavailable` (retryable) / `ApiCallFailed` / `Unauthenticated` for transport failures.

Every call has a deadline (`timeout` seconds). List calls follow `next_page_token` to the end;
each page has its own deadline. No Django import is needed except in `from_settings()`.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, TypeVar

import grpc
import orjson

from core.grpc.channel import CHANNEL_OPTIONS, auth_metadata
from core.grpc.from_proto import timestamp
from core.errors import FalconError
from core.grpc.errors import error_class_for_code, error_from_rpc_error
from core.domain.statuses import ArtifactStatus, ExpStatus, JobStatus
from core.domain.taskspec import EMPTY, TaskSpec
from core.limits.text import truncate
from falcon_proto.falcon.v1 import (
    artifact_pb2, artifact_pb2_grpc, common_pb2, experiment_pb2, experiment_pb2_grpc, job_pb2,
    job_pb2_grpc,
)

from .contract import (
    ArtifactView,
    ExpState,
    ExpStatusUpdate,
    ExpView,
    ItemResult,
    JobStatusUpdate,
    JobView,
    ListFilter,
    Listing,
    SkippedRow,
    job_view_of,
)

V = TypeVar("V")

log = logging.getLogger("falcon.controllers.grpc")

# Items per UpdateExpStatuses and UpdateJobStatuses call: the server's limit
# (core.domain.statemachine.MAX_STATUS_BATCH).
BATCH_SIZE = 1000
# Experiments per ListExpStates page, jobs per ListJobStates page: the servers' largest
# (experiment_servicer, job_servicer).
STATES_PAGE_SIZE = 5000
# The server's bounds of the text a transition carries (core.domain.statemachine.bounded_text: a
# column's 255 characters for reason and cluster_job_name, MAX_STATUS_MESSAGE_BYTES for a
# message), applied before sending, so that no write is refused for its size (a 20 MiB message
# passes gRPC's 16 MiB limit, and 1,000 messages of 64 KiB would too). The server cuts the
# same way, so what is stored is what it would store; a test checks the numbers match.
TEXT_MAX_CHARS = 255
MESSAGE_MAX_BYTES = 64 * 1024
# A batch call ends before its items pass this many encoded bytes (the limit is 16 MiB).
BATCH_BYTES = 8 * 1024 * 1024
# ListFilter.extra keys this transport understands.
_EXTRA_KEYS = frozenset({"page_size"})


def _dt(message: Any, field: str) -> datetime | None:
    if not message.HasField(field):
        return None
    return getattr(message, field).ToDatetime(tzinfo=timezone.utc)


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _view(cls: type[V], **values: Any) -> V:
    """Build a view dataclass from the values it declares (the views may gain fields)."""
    names = _field_names(cls)
    return cls(**{key: value for key, value in values.items() if key in names})


# The statuses by their names: a dict lookup, not the enum's call, for the 100,000 jobs of a
# resource manager's tick (a name it lacks goes through the enum, which raises ValueError).
_JOB_STATUSES = {s.value: s for s in JobStatus}
_EXP_STATUSES = {s.value: s for s in ExpStatus}


def _job_status(text: str) -> JobStatus:
    return _JOB_STATUSES.get(text) or JobStatus(text)


def _exp_status(text: str) -> ExpStatus | None:
    """Return the experiment status a job reply carries, or None when it carries none (the
    write RPCs leave `exp_status` empty)."""
    return (_EXP_STATUSES.get(text) or ExpStatus(text)) if text else None


def exp_view(item: experiment_pb2.ExpItem) -> ExpView:
    """Return the `ExpView` of a `falcon.v1.ExpItem`."""
    return _view(ExpView, id=item.id, name=item.name, status=ExpStatus(item.status),
                 cluster_name=item.cluster_name, exp_type=item.exp_type,
                 artifact_path=item.artifact_path, reason=item.reason, message=item.message,
                 created_at=_dt(item, "created_at"), updated_at=_dt(item, "updated_at"),
                 started_at=_dt(item, "started_at"), finished_at=_dt(item, "finished_at"),
                 aborting_at=_dt(item, "aborting_at"), aborted_at=_dt(item, "aborted_at"))


def job_view(item: job_pb2.JobItem) -> JobView:
    """Return the `JobView` of a `falcon.v1.JobItem` (task_spec parsed from its JSON).

    Raises:
        ValueError: `task_spec_json` is not a JSON TaskSpec (`TaskSpec.from_json`).
    """
    return _view(JobView, id=item.id, exp_id=item.exp_id, exp_name=item.exp_name,
                 exp_status=_exp_status(item.exp_status), role=item.role,
                 cluster_name=item.cluster_name,
                 exp_type=item.exp_type,
                 task_spec=(TaskSpec.from_json(json.loads(item.task_spec_json))
                            if item.task_spec_json else EMPTY),
                 artifact_path=item.artifact_path, config=item.exp_config,
                 status=JobStatus(item.status),
                 reason=item.reason, message=item.message,
                 cluster_job_name=item.cluster_job_name, priority=item.priority,
                 created_at=_dt(item, "created_at"), updated_at=_dt(item, "updated_at"),
                 started_at=_dt(item, "started_at"), finished_at=_dt(item, "finished_at"),
                 aborting_at=_dt(item, "aborting_at"), aborted_at=_dt(item, "aborted_at"))


def job_state_view(item: job_pb2.JobState) -> JobView:
    """Return the `JobView` of a `falcon.v1.JobState`: no timestamps or priority; `config`
    empty and `task_spec` `EMPTY` for a job whose cluster job name is recorded (see
    ListJobStates, `submit_specs_only`), `image` the spec's image for every job.

    Raises:
        ValueError: `task_spec_json` is not strict JSON (`orjson.JSONDecodeError`) or not a
            TaskSpec (the list skips the job).
    """
    spec = item.task_spec_json
    # Every field, by name (`job_view_of`: a dict literal is the cheapest way to 100,000 views).
    return job_view_of({
        "id": item.id, "exp_id": item.exp_id, "exp_name": item.exp_name,
        "exp_status": _exp_status(item.exp_status), "role": item.role,
        "cluster_name": item.cluster_name, "exp_type": item.exp_type,
        "task_spec": TaskSpec.from_json(orjson.loads(spec)) if spec else EMPTY,
        "artifact_path": item.artifact_path, "config": item.exp_config,
        "status": _job_status(item.status), "reason": item.reason, "message": item.message,
        "cluster_job_name": item.cluster_job_name, "priority": -1, "created_at": None,
        "updated_at": None, "started_at": None, "aborting_at": None,
        "creator": item.exp_creator_email, "image": item.image})


def artifact_view(item: artifact_pb2.ArtifactItem) -> ArtifactView:
    """Return the `ArtifactView` of a `falcon.v1.ArtifactItem`."""
    return _view(ArtifactView, id=item.id, exp_id=item.exp_id, path=item.path,
                 artifact_type=item.artifact_type, status=ArtifactStatus(item.status),
                 reason=item.reason,
                 message=item.message, created_at=_dt(item, "created_at"),
                 updated_at=_dt(item, "updated_at"), finished_at=_dt(item, "finished_at"))


def exp_state_view(item: experiment_pb2.ExpState) -> ExpState:
    """Return the `ExpState` of a `falcon.v1.ExpState` (see `contract.ExpState` for what its
    jobs leave empty)."""
    # Positional arguments, in the views' field order: a tick builds 15,000 of these.
    exp_id, name, status = item.id, item.name, ExpStatus(item.status)
    cluster, exp_type, path = item.cluster_name, item.exp_type, item.artifact_path
    exp = ExpView(exp_id, name, status, cluster, exp_type, path, item.reason, item.message)
    jobs = tuple(JobView(j.id, exp_id, name, status, j.role, cluster, exp_type, EMPTY, path, "",
                         JobStatus(j.status), j.reason, j.message)
                 for j in item.jobs)
    artifact = None
    if item.HasField("artifact"):
        a = item.artifact
        artifact = ArtifactView(a.id, exp_id, a.path, a.artifact_type, ArtifactStatus(a.status),
                                a.reason, a.message)
    return ExpState(exp, jobs, artifact)


def list_request(flt: ListFilter) -> common_pb2.CommonListReq:
    """Return the `CommonListReq` of a `ListFilter` (first page).

    Raises:
        ValueError: `flt.extra` holds a key the gRPC API does not know (only `page_size`).
    """
    unknown = set(flt.extra) - _EXTRA_KEYS
    if unknown:
        raise ValueError(f"ListFilter.extra keys {sorted(unknown)} are not filters of the gRPC "
                         f"API; it knows {sorted(_EXTRA_KEYS)}")
    request = common_pb2.CommonListReq(
        statuses=flt.statuses, exp_statuses=flt.exp_statuses, cluster_names=flt.cluster_names,
        exp_types=flt.exp_types, ids=flt.ids, exp_ids=flt.exp_ids,
        page_size=int(flt.extra.get("page_size", 0)))
    if flt.updated_since is not None:
        request.updated_since.FromDatetime(flt.updated_since.astimezone(timezone.utc)
                                           if flt.updated_since.tzinfo else flt.updated_since)
    return request


class GrpcClient:
    """What every controller's client of the API server shares: one channel, the service token,
    a deadline per call, and the domain errors rebuilt from a failed call's status.

    Args:
        target: the API server's `host:port` (a gRPC target string).
        token: the internal service token (`FALCON_INTERNAL_TOKEN`), a JWT, or a function
            returning the current one (`controllers.service_token`: a Cloudflare service token is
            refreshed before it expires); sent as `authorization: Bearer <token>` on every call.
        timeout: the deadline of every call (each page of a list), in seconds.
        channel: an existing channel to use instead of opening one to `target` (tests,
            TLS set up by the caller); it is then not closed by `close()`.

    Subclasses make their stubs in `_stubs(channel)`.

    Raises:
        ValueError: `token` is empty or `timeout` is not positive.
    """

    def __init__(self, target: str, token: str | Callable[[], str], timeout: float = 10.0, *,
                 channel: grpc.Channel | None = None):
        if not token:
            raise ValueError("a token is required: set FALCON_INTERNAL_TOKEN")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive seconds; got {timeout}")
        self.target = target
        self.timeout = timeout
        self._token = token if callable(token) else (lambda: token)
        self._owns_channel = channel is None
        self._channel = channel or grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self._stubs(self._channel)

    def _stubs(self, channel: grpc.Channel) -> None:
        """Make this client's service stubs on `channel`."""

    @classmethod
    def from_settings(cls, timeout: float = 10.0):
        """Build a client from settings: `FALCON_GRPC_TARGET` and the auth mode's credentials
        (`controllers.service_token.token_source_from_settings`).

        Raises:
            django.core.exceptions.ImproperlyConfigured: the mode's credentials are not set.
        """
        from django.conf import settings

        from .service_token import token_source_from_settings

        target = getattr(settings, "FALCON_GRPC_TARGET", "") or "127.0.0.1:50051"
        return cls(target, token_source_from_settings(), timeout)

    def close(self) -> None:
        """Close the channel if this client opened it."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class GrpcFalconAPI(GrpcClient):
    """The `controllers.contract.FalconAPI` contract over the falcon.v1 gRPC services
    (ExperimentService, JobService, ArtifactService); arguments as `GrpcClient`."""

    def _stubs(self, channel: grpc.Channel) -> None:
        self.exps = experiment_pb2_grpc.ExperimentServiceStub(channel)
        self.jobs = job_pb2_grpc.JobServiceStub(channel)
        self.artifacts = artifact_pb2_grpc.ArtifactServiceStub(channel)

    def call(self, method: Callable, request: Any) -> Any:
        """Call one stub method with the deadline and credentials.

        Raises:
            FalconError: the subclass the server's error maps back to.
        """
        try:
            metadata = auth_metadata(self._token())
            return method(request, timeout=self.timeout, metadata=metadata)
        except grpc.RpcError as exc:
            raise error_from_rpc_error(exc) from None

    def _list_all(self, method: Callable, flt: ListFilter | None, items: str,
                  to_view: Callable[[Any], V], exp_id_of: Callable[[Any], int],
                  request: Any = None) -> Listing:
        """Every page of a list call, as a `Listing` of views.

        The request is `list_request(flt)` (a CommonListReq), or `request` (another list
        request with `page_token`). Rows the server skipped (its `skipped` field) and items
        this client cannot turn into a view (a task spec that is not JSON) are left out and
        named in `Listing.skipped`; the latter are logged here with the reason.
        """
        if request is None:
            request = list_request(flt)
        out: list[V] = []
        skipped: list[SkippedRow] = []
        while True:
            response = self.call(method, request)
            for item in getattr(response, items):
                try:
                    out.append(to_view(item))
                except Exception as exc:  # one unreadable item must not fail the list
                    skipped.append(SkippedRow(id=item.id, exp_id=exp_id_of(item)))
                    log.error("%s: skipped %s %s, which cannot be read: %s: %s", items,
                              type(item).__name__, item.id, type(exc).__name__, exc)
            skipped.extend(SkippedRow(id=row.id, exp_id=row.exp_id) for row in response.skipped)
            if not response.next_page_token:
                return Listing(out, skipped)
            request.page_token = response.next_page_token

    def _send_batches(self, method: Callable, request_class: type, items: list[Any]
                      ) -> list[ItemResult]:
        """Send a batch status call's request items in calls that fit (`_batches`); return
        one `ItemResult` per item, in order.

        Raises:
            FalconError: a call failed; the results of the calls before it are lost with it.
        """
        results: list[ItemResult] = []
        for chunk in _batches(items):
            response = self.call(method, request_class(items=chunk))
            results.extend(_item_results(response.results))
        return results

    # -- FalconAPI -------------------------------------------------------------------------

    def list_exps(self, flt: ListFilter) -> list[ExpView]:
        """ListExps, every page. Raises `ValidationFailed` for exp_statuses / exp_ids."""
        return self._list_all(self.exps.ListExps, flt, "exps", exp_view, lambda item: item.id)

    def list_jobs(self, flt: ListFilter) -> list[JobView]:
        """ListJobs, every page (each job carries its experiment's name, status, config)."""
        return self._list_all(self.jobs.ListJobs, flt, "jobs", job_view,
                              lambda item: item.exp_id)

    def list_job_states(self, flt: ListFilter) -> list[JobView]:
        """ListJobStates, every page (`STATES_PAGE_SIZE` jobs each): the jobs in
        `flt.statuses` of `flt.cluster_names`, as the resource manager reads them (no
        timestamps; the experiment's config and the task spec only for jobs whose cluster job
        name is not recorded yet, the spec's image for every job), as a `Listing`.

        Raises:
            ValueError: `flt` filters on anything but statuses and cluster names.
            ValidationFailed: an unknown status; FalconError: the call failed.
        """
        if replace(flt, statuses=(), cluster_names=()) != ListFilter():
            raise ValueError("ListJobStates filters only on statuses and cluster_names")
        request = job_pb2.ListJobStatesReq(statuses=flt.statuses,
                                           cluster_names=flt.cluster_names,
                                           page_size=STATES_PAGE_SIZE, submit_specs_only=True)
        return self._list_all(self.jobs.ListJobStates, None, "jobs", job_state_view,
                              lambda item: item.exp_id, request=request)

    def list_job_state_pages(self, flt: ListFilter) -> Iterator[Listing]:
        """ListJobStates, one page at a time (`STATES_PAGE_SIZE` jobs each): what
        `list_job_states` returns, each page a `Listing` of `JobView` whose `skipped` are the
        jobs of that page the server could not send or this client could not read. The next
        call is made when the caller asks for the next page, so a caller that acts on a page
        before the next holds one page, whatever the number of jobs.

        Raises:
            ValueError: `flt` filters on anything but statuses and cluster names.
            ValidationFailed: an unknown status; FalconError: a call failed (the pages
            yielded before it stand).
        """
        if replace(flt, statuses=(), cluster_names=()) != ListFilter():
            raise ValueError("ListJobStates filters only on statuses and cluster_names")
        request = job_pb2.ListJobStatesReq(statuses=flt.statuses,
                                           cluster_names=flt.cluster_names,
                                           page_size=STATES_PAGE_SIZE, submit_specs_only=True)
        while True:
            response = self.call(self.jobs.ListJobStates, request)
            views: list[JobView] = []
            skipped = [SkippedRow(id=row.id, exp_id=row.exp_id) for row in response.skipped]
            for item in response.jobs:
                try:
                    views.append(job_state_view(item))
                except Exception as exc:  # one unreadable item must not fail the list
                    skipped.append(SkippedRow(id=item.id, exp_id=item.exp_id))
                    log.error("jobs: skipped %s %s, which cannot be read: %s: %s",
                              type(item).__name__, item.id, type(exc).__name__, exc)
            token = response.next_page_token
            del response  # the page's messages go before the caller acts on its views
            yield Listing(views, skipped)
            if not token:
                return
            request.page_token = token

    def list_artifacts(self, flt: ListFilter) -> list[ArtifactView]:
        """ListArtifacts, every page."""
        return self._list_all(self.artifacts.ListArtifacts, flt, "artifacts", artifact_view,
                              lambda item: item.exp_id)

    def list_exp_states(self, statuses: tuple[str, ...]) -> list[ExpState]:
        """ListExpStates, every page (`STATES_PAGE_SIZE` experiments each): the experiments in
        `statuses` with all their jobs and their artifact, as a `Listing` of `ExpState`.

        Raises:
            ValidationFailed: an unknown status; FalconError: the call failed.
        """
        out: list[ExpState] = []
        skipped: list[SkippedRow] = []
        for page in self.list_exp_state_pages(statuses):
            out.extend(page)
            skipped.extend(page.skipped)
        return Listing(out, skipped)

    def list_exp_state_pages(self, statuses: tuple[str, ...]) -> Iterator[Listing]:
        """ListExpStates, one page at a time (`STATES_PAGE_SIZE` experiments each): each
        page a `Listing` of `ExpState`, its `skipped` the experiments the server could not
        send. The next call is made when the caller asks for the next page, so a caller that
        acts on a page before the next holds one page, whatever the number of experiments.

        Raises:
            ValidationFailed: an unknown status; FalconError: a call failed (the pages
            yielded before it stand: each was read in one transaction).
        """
        request = experiment_pb2.ListExpStatesReq(statuses=statuses,
                                                  page_size=STATES_PAGE_SIZE)
        while True:
            response = self.call(self.exps.ListExpStates, request)
            yield Listing((exp_state_view(item) for item in response.exps),
                          (SkippedRow(id=row.id, exp_id=row.exp_id) for row in response.skipped))
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token
            del response  # the page's messages go before the next page arrives

    def update_exp_status(self, *, exp_id: int, status: ExpStatus, reason: str | None = None,
                          message: str | None = None) -> ExpView:
        """UpdateExpStatus; None leaves reason/message unchanged; text is bounded first, as the
        server bounds it (`_sendable`).

        Raises:
            NotFound, InvalidTransition, ValidationFailed, ApiCallFailed: as the server says.
        """
        request = experiment_pb2.UpdateExpStatusReq(id=exp_id, status=status,
                                                    reason=_reason(reason),
                                                    message=_message(message))
        return exp_view(self.call(self.exps.UpdateExpStatus, request).exp)

    def update_exp_statuses(self, updates: list[ExpStatusUpdate]) -> list[ItemResult]:
        """UpdateExpStatuses, at most `BATCH_SIZE` items and `BATCH_BYTES` per call; one
        `ItemResult` per update, in order. Text is bounded first (`_sendable`).

        A refused item carries the `FalconError` its code names (NotFound, InvalidTransition,
        TransitionRace, ...); the call itself raises only when the whole call failed.

        Raises:
            FalconError: the call failed (ApiUnavailable, ValidationFailed, ...).
        """
        return self._send_batches(
            self.exps.UpdateExpStatuses, experiment_pb2.UpdateExpStatusesReq,
            [experiment_pb2.UpdateExpStatusReq(id=u.exp_id, status=u.status,
                                               reason=_reason(u.reason),
                                               message=_message(u.message))
             for u in updates])

    def update_job_status(self, *, job_id: int, status: JobStatus, reason: str | None = None,
                          message: str | None = None, cluster_job_name: str | None = None,
                          started_at: datetime | None = None) -> JobView:
        """UpdateJobStatus; None leaves reason/message/cluster_job_name unchanged; text is
        bounded first, as the server bounds it (`_sendable`). `started_at`: the cluster's
        start of the job, with Running, Succeeded or Failed (`JobStatusUpdate`).

        Raises:
            NotFound, InvalidTransition, ValidationFailed, ApiCallFailed: as the server says.
        """
        request = job_pb2.UpdateJobStatusReq(id=job_id, status=status, reason=_reason(reason),
                                             message=_message(message),
                                             cluster_job_name=_reason(cluster_job_name),
                                             started_at=timestamp(started_at))
        return job_view(self.call(self.jobs.UpdateJobStatus, request).job)

    def update_job_statuses(self, updates: list[JobStatusUpdate]) -> list[ItemResult]:
        """UpdateJobStatuses, at most `BATCH_SIZE` items and `BATCH_BYTES` per call; one
        `ItemResult` per update, in order. Text is bounded first (`_sendable`).

        A refused item carries the `FalconError` its code names (NotFound, InvalidTransition,
        TransitionRace); the call itself raises only when the whole call failed.

        Raises:
            FalconError: the call failed (ApiUnavailable, ValidationFailed, ...).
        """
        return self._send_batches(
            self.jobs.UpdateJobStatuses, job_pb2.UpdateJobStatusesReq,
            [job_pb2.UpdateJobStatusReq(id=u.job_id, status=u.status, reason=_reason(u.reason),
                                        message=_message(u.message),
                                        cluster_job_name=_reason(u.cluster_job_name),
                                        started_at=timestamp(u.started_at))
             for u in updates])

    def update_artifact_status(self, *, artifact_id: int, status: ArtifactStatus,
                               reason: str | None = None,
                               message: str | None = None) -> ArtifactView:
        """UpdateArtifactStatus; None leaves reason/message unchanged; text is bounded first,
        as the server bounds it (`_sendable`).

        Raises:
            NotFound, InvalidTransition, ValidationFailed, ApiCallFailed: as the server says.
        """
        request = artifact_pb2.UpdateArtifactStatusReq(id=artifact_id, status=status,
                                                       reason=_reason(reason),
                                                       message=_message(message))
        return artifact_view(self.call(self.artifacts.UpdateArtifactStatus, request).artifact)


def _sendable(text: str | None, *, max_chars: int | None = None,
              max_bytes: int | None = None) -> str | None:
    """`text` as the server would store it, and as protobuf can encode it: cut with the
    marker (`core.limits.text.truncate`), lone surrogates (not UTF-8: protobuf refuses them, and the
    whole request with them) replaced by '?'. None stays None (the field is left unchanged)."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return truncate(text, max_chars=max_chars, max_bytes=max_bytes)


def _reason(text: str | None) -> str | None:
    return _sendable(text, max_chars=TEXT_MAX_CHARS)


def _message(text: str | None) -> str | None:
    return _sendable(text, max_bytes=MESSAGE_MAX_BYTES)


def _batches(items: list[Any]) -> Iterator[list[Any]]:
    """Split a batch call's request items into calls of at most `BATCH_SIZE` items and
    `BATCH_BYTES` encoded bytes (an item's own bytes plus its tag and length)."""
    chunk: list[Any] = []
    size = 0
    for item in items:
        item_bytes = item.ByteSize() + 8
        if chunk and (len(chunk) >= BATCH_SIZE or size + item_bytes > BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += item_bytes
    if chunk:
        yield chunk


def _item_results(items) -> list[ItemResult]:
    """The `ItemResult`s of a batch reply's results (UpdateExpStatusResult,
    UpdateJobStatusResult), each refusal rebuilt as the `FalconError` its code names."""
    results = []
    for item in items:
        error = None
        if item.error_code:
            cls = error_class_for_code(item.error_code) or FalconError
            error = cls(item.error_message)
        results.append(ItemResult(id=item.id, changed=item.changed, error=error))
    return results


def from_settings(timeout: float = 10.0) -> GrpcFalconAPI:
    """Return `GrpcFalconAPI.from_settings(timeout)` (FALCON_GRPC_TARGET, FALCON_INTERNAL_TOKEN)."""
    return GrpcFalconAPI.from_settings(timeout)
