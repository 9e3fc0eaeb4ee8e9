"""What the resource manager does with one Falcon job, given its cluster job's state (pure).

`decide(observed, job, now)` reads the observed cluster job (`ClusterJobState`, None when the
backend reported none), the Falcon job as the tick listed it, and the time on the manager's
monotonic clock, and returns the actions to take; `decide_submit(outcome, job, now)` does the
same once a submit answered. Neither does I/O nor reads a clock: the loop
(`controllers/resource_manager.py`) observes, calls them and applies their actions, and keeps
the per-job clocks (`JobClocks`) they hand back. The rules are docs/cluster-behaviours.md
CB-7, CB-8, CB-12 and CB-25 and the progress deadline (ResourceManager's docstring).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from core.domain.statuses import JobStatus

from .cluster_backends.base import ClusterJobState, ClusterJobStatus, SubmitResult
from .contract import JobView


@dataclass(frozen=True)
class Limits:
    """The manager's time limits, seconds (None: wait forever)."""

    pending_timeout: float | None = None
    progress_deadline: float | None = None


@dataclass(frozen=True)
class JobClocks:
    """When, on the manager's clock, a job's cluster job was first seen waiting to start
    (`pending_since`) and first seen not running every replica (`degraded_since`)."""

    pending_since: float | None = None
    degraded_since: float | None = None


@dataclass(frozen=True)
class Write:
    """Record a status (the job's own to refresh its reason and message) on the API server.

    Attributes:
        cluster_job_name: the name to record, None when it is recorded already.
        started_at: the cluster's start (CB-25).
        delete_after: delete the cluster job once the write is recorded (a pending timeout).
    """

    status: JobStatus
    reason: str | None = None
    message: str | None = None
    cluster_job_name: str | None = None
    started_at: datetime | None = None
    delete_after: bool = False


@dataclass(frozen=True)
class Submit:
    """Create the cluster job (or adopt the one of its name, CB-3); then `decide_submit`."""


@dataclass(frozen=True)
class Adopt:
    """Submit again a cluster job that exists while no name is recorded, so whatever the
    interrupted submit left undone is made; the actions after it run only if it succeeds."""


@dataclass(frozen=True)
class Delete:
    """Delete the cluster job (and what it left) before the next action."""


@dataclass(frozen=True)
class KeepLogs:
    """Copy the replicas' output to the artifact store before the cluster may remove it."""


@dataclass(frozen=True)
class Retry:
    """Raise the submit's refusal: the job is retried next tick."""


Action = Write | Submit | Adopt | Delete | KeepLogs | Retry


@dataclass(frozen=True)
class Decision:
    """The actions for one job, in order, and its clocks after them."""

    actions: tuple[Action, ...] = ()
    clocks: JobClocks = field(default_factory=JobClocks)


def _pending_too_long(job: JobView, clocks: JobClocks, now: float,
                      limits: Limits) -> tuple[bool, JobClocks]:
    """Whether a Pending job has waited past `pending_timeout`; the first ask starts its clock."""
    if limits.pending_timeout is None or job.status != JobStatus.PENDING:
        return False, clocks
    if clocks.pending_since is None:
        clocks = replace(clocks, pending_since=now)
    return now - clocks.pending_since > limits.pending_timeout, clocks


