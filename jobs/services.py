"""Job use cases that write: UpdateJobStatus, DeleteJob (CreateJob adds a row to an experiment,
so it lives with the experiment: `experiments.services.job_create`)."""
from __future__ import annotations

from core.db import retry_on_lock_conflict

from .models import Job


@retry_on_lock_conflict
def job_update_status(*, job_id: int, status: str, reason: str | None = None,
                      message: str | None = None, expected: str | None = None,
                      cluster_job_name: str | None = None) -> tuple[Job, bool]:
    """UpdateJobStatus: apply a guarded transition of the Job state machine.

    Args:
        job_id: the job's id.
        status: the target status (`JobStatus` value).
        reason, message: cause and detail, kept unchanged when None.
        expected: the status the caller read; a row found elsewhere raises `TransitionRace`.
        cluster_job_name: the cluster object's name, recorded with the transition.

    Returns:
        `(job, changed)`.

    Raises:
        NotFound, InvalidTransition, TransitionRace: see `StatefulModel.transition_pk`.
    """
    extra = {"cluster_job_name": cluster_job_name} if cluster_job_name is not None else None
    return Job.transition_pk(job_id, status, reason=reason, message=message, expected=expected,
                             extra=extra)


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
