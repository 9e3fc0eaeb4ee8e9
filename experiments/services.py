"""Use cases that write to an experiment and the rows it owns: CreateExp, AbortExp, DeleteExp,
UpdateExpStatus, and CreateJob and CreateArtifact, which add a row to an open experiment.

The Experiment is the aggregate root of its Jobs and its Artifact: every use case whose rule
depends on the experiment's state takes the experiment's row lock first (`experiments.locks`),
so it lives here, and the jobs and artifacts apps never import this one. Every interface (DRF
views, gRPC servicers, admin actions, controllers) calls these functions, so no interface can
skip a rule.
"""
from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import Min
from django.utils import timezone

from accounts.models import User
from accounts.principals import actor_label
from artifacts.models import Artifact
from artifacts.services import artifacts_mark_awaiting
from core.cluster_settings import cluster_problems
from core.database.db import retry_on_lock_conflict
from core.database.prepared import insert_new, insert_one
from core.errors import (
    Conflict,
    NotFound,
    PermissionDenied,
    ValidationFailed,
)
from core.domain.statemachine import (
    MAX_STATUS_BATCH,
    StatusChange,
    StatusOutcome,
    apply_transitions,
    validate_status_batch,
)
from core.domain.statuses import EXP_ACTIVE, EXP_TERMINAL, ExpStatus, JobStatus
from core.domain.taskspec import TaskSpec
from jobs.models import Job
from jobs.specs import (
    environment_problem, experiment_size_problems, task_spec_of, validate_role,
    validate_task_spec,
)

from .idempotency import (
    IDEMPOTENCY_HEADER, IDEMPOTENCY_KEY_MAX_CHARS, create_fingerprint, replayed_create,
)
from .labels import MAX_LABELS, key_problem, label_problems
from .locks import lock_artifact_ids, lock_experiment_with_jobs
from .models import ExpLabel, Experiment, IdempotencyKey
from .specs import validate_create

# The artifact stores Falcon writes to (docs/architecture.md, "Embedded defaults": GCS or a local
# directory), as in FALCON_ARTIFACT_ROOT.
ARTIFACT_SCHEMES = ("file", "gs")
ARTIFACT_TYPE = re.compile(r"^[a-z][a-z0-9_-]*$")


def artifact_path_for(*, name: str, root: str | None = None, unique: str | None = None) -> str:
    """Return where a new experiment writes its artifacts: `<root>/<name>-<unique>`.

    The folder is known before the experiment's row is written (CreateExp inserts it with its
    path: one INSERT, no UPDATE of the new row), so it is named by the experiment's name and 16
    random hexadecimal digits (64 bits) rather than by the id: a new experiment never shares a
    folder with an earlier one of the same name, deleted or not. Jobs write under
    `<path>/<role>`. Experiments created before this layout keep the `<root>/<id>-<name>`
    folders stored in their rows; every reader (the exp controller, the cluster backends, the
    analyzer) reads the stored path, never derives it.

    Args:
        name: the experiment's (validated) name.
        root: the artifact root URL (`file:///...` or `gs://bucket/prefix`); defaults to
            `settings.FALCON_ARTIFACT_ROOT`.
        unique: the folder's suffix (tests); defaults to `secrets.token_hex(8)`.
    """
    root = (root or settings.FALCON_ARTIFACT_ROOT).rstrip("/")
    return f"{root}/{name}-{unique or secrets.token_hex(8)}"


def exp_may_change(*, exp: Experiment, actor) -> bool:
    """True when `actor` may abort or delete `exp`: its creator, or a staff principal.

    Any authenticated principal may read; only the experiment's creator or a staff user (set in
    the admin) may abort or delete it. Services are staff only when they are
    the local mode's internal token (`accounts.principals.INTERNAL_SERVICE`).

    Args:
        exp: the experiment (only `creator_id` is read).
        actor: an `accounts.User` or an `accounts.principals.ServiceIdentity`.
    """
    if getattr(actor, "is_staff", False) and getattr(actor, "is_active", False):
        return True
    return isinstance(actor, User) and actor.is_active and actor.pk == exp.creator_id