def decide(observed: ClusterJobState | None, job: JobView, now: float, *, name: str,
           clocks: JobClocks = JobClocks(), limits: Limits = Limits()) -> Decision:
    """Return what to do with a Pending or Running job whose cluster job is `observed`.

    Args:
        observed: the cluster job's state from `backend.observe`; None when not reported.
        job: the Falcon job as this tick listed it (Pending or Running).
        now: seconds on the manager's monotonic clock.
        name: the cluster job's name (`backend.cluster_job_name(job)`).
        clocks: the job's clocks as the last decision left them.
        limits: the pending timeout and progress deadline.
    """
    if observed is None or observed.status == ClusterJobStatus.MISSING:
        if job.cluster_job_name:
            # It existed (its name is recorded) and is gone: deleted behind Falcon's back
            # (CB-12). What it left is cleaned up; the job fails and is never re-created.
            return Decision((Delete(), Write(
                JobStatus.FAILED, reason="ClusterJobMissing",
                message=f"cluster job {job.cluster_job_name} disappeared (deleted outside "
                "Falcon?); it is not re-created")), clocks)
        if limits.pending_timeout is not None and job.status == JobStatus.PENDING \
                and clocks.pending_since is None:
            # The clock starts at the first attempt: a create refused for ever (a 403 that
            # never clears, a foreign Job on the name) times out like a Pod that never starts.
            clocks = replace(clocks, pending_since=now)
        return Decision((Submit(),), clocks)
    first: tuple[Action, ...] = ()
    if not job.cluster_job_name and not observed.terminal:
        # The cluster job exists but its name was never recorded: a submit stopped half-way
        # (a Kubernetes headless Service may be missing). Submit is idempotent; the name is
        # recorded only after it, so a failure is retried next tick.
        first = (Adopt(),)
    record = None if job.cluster_job_name == name else name
    pending = observed.status == ClusterJobStatus.PENDING and not observed.suspended
    too_long = False
    if pending and job.status != JobStatus.RUNNING and observed.replica_lost:
        too_long, clocks = _pending_too_long(job, clocks, now, limits)
    if pending and (job.status == JobStatus.RUNNING or (observed.replica_lost and not too_long)):
        # A lost replica starts the progress deadline whatever the job's status: a Pod lost
        # before every replica ran once leaves the job unable to run as it is.
        if clocks.degraded_since is None:
            clocks = replace(clocks, degraded_since=now)
        if limits.progress_deadline is not None and \
                now - clocks.degraded_since > limits.progress_deadline:
            return Decision(first + (Write(
                JobStatus.FAILED, reason=observed.reason or "ReplicaLost",
                message=f"not every replica ran for {limits.progress_deadline:g} s (progress "
                f"deadline): {observed.message}", cluster_job_name=record,
                started_at=observed.started_at),), clocks)
        return Decision(first + (Write(job.status, reason=observed.reason,
                                       message=observed.message, cluster_job_name=record),),
                        clocks)
    if observed.status == ClusterJobStatus.PENDING:
        if observed.suspended:
            # Held back on purpose (a queue admits it later): the clock stops (CB-8).
            clocks = replace(clocks, pending_since=None)
        else:
            too_long, clocks = _pending_too_long(job, clocks, now, limits)
            if too_long:
                # Failed at once, the delete after the write is recorded; what is left is an
                # orphan of a terminal job, which the sweep removes (CB-7).
                return Decision(first + (Write(
                    JobStatus.FAILED, reason="PendingTimeout",
                    message=f"still pending after {limits.pending_timeout:g} s, cluster job "
                    f"{name} being deleted: {observed.message}", cluster_job_name=record,
                    delete_after=True),), clocks)
        return Decision(first + (Write(job.status, reason=observed.reason,
                                       message=observed.message, cluster_job_name=record),),
                        clocks)
    if clocks.degraded_since is not None:  # (no copy for the 100,000 jobs that run)
        clocks = replace(clocks, degraded_since=None)
    logs: tuple[Action, ...] = (KeepLogs(),) if observed.terminal else ()
    return Decision(first + logs + (Write(
        JobStatus(observed.status.value), reason=observed.reason, message=observed.message,
        cluster_job_name=record, started_at=observed.started_at),), clocks)


@dataclass(frozen=True)
class Submitted:
    """The submit created or adopted the cluster job."""

    result: SubmitResult


@dataclass(frozen=True)
class Waiting:
    """The cluster has no room for the job yet (`WaitingForCapacity`, CB-23)."""

    message: str


@dataclass(frozen=True)
class Refused:
    """The submit failed in a way a later attempt may get past (`BackendError`)."""

    message: str


SubmitOutcome = Submitted | Waiting | Refused


def decide_submit(outcome: SubmitOutcome, job: JobView, now: float, *,
                  clocks: JobClocks = JobClocks(), limits: Limits = Limits()) -> Decision:
    """Return what to do once the submit `decide` asked for answered `outcome`.

    A submit refused for good has been answered already (the job failed `ClusterRejected`).
    """
    if isinstance(outcome, Waiting):
        # Waiting its turn, not failing to start: no pending-timeout clock (CB-8).
        return Decision((Write(JobStatus.PENDING, reason="WaitingForCapacity",
                               message=outcome.message),), replace(clocks, pending_since=None))
    if isinstance(outcome, Refused):
        too_long, clocks = _pending_too_long(job, clocks, now, limits)
        if too_long:
            return Decision((Write(
                JobStatus.FAILED, reason="PendingTimeout",
                message=f"the cluster job could not be created within "
                f"{limits.pending_timeout:g} s; last refusal: {outcome.message}"),), clocks)
        return Decision((Retry(),), clocks)
    if clocks.pending_since is None:
        clocks = replace(clocks, pending_since=now)
    return Decision((Write(JobStatus.PENDING, reason="Submitted", message=outcome.result.message,
                           cluster_job_name=outcome.result.cluster_job_name),), clocks)
