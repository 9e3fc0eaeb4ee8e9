"""Job use cases that write (seed 000, 3.3.1): UpdateJobStatus."""
from __future__ import annotations

from falcon_site.statemachine import apply_transition

from . import state
from .models import Job


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
        NotFound, InvalidTransition, TransitionRace: see `apply_transition`.
    """
    extra = {"cluster_job_name": cluster_job_name} if cluster_job_name is not None else None
    return apply_transition(state.MACHINE, Job.objects, pk=job_id, target=status, reason=reason,
                            message=message, expected=expected, extra=extra)
