"""Experiment use cases that write (seed 000, 3.3.1): CreateExp, AbortExp, DeleteExp, UpdateExpStatus.

Every interface (DRF views, gRPC servicers, admin actions, controllers) calls these functions, so
no interface can skip a rule.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from accounts.models import User
from accounts.principals import actor_label
from artifacts.models import Artifact
from core.errors import Conflict, PermissionDenied
from experiments.locks import lock_experiment_with_jobs
from core.statemachine import apply_transition, apply_transition_many
from jobs import state as job_state
from jobs.models import Job, JobStatus

from . import state
from .models import Experiment, ExpStatus
from .specs import validate_create


def artifact_path_for(*, exp_id: int, name: str, root: str | None = None) -> str:
    """Return where experiment `exp_id` writes its artifacts: `<root>/<exp_id>-<name>`.

    Args:
        exp_id: the experiment's id.
        name: the experiment's (validated) name.
        root: the artifact root URL (`file:///...` or `gs://bucket/prefix`); defaults to
            `settings.FALCON_ARTIFACT_ROOT`.
    """
    root = (root or settings.FALCON_ARTIFACT_ROOT).rstrip("/")
    return f"{root}/{exp_id}-{name}"


def exp_may_change(*, exp: Experiment, actor) -> bool:
    """True when `actor` may abort or delete `exp`: its creator, or a staff principal.

    Issue 5, item 5: any authenticated principal may read; only the experiment's creator or a
    staff user (set in the admin) may abort or delete it. Services are staff only when they are
    the local mode's internal token (`accounts.principals.INTERNAL_SERVICE`).

    Args:
        exp: the experiment (only `creator_id` is read).
        actor: an `accounts.User` or an `accounts.principals.ServiceIdentity`.
    """
    if getattr(actor, "is_staff", False) and getattr(actor, "is_active", False):
        return True
    return isinstance(actor, User) and actor.is_active and actor.pk == exp.creator_id


def _require_may_change(exp: Experiment, actor, verb: str) -> None:
    if not exp_may_change(exp=exp, actor=actor):
        raise PermissionDenied(f"{actor_label(actor)} may not {verb} experiment {exp.pk}: only "
                               "its creator or a staff user may.")


def exp_create(*, creator, name: Any, cluster_name: Any, exp_type: Any,
               role_to_task_spec: Any, config: Any = "", priority: Any = -1) -> Experiment:
    """CreateExp: write the Experiment, one Job per role and its Artifact in ONE transaction.

    Args:
        creator: the authenticated `accounts.User` (seed 3.4.1: the token's email is the
            creator). A service principal cannot create: an experiment needs a person as its
            creator, who may then abort or delete it.
        name, cluster_name, exp_type: strings (see `experiments.specs.validate_create`).
        role_to_task_spec: `{role: TaskSpec mapping}`, at least one role.
        config: the user's config file as text, stored verbatim and injected as
            `CUSTOM_CONFIG_KEY` (seed 3.3.4); under 128 KiB (`FALCON_CONFIG_MAX_BYTES`).
        priority: integer, default -1 (seed 3.5).

    Returns:
        The created experiment (status Created; its jobs Pending; its artifact Created).

    Raises:
        PermissionDenied: `creator` is not a user (a service principal).
        ValidationFailed: a field is missing or malformed (nothing is written).
        PayloadTooLarge: the config is over `FALCON_CONFIG_MAX_BYTES` (nothing is written).
    """
    if not isinstance(creator, User):
        raise PermissionDenied(f"{actor_label(creator)} cannot create experiments: an "
                               "experiment's creator must be a person (a user token).")
    data = validate_create(name=name, cluster_name=cluster_name, exp_type=exp_type,
                           role_to_task_spec=role_to_task_spec, config=config,
                           priority=priority)
    with transaction.atomic():
        exp = Experiment.objects.create(creator=creator, **data)
        # The path needs the id, which exists only after the INSERT; same transaction.
        exp.artifact_path = artifact_path_for(exp_id=exp.pk, name=exp.name)
        Experiment.objects.filter(pk=exp.pk).update(artifact_path=exp.artifact_path)
        Job.objects.bulk_create([
            Job(experiment=exp, cluster_name=exp.cluster_name, exp_type=exp.exp_type,
                role=role, task_spec=spec, artifact_path=f"{exp.artifact_path}/{role}",
                priority=exp.priority)
            for role, spec in data["role_to_task_spec"].items()
        ])
        Artifact.objects.create(experiment=exp, path=exp.artifact_path,
                                artifact_type=exp.exp_type)
    return exp


def exp_abort(*, exp_id: int, actor) -> Experiment:
    """AbortExp: move the experiment and every non-terminal job to Aborting, in one transaction.

    Sets `aborting_at` (seed 3.3.3, abort flow); the resource manager then stops the cluster jobs
    and the exp controller finishes the experiment as Aborted. Idempotent: an experiment already
    Aborting or Aborted is returned unchanged.

    Args:
        exp_id: the experiment's id.
        actor: who asks: an `accounts.User` or `accounts.principals.ServiceIdentity`; must be
            the creator or staff (`exp_may_change`), and is named in the message.

    Raises:
        NotFound: no such experiment.
        PermissionDenied: `actor` is neither the creator nor staff (HTTP 403), checked before
            the state, so the answer does not depend on it.
        Conflict: the experiment already Succeeded or Failed (HTTP 409).
    """
    with transaction.atomic():
        exp, _jobs = lock_experiment_with_jobs(exp_id)
        _require_may_change(exp, actor, "abort")
        if exp.status in (ExpStatus.ABORTING, ExpStatus.ABORTED):
            return exp
        if exp.status in state.TERMINAL:
            raise Conflict(f"Experiment {exp_id} already {exp.status}; only Created or Running "
                           "experiments can be aborted.")
        message = f"Abort requested by {actor_label(actor)}."
        exp, _ = apply_transition(state.MACHINE, Experiment.objects, pk=exp_id,
                                  target=ExpStatus.ABORTING, reason="AbortRequested",
                                  message=message)
        apply_transition_many(job_state.MACHINE, Job.objects.filter(experiment_id=exp_id),
                              target=JobStatus.ABORTING, reason="AbortRequested",
                              message=message)
    return exp


def exp_delete(*, exp_id: int, actor) -> None:
    """DeleteExp: delete the experiment, its jobs and its artifact record in one transaction.

    Only a terminal experiment (Succeeded, Failed, Aborted) can be deleted, so no cluster job is
    left running without a record. The artifact files stay in the store.

    Args:
        exp_id: the experiment's id.
        actor: who asks: an `accounts.User` or `accounts.principals.ServiceIdentity`; must be
            the creator or staff (`exp_may_change`).

    Raises:
        NotFound: no such experiment.
        PermissionDenied: `actor` is neither the creator nor staff (HTTP 403).
        Conflict: the experiment is not terminal (HTTP 409): abort it first.
    """
    with transaction.atomic():
        exp, _jobs = lock_experiment_with_jobs(exp_id)
        _require_may_change(exp, actor, "delete")
        if exp.status not in state.TERMINAL:
            raise Conflict(f"Experiment {exp_id} is {exp.status}; only Succeeded, Failed or "
                           "Aborted experiments can be deleted. Abort it first.")
        Artifact.objects.filter(experiment_id=exp_id).delete()
        Job.objects.filter(experiment_id=exp_id).delete()
        Experiment.objects.filter(pk=exp_id, status__in=state.TERMINAL).delete()


def exp_update_status(*, exp_id: int, status: str, reason: str | None = None,
                      message: str | None = None, expected: str | None = None
                      ) -> tuple[Experiment, bool]:
    """UpdateExpStatus: apply a guarded transition of the Experiment state machine.

    Returns `(experiment, changed)`; see `core.statemachine.apply_transition` for errors.
    """
    return apply_transition(state.MACHINE, Experiment.objects, pk=exp_id, target=status,
                            reason=reason, message=message, expected=expected)