def exp_require_may_change(*, exp: Experiment, actor, verb: str) -> None:
    """Raise PermissionDenied unless `actor` may `verb` (abort, delete, label) `exp`.

    Args:
        exp: the experiment (only `pk` and `creator_id` are read).
        actor: as `exp_may_change`.
        verb: the use case, in the message ("abort", "delete", "label").
    """
    if not exp_may_change(exp=exp, actor=actor):
        raise PermissionDenied(f"{actor_label(actor)} may not {verb} experiment {exp.pk}: only "
                               "its creator or a staff user may.")


def exp_abort_refusal(*, exp: Experiment, job_statuses: list[str]) -> Conflict | None:
    """Return the Conflict AbortExp answers for `exp`, or None when the abort goes ahead.

    The one statement of AbortExp's state rules: `exp_abort` raises what this returns under its
    locks, and the admin's confirmation page reads it without locks. An experiment already
    Aborting or Aborted is not refused (AbortExp is idempotent); one that Succeeded or Failed
    is, and so is one whose jobs all succeeded (decisions.md#dec-abort-finished).

    Args:
        exp: the experiment (`pk` and `status` are read).
        job_statuses: the status of each of its jobs.
    """
    if exp.status in (ExpStatus.ABORTING, ExpStatus.ABORTED):
        return None
    if exp.status in EXP_TERMINAL:
        return Conflict(f"Experiment {exp.pk} already {exp.status}; only Created or Running "
                        "experiments can be aborted.")
    if job_statuses and all(status == JobStatus.SUCCEEDED for status in job_statuses):
        # The jobs' work is done, so the exp controller ends it from the jobs and the files.
        return Conflict(f"Experiment {exp.pk} has finished: all its {len(job_statuses)} job(s) "
                        "succeeded, so it can no longer be aborted; it ends Succeeded or "
                        "Failed as its artifact files say.")
    return None


def exp_delete_refusal(*, exp: Experiment) -> Conflict | None:
    """Return the Conflict DeleteExp answers for `exp`, or None when it may be deleted.

    Only a terminal experiment (Succeeded, Failed, Aborted) is deleted, so no cluster job is
    left running without a record. `exp_delete`, the files module's delete and the admin's
    confirmation page all read it.

    Args:
        exp: the experiment (`pk` and `status` are read).
    """
    if exp.status in EXP_TERMINAL:
        return None
    what_to_do = ("It is being aborted: wait until it is Aborted, then delete it."
                  if exp.status == ExpStatus.ABORTING else
                  "Abort it first, wait until it is Aborted, then delete it.")
    return Conflict(f"Experiment {exp.pk} is {exp.status}; only Succeeded, Failed or "
                    f"Aborted experiments can be deleted. {what_to_do}")


