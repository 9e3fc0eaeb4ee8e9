"""Job use cases that write (seed 000, 3.3.1 and 3.5): CreateJob, UpdateJobStatus, DeleteJob."""
from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from experiments.models import Experiment, ExpStatus
from experiments.specs import DNS1123_LABEL, DNS1123_LABEL_MAX, validate_task_spec
from core.errors import Conflict, NotFound, ValidationFailed
from experiments.locks import lock_experiment_with_jobs
from core.statemachine import apply_transition, delete_terminal

from . import state
from .models import Job

# The experiment states a job may be added in: not terminal, and not Aborting (the abort flow
# already moved every job to Aborting; a new Pending job would be launched after it).
_OPEN_EXP_STATUSES = frozenset({ExpStatus.CREATED, ExpStatus.RUNNING})


def job_create(*, exp_id: int, role: Any, task_spec: Any) -> Job:
    """CreateJob: add a Pending job for a new role to an existing, open experiment.

    The job copies the experiment's cluster, type and priority, writes under
    `<experiment artifact_path>/<role>` (as `exp_create` does), and the role is added to the
    experiment's `role_to_task_spec`, so the experiment keeps one job per role of its spec
    (architecture page, Experiment state machine). One transaction, experiment row locked.

    Args:
        exp_id: the experiment's id.
        role: a Kubernetes DNS-1123 label not yet used by the experiment's jobs.
        task_spec: a TaskSpec mapping (seed 3.3.4: `command`, `replica`, `image`,
            `device_count`, `device_type`, `device_topo`, `envs`), validated as in CreateExp.

    Returns:
        The created job (status Pending).

    Raises:
        ValidationFailed: `role` or a `task_spec.<field>` is malformed, or the spec cannot run
            on the experiment's cluster (nothing is written).
        NotFound: no such experiment.
        Conflict: the experiment is terminal (Succeeded, Failed, Aborted) or Aborting, or
            already has a job for `role` (HTTP 409).
    """
    errors: dict[str, list[str]] = {}
    spec: dict[str, Any] = {}
    if not isinstance(role, str) or len(role) > DNS1123_LABEL_MAX or not DNS1123_LABEL.match(role):
        errors["role"] = [
            f"{role!r} is not a valid role name: use a Kubernetes DNS-1123 label (lowercase "
            "letters, digits and '-', starting and ending with a letter or digit, at most 63 "
            "characters)."]
    else:
        spec_errors: dict[str, list[str]] = {}
        spec = validate_task_spec(role, task_spec, spec_errors)
        prefix = f"role_to_task_spec.{role}"
        for field, messages in spec_errors.items():
            errors["task_spec" + field[len(prefix):]] = messages
    if not errors:
        # The spec must also run on the experiment's cluster (an image and a known device type
        # on Kubernetes), checked now as CreateExp does, not found out by a failing cluster Job.
        # The cluster of an experiment never changes, so reading it first is safe.
        from controllers.clusters import cluster_problems

        cluster = (Experiment.objects.filter(pk=exp_id)
                   .values_list("cluster_name", flat=True).first())
        if cluster is None:
            raise NotFound(f"Experiment {exp_id} does not exist.")
        prefix = f"role_to_task_spec.{role}"
        for field, messages in cluster_problems(cluster, {role: spec}).items():
            errors["task_spec" + field[len(prefix):] if field.startswith(prefix)
                   else field] = messages
    if errors:
        raise ValidationFailed(errors)

    with transaction.atomic():
        exp, jobs = lock_experiment_with_jobs(exp_id)
        if exp.status not in _OPEN_EXP_STATUSES:
            raise Conflict(f"Experiment {exp_id} is {exp.status}; jobs can be added only to "
                           "Created or Running experiments.")
        if any(job.role == role for job in jobs):
            raise Conflict(f"Experiment {exp_id} already has a job for role {role!r}; "
                           "use another role name.")
        try:
            with transaction.atomic():
                job = Job.objects.create(
                    experiment=exp, cluster_name=exp.cluster_name, exp_type=exp.exp_type,
                    role=role, task_spec=spec, artifact_path=f"{exp.artifact_path}/{role}",
                    priority=exp.priority)
        except IntegrityError:  # uk_job_exp_role: a writer that does not lock got there first
            raise Conflict(f"Experiment {exp_id} already has a job for role {role!r}; "
                           "use another role name.") from None
        Experiment.objects.filter(pk=exp_id).update(
            role_to_task_spec={**exp.role_to_task_spec, role: spec}, updated_at=timezone.now())
    return job


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


def job_delete(*, job_id: int) -> None:
    """DeleteJob: delete one job record, only when it is terminal (Succeeded, Failed, Aborted).

    A job that may still have a cluster object (Pending, Running, Aborting) is never deleted, so
    no cluster job is left running without a record (the rule of DeleteExp, seed 3.3.1). The
    status check is part of the DELETE statement, so it cannot race a status change. The
    experiment's `role_to_task_spec` keeps the role: it records what was asked for.

    Raises:
        NotFound: no such job.
        Conflict: the job is not terminal (HTTP 409): abort its experiment first.
    """
    delete_terminal(state.MACHINE, Job.objects, pk=job_id, hint=" Abort its experiment first.")
