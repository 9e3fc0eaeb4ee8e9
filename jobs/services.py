"""Job use cases that write: UpdateJobStatus, UpdateJobStatuses, DeleteJob (CreateJob adds a
row to an experiment, so it lives with the experiment: `experiments.services.job_create`)."""
from __future__ import annotations

from datetime import datetime

from core.database.db import retry_on_lock_conflict
from core.domain.statemachine import (
    StatusChange,
    StatusOutcome,
    apply_transitions,
    validate_status_batch,
)
from core.domain.statuses import JobStatus

from .models import Job


@retry_on_lock_conflict
def job_update_status(*, job_id: int, status: str, reason: str | None = None,
                      message: str | None = None, expected: str | None = None,
                      cluster_job_name: str | None = None,
                      started_at: datetime | None = None) -> tuple[Job, bool]:
    """UpdateJobStatus: apply a guarded transition of the Job state machine.

    Args:
        job_id: the job's id.
        status: the target status (`JobStatus` value).
        reason, message: cause and detail, kept unchanged when None.
        expected: the status the caller read; a row found elsewhere raises `TransitionRace`.
        cluster_job_name: the cluster object's name, recorded with the transition.
        started_at: when the cluster started the job (Kubernetes Job `status.startTime`, the
            local backend's first replica start), with Running, Succeeded or Failed: the
            job's `started_at` if it has none yet, clamped to [its creation, now]
            (`core.domain.statemachine.clamp_start`).

    Returns:
        `(job, changed)`.

    Raises:
        NotFound, InvalidTransition, TransitionRace: see `StatefulModel.transition_pk`.
        ValidationFailed: `started_at` with another status (keyed `started_at`).
    """
    extra = {"cluster_job_name": cluster_job_name} if cluster_job_name is not None else None
    return Job.transition_pk(job_id, status, reason=reason, message=message, expected=expected,
                             extra=extra, started_at=started_at)


@retry_on_lock_conflict
def job_update_statuses(changes: list[StatusChange]) -> list[StatusOutcome]:
    """UpdateJobStatuses: apply many guarded Job transitions; one outcome per item.

    Each item is the transition `job_update_status` applies (the same table, `expected` check
    and cut of text, `cluster_job_name` recorded with it), all in one transaction
    (`core.domain.statemachine.apply_transitions`: one locking read by primary key in ascending order,
    rows moved with the same values in one UPDATE), so the resource manager writes a tick's
    10,000 changes in ten calls instead of 10,000. A refused item is reported in its outcome
    (`StatusOutcome.error`: NotFound, InvalidTransition, TransitionRace) and never fails the
    others; two items of one job apply in order.

    Args:
        changes: at most `MAX_STATUS_BATCH` items (`core.domain.statemachine.StatusChange`, `pk` the
            job id; `extra` may set `cluster_job_name`; `started_at` as `job_update_status`
            takes it).

    Returns:
        One `core.domain.statemachine.StatusOutcome` per item, in order (`pk` is the job id).

    Raises:
        ValidationFailed: more than `MAX_STATUS_BATCH` items, an unknown status, or a
            `started_at` with a status that takes none.
    """
    validate_status_batch(JobStatus, changes, extra_columns=frozenset({"cluster_job_name"}),
                          machine=Job.machine)
    return apply_transitions(Job.machine, Job, changes)


@retry_on_lock_conflict
def job_delete(*, job_id: int) -> None:
    """DeleteJob: delete one job record, only when it is terminal (Succeeded, Failed, Aborted).

    A job that may still have a cluster object (Pending, Running, Aborting) is never deleted, so
    no cluster job is left running without a record (the rule of DeleteExp). The
    status check is part of the DELETE statement, so it cannot race a status change. The
    experiment's `role_to_task_spec` keeps the role: it records what was asked for.

    Raises:
        NotFound: no such job.
        Conflict: the job is not terminal (HTTP 409): abort its experiment first.
    """
    Job.delete_terminal_pk(job_id, hint=" Abort its experiment first.")