def exp_create(*, creator, name: Any, cluster_name: Any, exp_type: Any,
               role_to_task_spec: Any, config: Any = "", priority: Any = -1,
               labels: Any = None, cloned_from: Any = None,
               idempotency_key: Any = None) -> Experiment:
    """CreateExp: write the Experiment, one Job per role and its Artifact in ONE transaction.

    Args:
        creator: the authenticated `accounts.User` (the token's email is the
            creator). A service principal cannot create: an experiment needs a person as its
            creator, who may then abort or delete it.
        name, cluster_name, exp_type: strings (see `experiments.specs.validate_create`).
        role_to_task_spec: `{role: TaskSpec mapping}`, at least one role.
        config: the user's config file as text, stored verbatim and injected as
            `CUSTOM_CONFIG_KEY`; under 128 KiB (`FALCON_CONFIG_MAX_BYTES`).
        priority: integer, default -1.
        labels: `{key: value}` Kubernetes-style labels (`experiments.labels`), or None.
        cloned_from: the id of an existing experiment this one is a copy of (`falcon exp
            clone`), or None.
        idempotency_key: a client-chosen string (a UUID) of at most 255 characters, or None.
            The first create with a key writes the experiment; a later create of the same
            creator with the same key and the same request returns that experiment (its
            `replayed` attribute is True) and writes nothing; the unique key (creator, key)
            settles concurrent duplicates: the loser's transaction rolls back whole.

    Returns:
        The created experiment (status Created; its jobs Pending; its artifact Created), with
        its `creator` and `artifact` loaded and its jobs, by role, in `created_jobs`: a reply
        can be built from it without reading anything back. `replayed` is False, or True when
        an earlier create with the same idempotency key made it (it is then read as it is
        now, jobs included).

    Raises:
        PermissionDenied: `creator` is not a user (a service principal).
        ValidationFailed: a field is missing or malformed, or `cloned_from` names no
            experiment (nothing is written).
        PayloadTooLarge: the config is over `FALCON_CONFIG_MAX_BYTES` (nothing is written).
        IdempotencyKeyReused: the key was used by this creator for a different request (409).
    """
    if not isinstance(creator, User):
        raise PermissionDenied(f"{actor_label(creator)} cannot create experiments: an "
                               "experiment's creator must be a person (a user token).")
    errors: dict[str, list[str]] = {}
    if isinstance(idempotency_key, str):
        idempotency_key = idempotency_key.strip()  # as HTTP strips a header's value
    try:
        data = validate_create(name=name, cluster_name=cluster_name, exp_type=exp_type,
                               role_to_task_spec=role_to_task_spec, config=config,
                               priority=priority)
    except ValidationFailed as exc:
        if type(exc) is not ValidationFailed:  # PayloadTooLarge answers alone
            raise
        errors.update(exc.errors)
        data = {}
    labels = {} if labels is None else labels
    if problems := label_problems(labels):
        errors["labels"] = problems
    if cloned_from is not None and (isinstance(cloned_from, bool)
                                    or not isinstance(cloned_from, int) or cloned_from < 1):
        errors["cloned_from"] = [f"must be the id of an existing experiment; got "
                                 f"{cloned_from!r}."]
    if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not idempotency_key
            or len(idempotency_key) > IDEMPOTENCY_KEY_MAX_CHARS
            or not idempotency_key.isascii() or not idempotency_key.isprintable()):
        errors["idempotency_key"] = [
            f"the {IDEMPOTENCY_HEADER} must be 1 to {IDEMPOTENCY_KEY_MAX_CHARS} printable ASCII "
            "characters, e.g. a UUID (uuid4); send a new one for each new experiment."]
    if errors:
        raise ValidationFailed(errors)
    # Stored as the JSON object it has always been (`TaskSpec.to_json`): the rows, the replies
    # and the idempotency fingerprint are those of before the typed spec.
    data["role_to_task_spec"] = {role: spec.to_json()
                                 for role, spec in data["role_to_task_spec"].items()}
    data["labels"] = dict(sorted(labels.items()))
    data["cloned_from"] = cloned_from
    fingerprint = create_fingerprint(data) if idempotency_key else ""
    if idempotency_key:
        replay = replayed_create(creator, idempotency_key, fingerprint)
        if replay is not None:
            return replay
    if cloned_from is not None and not Experiment.objects.filter(pk=cloned_from).exists():
        raise ValidationFailed({"cloned_from": [
            f"experiment {cloned_from} does not exist; clone an existing experiment."]})
    try:
        return _create(creator, data, idempotency_key, fingerprint)
    except IntegrityError:
        # Another create with the same key committed first (uk_idempotency_creator_key): this
        # transaction rolled back whole, so the first experiment is the only one.
        if idempotency_key:
            replay = replayed_create(creator, idempotency_key, fingerprint)
            if replay is not None:
                return replay
        raise


