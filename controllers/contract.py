"""What controllers see of the API server: plain data and the calls they make.

Controllers reach data only through the API server's gRPC API (one entry point for
validation and audit; docs/decisions.md#dec-grpc-only). `FalconAPI` is that contract; `controllers.grpc_client.GrpcFalconAPI`
implements it over gRPC. The views are frozen dataclasses with no Django imports, so a loop's
logic never touches the ORM (plain data across the boundary). Statuses travel as the
status enums of `core.domain.statuses`, never as bare strings: the gRPC client converts them once.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from core.domain.statuses import ArtifactStatus, ExpStatus, JobStatus
from core.domain.taskspec import TaskSpec


@dataclass(frozen=True)
class ExpView:
    """An experiment as controllers see it."""

    id: int
    name: str
    status: ExpStatus
    cluster_name: str
    exp_type: str
    artifact_path: str
    reason: str = ""
    message: str = ""
    updated_at: datetime | None = None


@dataclass(frozen=True)
class JobView:
    """A job with the experiment fields a cluster backend needs (name, config, status).

    Read with ListJobStates, a job whose cluster job name is recorded carries no task spec
    (`taskspec.EMPTY`) and no config: only a submit reads them, and it is made only for a job
    with no name recorded. What a tick reads of its spec otherwise is the image: `image`,
    sent for every job, read through `task_image`.
    """

    id: int
    exp_id: int
    exp_name: str
    exp_status: ExpStatus | None  # None: the reply did not carry it (the write RPCs)
    role: str
    cluster_name: str
    exp_type: str
    task_spec: TaskSpec
    artifact_path: str
    config: str
    status: JobStatus
    reason: str = ""
    message: str = ""
    cluster_job_name: str = ""
    priority: int = -1
    created_at: datetime | None = None
    updated_at: datetime | None = None
    started_at: datetime | None = None
    aborting_at: datetime | None = None
    # The experiment creator's email (ListJobStates): whose share of a cluster's capacity the
    # job takes; "" when the read did not carry it (ListJobs), which counts as one user.
    creator: str = ""
    # The task spec's image as ListJobStates sends it for every job, also those it sends no
    # spec for; "" when the read did not carry it (ListJobs: then `task_spec.image` says it).
    image: str = ""

    @property
    def task_image(self) -> str:
        """The task spec's image, whichever way the read carried it ("" when it has none)."""
        return self.image or self.task_spec.image


_new = object.__new__
_set = object.__setattr__


def job_view_of(values: dict[str, Any]) -> JobView:
    """Return `JobView(**values)`, built without the frozen dataclass's `__init__`.

    That `__init__` assigns each of the 21 fields through `object.__setattr__` (3 µs a view,
    the largest part of reading a ListJobStates row); here `values`, which must name every
    field of `JobView` and nothing else, becomes the instance's dict (it is not copied: the
    caller hands it over). The view is the same: equal, frozen, `replace` works. Nothing is
    checked here; its one caller (`grpc_client.job_state_view`) is tested to give every field.
    """
    view = _new(JobView)
    _set(view, "__dict__", values)
    return view


@dataclass(frozen=True)
class ArtifactView:
    """An artifact record."""

    id: int
    exp_id: int
    path: str
    artifact_type: str
    status: ArtifactStatus
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class SkippedRow:
    """A row a list call met but could not read: the API server could not encode it (a value
    out of range in the database) or this client could not parse it. It is not in the list;
    `exp_id` is its experiment (for experiments, the experiment itself)."""

    id: int
    exp_id: int


class Listing(list):
    """The rows of a list call, plus `skipped`: the rows it met but could not read.

    A plain list (a fake API in tests) is a listing without skipped rows: read them with
    `skipped_of`.
    """

    def __init__(self, items: Iterable = (), skipped: Iterable[SkippedRow] = ()):
        super().__init__(items)
        self.skipped: tuple[SkippedRow, ...] = tuple(skipped)


def skipped_of(rows: list) -> tuple[SkippedRow, ...]:
    """Return the skipped rows of a list call's result (none for a plain list)."""
    return getattr(rows, "skipped", ())


@dataclass(frozen=True)
class ExpState:
    """An experiment with every one of its jobs and its artifact, read together
    (`FalconAPI.list_exp_states`): what the exp controller decides a tick from.

    The jobs carry their experiment's fields from `exp` (name, status, cluster, type, artifact
    path) and no task spec or config (`task_spec` `taskspec.EMPTY`, `config` ""): the exp
    controller never
    reads them.
    """

    exp: ExpView
    jobs: tuple[JobView, ...]
    artifact: ArtifactView | None


