"""Artifact use cases that write (seed 000, 3.3.1 and 3.5): CreateArtifact, UpdateArtifactStatus,
DeleteArtifact."""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction

from experiments.models import ExpStatus
from core.errors import Conflict, ValidationFailed
from experiments.locks import lock_experiment_with_jobs
from core.statemachine import apply_transition, delete_terminal

from . import state
from .models import Artifact

# The artifact stores Falcon writes to (architecture page, "Embedded defaults": GCS or a local
# directory), as in FALCON_ARTIFACT_ROOT.
ARTIFACT_SCHEMES = ("file", "gs")
ARTIFACT_TYPE = re.compile(r"^[a-z][a-z0-9_-]*$")
# An artifact may be added only while its experiment can still produce it.
_OPEN_EXP_STATUSES = frozenset({ExpStatus.CREATED, ExpStatus.RUNNING})


def artifact_create(*, exp_id: int, path: Any = "", artifact_type: Any = "") -> Artifact:
    """CreateArtifact: create the artifact record of an open experiment that has none.

    An experiment has at most one artifact (seed 3.2.1); CreateExp makes it, so this call serves
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
    elif artifact_type and (len(artifact_type) > 255 or not ARTIFACT_TYPE.match(artifact_type)):
        errors["artifact_type"] = [f"{artifact_type[:80]!r} is not valid: a lowercase type such "
                                   "as profiling; leave it empty for the experiment's exp_type."]
    if errors:
        raise ValidationFailed(errors)

    with transaction.atomic():
        exp, _jobs = lock_experiment_with_jobs(exp_id)
        if exp.status not in _OPEN_EXP_STATUSES:
            raise Conflict(f"Experiment {exp_id} is {exp.status}; an artifact can be added only "
                           "to a Created or Running experiment.")
        if Artifact.objects.filter(experiment_id=exp_id).exists():
            raise Conflict(f"Experiment {exp_id} already has an artifact; delete it first.")
        try:
            with transaction.atomic():
                return Artifact.objects.create(experiment=exp, path=path or exp.artifact_path,
                                               artifact_type=artifact_type or exp.exp_type)
        except IntegrityError:  # the one-to-one key: a writer that does not lock came first
            raise Conflict(f"Experiment {exp_id} already has an artifact; delete it first."
                           ) from None


def artifact_update_status(*, artifact_id: int, status: str, reason: str | None = None,
                           message: str | None = None, expected: str | None = None
                           ) -> tuple[Artifact, bool]:
    """UpdateArtifactStatus: apply a guarded transition of the Artifact state machine.

    Returns `(artifact, changed)`; raises as `core.statemachine.apply_transition`.
    """
    return apply_transition(state.MACHINE, Artifact.objects, pk=artifact_id, target=status,
                            reason=reason, message=message, expected=expected)


def artifact_delete(*, artifact_id: int) -> None:
    """DeleteArtifact: delete one artifact record, only when it is terminal (Succeeded, Failed).

    The files stay in the store (as with DeleteExp). A Created artifact is still to be decided
    by the exp controller, so deleting it is refused; the status check is part of the DELETE
    statement, so it cannot race a status change.

    Raises:
        NotFound: no such artifact.
        Conflict: the artifact is still Created (HTTP 409).
    """
    delete_terminal(state.MACHINE, Artifact.objects, pk=artifact_id)