@retry_on_lock_conflict
def _create(creator: User, data: dict[str, Any], idempotency_key: str | None,
            fingerprint: str) -> Experiment:
    """The writes of CreateExp, in one transaction (see `exp_create`)."""
    path = artifact_path_for(name=data["name"])
    with transaction.atomic():
        # The experiment with its path, its jobs in one statement, its artifact; its labels
        # and idempotency key when given.
        # (`insert_one`, `insert_new`: `create` and `bulk_create`, their INSERTs written once)
        exp = Experiment(creator=creator, artifact_path=path, **data)
        insert_one(exp, using=DEFAULT_DB_ALIAS)
        jobs = insert_new([
            Job(experiment=exp, cluster_name=exp.cluster_name, exp_type=exp.exp_type,
                role=role, task_spec=spec, artifact_path=f"{path}/{role}",
                priority=exp.priority)
            for role, spec in sorted(data["role_to_task_spec"].items())
        ], using=DEFAULT_DB_ALIAS)
        insert_one(Artifact(experiment=exp, path=path, artifact_type=exp.exp_type),
                   using=DEFAULT_DB_ALIAS)
        if data["labels"]:
            ExpLabel.objects.bulk_create([ExpLabel(experiment=exp, key=key, value=value,
                                                   created_at=exp.created_at)
                                          for key, value in data["labels"].items()])
        if idempotency_key:
            IdempotencyKey.objects.create(creator=creator, key=idempotency_key,
                                          request_hash=fingerprint, experiment=exp)
    exp.created_jobs = jobs
    exp.replayed = False
    return exp


@retry_on_lock_conflict
def exp_update_labels(*, exp_id: int, actor, set_labels: Any = None,
                      remove: Any = None, overwrite: bool = True) -> dict[str, str]:
    """Set and remove labels of an experiment (`kubectl label` semantics), in one transaction.

    Allowed in every status (a finished experiment is often the one labelled a baseline).
    Removing a label that is not there is not an error; setting one that is there replaces
    its value. The experiment's `updated_at` moves, so `updated_since` lists see the change.

    Args:
        exp_id: the experiment's id.
        actor: the creator or a staff principal (`exp_may_change`).
        set_labels: `{key: value}` to set.
        remove: keys to remove.
        overwrite: False refuses to change the value of a label the experiment has (`kubectl
            label` without --overwrite), checked under the row lock, so two writers cannot both
            pass the check; setting a label to the value it has is never refused.

    Returns:
        The experiment's labels after the change, keys sorted.

    Raises:
        ValidationFailed: a key or value is invalid, a key is both set and removed, or the
            experiment would have more than `MAX_LABELS` labels; keyed `labels`.
        NotFound, PermissionDenied: as `exp_abort`.
        Conflict: `overwrite` is False and a label to set has another value; names the first.
    """
    set_labels = {} if set_labels is None else set_labels
    remove = [] if remove is None else remove
    problems = label_problems(set_labels)
    if not isinstance(remove, (list, tuple)) or not all(isinstance(k, str) for k in remove):
        problems.append("the keys to remove must be a list of strings.")
        remove = []
    problems += [p for key in remove if (p := key_problem(key))]
    both = sorted(set(set_labels) & set(remove)) if isinstance(set_labels, dict) else []
    if both:
        problems.append(f"label {both[0]!r} is both set and removed; keep one of the two.")
    if problems:
        raise ValidationFailed({"labels": problems})
    with transaction.atomic():
        exp = Experiment.objects.select_for_update().filter(pk=exp_id).first()
        if exp is None:
            raise NotFound(f"Experiment {exp_id} does not exist.")
        exp_require_may_change(exp=exp, actor=actor, verb="label")
        clashes = sorted(k for k, v in set_labels.items()
                         if k in exp.labels and exp.labels[k] != v) if not overwrite else []
        if clashes:
            key = clashes[0]
            raise Conflict(f"experiment {exp_id} already has label {key!r} = "
                           f"{exp.labels[key]!r}; allow overwriting to change it to "
                           f"{set_labels[key]!r}.")
        labels = {k: v for k, v in exp.labels.items() if k not in remove}
        labels.update(set_labels)
        if len(labels) > MAX_LABELS:
            raise ValidationFailed({"labels": [
                f"experiment {exp_id} would have {len(labels)} labels; at most {MAX_LABELS}: "
                "remove some with key-."]})
        changed = [k for k, v in set_labels.items() if exp.labels.get(k) != v]
        gone = [k for k in remove if k in exp.labels] + [k for k in changed if k in exp.labels]
        if gone:
            ExpLabel.objects.filter(experiment_id=exp_id, key__in=gone).delete()
        if changed:
            ExpLabel.objects.bulk_create([ExpLabel(experiment_id=exp_id, key=k,
                                                   value=set_labels[k], created_at=exp.created_at)
                                          for k in changed])
        labels = dict(sorted(labels.items()))
        Experiment.objects.filter(pk=exp_id).update(labels=labels, updated_at=timezone.now())
    return labels