@dataclass(frozen=True)
class ExpStatusUpdate:
    """One experiment transition of a batch (`FalconAPI.update_exp_statuses`)."""

    exp_id: int
    status: ExpStatus
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class JobStatusUpdate:
    """One job transition of a batch (`FalconAPI.update_job_statuses`); None keeps a field.

    `started_at` is when the cluster started the job (`ClusterJobState.started_at`), sent with
    Running, Succeeded or Failed; the server records it if the job has no start yet.
    """

    job_id: int
    status: JobStatus
    reason: str | None = None
    message: str | None = None
    cluster_job_name: str | None = None
    started_at: datetime | None = None


@dataclass(frozen=True)
class ItemResult:
    """The result of one item of a batch write.

    Attributes:
        id: the row the item was about.
        changed: the transition was applied.
        error: the `core.errors.FalconError` that refused the item (rebuilt from its code),
            None when the item succeeded.
    """

    id: int
    changed: bool
    error: Exception | None = None


@dataclass(frozen=True)
class ListFilter:
    """Filters of a list call (CommonListReq); empty means "no filter"."""

    statuses: tuple[str, ...] = ()
    exp_statuses: tuple[str, ...] = ()  # ListJobs only: the job's experiment status
    cluster_names: tuple[str, ...] = ()
    exp_types: tuple[str, ...] = ()
    ids: tuple[int, ...] = ()
    exp_ids: tuple[int, ...] = ()
    updated_since: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class FalconAPI(Protocol):
    """The API server calls the controllers make. List calls follow page tokens to the end.

    A list call returns the rows it could read; rows it met but could not read are left out
    and, when the result is a `Listing`, named in its `skipped` (`skipped_of`): one bad row never
    fails a list.

    Errors are `core.errors.FalconError` subclasses (NotFound, InvalidTransition,
    TransitionRace, ...) rebuilt from the gRPC status, so controllers branch on the type.
    """

    def list_exps(self, flt: ListFilter) -> list[ExpView]: ...

    def list_jobs(self, flt: ListFilter) -> list[JobView]: ...

    def list_job_states(self, flt: ListFilter) -> list[JobView]:
        """ListJobStates, every page: the jobs in `flt.statuses` of `flt.cluster_names` with
        only what the resource manager reads (no timestamps or priority; `config` only for
        jobs whose cluster job name is not recorded yet). Optional: a client without it is
        read with `list_jobs`."""
        ...

    def list_job_state_pages(self, flt: ListFilter) -> Iterator[list[JobView]]:
        """ListJobStates, one page at a time: what `list_job_states` returns, cut in pages
        (each with its own `skipped_of`), the next read only when the caller asks for it.
        Optional: the resource manager reads with it when the client has it, so that it holds
        one page of the open jobs at a time (a cluster whose backend observes the whole
        cluster at once, `ClusterBackend.observes_whole_cluster`, keeps its jobs to the end)."""
        ...

    def list_artifacts(self, flt: ListFilter) -> list[ArtifactView]: ...

    def list_exp_states(self, statuses: tuple[str, ...]) -> list[ExpState]:
        """ListExpStates, every page: the experiments in `statuses` with all their jobs and
        their artifact (optional: a client without it is read with `list_exps`, `list_jobs`
        and `list_artifacts`). Experiments it could not read are in `skipped_of` the result."""
        ...

    def list_exp_state_pages(self, statuses: tuple[str, ...]) -> Iterator[list[ExpState]]:
        """ListExpStates, one page at a time: what `list_exp_states` returns, cut in pages
        (each with its own `skipped_of`), the next read only when the caller asks for it.
        Optional: the exp controller reads with it when the client has it, so that it holds
        one page of the open experiments at a time."""
        ...

    def update_exp_status(self, *, exp_id: int, status: ExpStatus, reason: str | None = None,
                          message: str | None = None) -> ExpView: ...

    def update_exp_statuses(self, updates: list[ExpStatusUpdate]) -> list[ItemResult]:
        """UpdateExpStatuses: one guarded transition per item, one result per item, in as
        few calls as the batch limit allows (optional: a client without it is called once per
        experiment with `update_exp_status`)."""
        ...

    def update_job_status(self, *, job_id: int, status: JobStatus, reason: str | None = None,
                          message: str | None = None, cluster_job_name: str | None = None,
                          started_at: datetime | None = None) -> JobView:
        """UpdateJobStatus (`started_at` as `JobStatusUpdate` has it; callers pass it only
        when they have one)."""
        ...

    def update_job_statuses(self, updates: list[JobStatusUpdate]) -> list[ItemResult]:
        """UpdateJobStatuses: one guarded transition per item, one result per item, in as
        few calls as the batch limit allows (optional: a client without it is called once per
        job with `update_job_status`)."""
        ...

    def update_artifact_status(self, *, artifact_id: int, status: ArtifactStatus,
                               reason: str | None = None,
                               message: str | None = None) -> ArtifactView: ...