@retry_on_lock_conflict
def exp_abort(*, exp_id: int, actor) -> Experiment:
    """AbortExp: move the experiment and every non-terminal job to Aborting, in one transaction.

    Sets `aborting_at`; the resource manager then stops the cluster jobs
    and the exp controller finishes the experiment as Aborted with its artifact Failed.
    Idempotent: an experiment already Aborting or Aborted is returned unchanged. When every job
    had already succeeded the abort is refused (decisions.md#dec-abort-finished): the
    experiment and its artifact then end as the jobs and the files say.

    Args:
        exp_id: the experiment's id.
        actor: who asks: an `accounts.User` or `accounts.principals.ServiceIdentity`; must be
            the creator or staff (`exp_may_change`), and is named in the message.

    Raises:
        NotFound: no such experiment.
        PermissionDenied: `actor` is neither the creator nor staff (HTTP 403), checked before
            the state, so the answer does not depend on it.
        Conflict: the experiment already Succeeded or Failed, or every one of its jobs has
            succeeded (HTTP 409).
    """
    with transaction.atomic():
        exp, jobs = lock_experiment_with_jobs(exp_id)
        exp_require_may_change(exp=exp, actor=actor, verb="abort")
        # Decided once, under the locks (decisions.md#dec-abort-finished).
        refusal = exp_abort_refusal(exp=exp, job_statuses=[job.status for job in jobs])
        if refusal is not None:
            raise refusal
        if exp.status in (ExpStatus.ABORTING, ExpStatus.ABORTED):
            return exp
        message = f"Abort requested by {actor_label(actor)}."
        exp.request_abort(reason="AbortRequested", message=message)
        # By primary key, only the locked rows that can move (decisions.md#dec-aggregate).
        movable = [job.pk for job in jobs if Job.machine.allows(job.status, JobStatus.ABORTING)]
        if movable:
            Job.objects.filter(pk__in=movable).transition(
                JobStatus.ABORTING, reason="AbortRequested", message=message)
    return exp


@retry_on_lock_conflict
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
        exp, jobs = lock_experiment_with_jobs(exp_id)
        exp_require_may_change(exp=exp, actor=actor, verb="delete")
        refusal = exp_delete_refusal(exp=exp)
        if refusal is not None:
            raise refusal
        artifact_ids = lock_artifact_ids(exp_id)
        # Children first (their keys point at the experiment), each by locked primary keys.
        if artifact_ids:
            Artifact.objects.filter(pk__in=artifact_ids).delete()
        if jobs:
            Job.objects.filter(pk__in=[job.pk for job in jobs]).delete()
        Experiment.objects.filter(pk=exp_id, status__in=EXP_TERMINAL).delete()


def _first_job_starts(exp_ids: list[int]) -> dict[int, datetime]:
    """Return the earliest `started_at` of each experiment's jobs (none: not in the dict).

    An experiment's start is its first job's start: the one rule of its `started_at`, so a
    short run that went Created -> Succeeded between two ticks of the exp controller has the
    start its job's cluster reported, and a Running one the time its first role started, not
    the tick that saw every role running. Without any job start (jobs moved by an older
    resource manager) entering Running records now, as before.
    """
    return dict(Job.objects.filter(experiment_id__in=exp_ids, started_at__isnull=False)
                .values("experiment_id").annotate(first=Min("started_at"))
                .values_list("experiment_id", "first"))


def _with_first_job_starts(changes: list[StatusChange]) -> list[StatusChange]:
    """Return `changes` with each move to Running, Succeeded or Failed carrying its
    experiment's first job start (`_first_job_starts`) as its `started_at`."""
    starting = [c.pk for c in changes if c.status in Experiment.machine.reported_start]
    if not starting:
        return changes
    first = _first_job_starts(starting)
    return [replace(c, started_at=first[c.pk]) if c.pk in first
            and c.status in Experiment.machine.reported_start else c for c in changes]


@retry_on_lock_conflict
def exp_update_status(*, exp_id: int, status: str, reason: str | None = None,
                      message: str | None = None, expected: str | None = None
                      ) -> tuple[Experiment, bool]:
    """UpdateExpStatus: apply a guarded transition of the Experiment state machine.

    A move to Running, Succeeded or Failed records the experiment's start, if none is
    recorded yet, as its first job's start (`_first_job_starts`).

    Returns `(experiment, changed)`.

    Raises:
        NotFound, InvalidTransition, TransitionRace: see `StatefulModel.transition_pk`.
    """
    started_at = None
    if status in Experiment.machine.reported_start:
        started_at = _first_job_starts([exp_id]).get(exp_id)
    with transaction.atomic():
        exp, changed = Experiment.transition_pk(exp_id, status, reason=reason, message=message,
                                                expected=expected, started_at=started_at)
        if changed and exp.status == ExpStatus.SUCCEEDED:
            artifacts_mark_awaiting(experiment_ids=[exp_id])
    return exp, changed



@retry_on_lock_conflict
def exp_update_statuses(changes: list[StatusChange]) -> list[StatusOutcome]:
    """UpdateExpStatuses: apply many guarded Experiment transitions; one result per item.

    Each item is the guarded transition `exp_update_status` applies, in one transaction for
    all (`core.domain.statemachine.apply_transitions`: one locking read, rows moved with the same
    values in one UPDATE), so a tick's 10,000 changes cost a few statements per row instead of
    a call each. A refused item is reported in its result and never fails the others. Two
    items of the same experiment apply in order. Starts are recorded as `exp_update_status`
    records them (one query for the batch's first job starts).

    Args:
        changes: at most `MAX_STATUS_BATCH` items (`core.domain.statemachine.StatusChange`, `pk` the
            experiment id; no `extra`).

    Returns:
        One `core.domain.statemachine.StatusOutcome` per item, in order (`pk` is the experiment id).

    Raises:
        ValidationFailed: more than `MAX_STATUS_BATCH` items, or an unknown status.
    """
    validate_status_batch(ExpStatus, changes)
    with transaction.atomic():
        outcomes = apply_transitions(Experiment.machine, Experiment,
                                     _with_first_job_starts(changes))
        artifacts_mark_awaiting(experiment_ids=[
            o.pk for o in outcomes if o.changed and o.status == ExpStatus.SUCCEEDED])
    return outcomes


def _validate_new_job(*, exp_id: int, role: Any, task_spec: Any) -> TaskSpec:
    """Check a new job's role and TaskSpec, and that the spec runs on the experiment's cluster.

    Reads the experiment's cluster without a lock: the cluster of an experiment never changes.
    Whether the experiment is open and the role is free is checked later, under its lock.

    Args:
        exp_id: the experiment's id.
        role: the new role's name: a Kubernetes DNS-1123 label.
        task_spec: the raw TaskSpec mapping (`jobs.specs.validate_task_spec`).

    Returns:
        The `TaskSpec` (defaults filled, envs as strings).

    Raises:
        ValidationFailed: keyed `role` or `task_spec.<field>` (a cluster rule on another key
            keeps its own key); the role is checked first, the cluster only once the spec is
            valid.
        NotFound: no such experiment (asked only once role and spec are valid).
    """
    if problem := validate_role(role):
        raise ValidationFailed({"role": [problem if role == "" else f"{role!r} {problem}"]})
    prefix = f"role_to_task_spec.{role}"
    spec_errors: dict[str, list[str]] = {}
    spec = validate_task_spec(role, task_spec, spec_errors)
    if spec_errors:
        raise ValidationFailed({"task_spec" + field[len(prefix):]: messages
                                for field, messages in spec_errors.items()})
    # The spec must also run on the experiment's cluster (an image and a known device type on
    # Kubernetes), checked now as CreateExp does, not found out by a failing cluster Job.
    row = Experiment.objects.filter(pk=exp_id).values_list("cluster_name", "config").first()
    if row is None:
        raise NotFound(f"Experiment {exp_id} does not exist.")
    cluster, config = row
    if problem := environment_problem(spec, config):
        raise ValidationFailed({"task_spec": [problem]})
    errors = {("task_spec" + field[len(prefix):] if field.startswith(prefix) else field): messages
              for field, messages in cluster_problems(cluster, {role: spec}).items()}
    if errors:
        raise ValidationFailed(errors)
    return task_spec_of(spec)


@retry_on_lock_conflict
def job_create(*, exp_id: int, role: Any, task_spec: Any) -> Job:
    """CreateJob: add a Pending job for a new role to an existing, open experiment.

    The job copies the experiment's cluster, type and priority, writes under
    `<experiment artifact_path>/<role>` (as `exp_create` does), and the role is added to the
    experiment's `role_to_task_spec`, so the experiment keeps one job per role of its spec
    (docs/architecture.md, Experiment state machine). One transaction, experiment row locked.

    Args:
        exp_id: the experiment's id.
        role: a Kubernetes DNS-1123 label not yet used by the experiment's jobs.
        task_spec: a TaskSpec mapping (`jobs.specs`: `command`, `replica`, `image`,
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
    spec = _validate_new_job(exp_id=exp_id, role=role, task_spec=task_spec).to_json()
    taken = (f"Experiment {exp_id} already has a job for role {role!r}; use another role name.")
    with _locked_active_exp(exp_id, "a job") as (exp, jobs):
        if any(job.role == role for job in jobs):
            raise Conflict(taken)
        too_big = experiment_size_problems({**{job.role: job.task_spec for job in jobs},
                                            role: spec})
        if too_big:
            raise ValidationFailed({"task_spec": too_big["role_to_task_spec"]})
        # uk_job_exp_role backs the check above against a writer that does not lock.
        job = _create_once(lambda: Job.objects.create(
            experiment=exp, cluster_name=exp.cluster_name, exp_type=exp.exp_type, role=role,
            task_spec=spec, artifact_path=f"{exp.artifact_path}/{role}", priority=exp.priority),
            conflict=taken)
        Experiment.objects.filter(pk=exp_id).update(
            role_to_task_spec={**exp.role_to_task_spec, role: spec}, updated_at=timezone.now())
    return job


@contextmanager
def _locked_active_exp(exp_id: int, what: str) -> Iterator[tuple[Experiment, list[Job]]]:
    """Open a transaction holding experiment `exp_id` and its jobs locked; yield `(exp, jobs)`.

    Rows may be added only to an active experiment (Created or Running): an Aborting one has
    already moved its jobs to Aborting, and a terminal one never runs again.

    Args:
        exp_id: the experiment's id.
        what: what the caller adds, for the message ("a job").

    Raises:
        NotFound: no such experiment.
        Conflict: the experiment is not active (HTTP 409).
    """
    with transaction.atomic():
        exp, jobs = lock_experiment_with_jobs(exp_id)
        if exp.status not in EXP_ACTIVE:
            raise Conflict(f"Experiment {exp_id} is {exp.status}; {what} can be added only to a "
                           "Created or Running experiment.")
        yield exp, jobs


def _create_once(create: Callable[[], Any], *, conflict: str) -> Any:
    """Run `create` (one INSERT) in a savepoint; a unique-key violation becomes `Conflict`."""
    try:
        with transaction.atomic():
            return create()
    except IntegrityError:
        raise Conflict(conflict) from None


@retry_on_lock_conflict
def artifact_create(*, exp_id: int, path: Any = "", artifact_type: Any = "") -> Artifact:
    """CreateArtifact: create the artifact record of an open experiment that has none.

    An experiment has at most one artifact; CreateExp makes it, so this call serves
    an experiment whose record was deleted with DeleteArtifact. One transaction, experiment row
    locked.

    Args:
        exp_id: the experiment's id.
        path: `file://...` or `gs://bucket/...`, at most 512 characters; empty means the
            experiment's `artifact_path`.
        artifact_type: a lowercase type (`profiling`), at most 255 characters; empty means the
            experiment's `exp_type`.

    Returns:
        The created artifact (status Created).

    Raises:
        ValidationFailed: `path` or `artifact_type` is malformed (nothing is written).
        NotFound: no such experiment.
        Conflict: the experiment is terminal (Succeeded, Failed, Aborted) or Aborting, or
            already has an artifact (HTTP 409).
    """
    path, artifact_type = _validate_new_artifact(path=path, artifact_type=artifact_type)
    taken = f"Experiment {exp_id} already has an artifact; delete it first."
    with _locked_active_exp(exp_id, "an artifact") as (exp, _jobs):
        if Artifact.objects.filter(experiment_id=exp_id).exists():
            raise Conflict(taken)
        # The one-to-one key backs the check above against a writer that does not lock.
        return _create_once(lambda: Artifact.objects.create(
            experiment=exp, path=path or exp.artifact_path,
            artifact_type=artifact_type or exp.exp_type), conflict=taken)


def _validate_new_artifact(*, path: Any, artifact_type: Any) -> tuple[str, str]:
    """Check CreateArtifact's `path` and `artifact_type`; return them ("" = the default).

    Raises:
        ValidationFailed: a field is malformed; `errors` names it.
    """
    errors: dict[str, list[str]] = {}
    path = "" if path is None else path
    artifact_type = "" if artifact_type is None else artifact_type
    if not isinstance(path, str):
        errors["path"] = ["must be a string URL (file://... or gs://bucket/...)."]
    elif path:
        parts = urlsplit(path)
        if len(path) > 512 or parts.scheme not in ARTIFACT_SCHEMES or not (parts.netloc
                                                                            or parts.path):
            errors["path"] = [f"{path[:80]!r} is not valid: a file://... or gs://bucket/... URL "
                              "of at most 512 characters; leave it empty for the experiment's "
                              "artifact_path."]
    if not isinstance(artifact_type, str):
        errors["artifact_type"] = ["must be a string such as profiling."]
    elif artifact_type and (len(artifact_type) > 255 or not ARTIFACT_TYPE.fullmatch(artifact_type)):
        errors["artifact_type"] = [f"{artifact_type[:80]!r} is not valid: a lowercase type such "
                                   "as profiling; leave it empty for the experiment's exp_type."]
    if errors:
        raise ValidationFailed(errors)
    return path, artifact_type
