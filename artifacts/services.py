"""Artifact use cases that write: UpdateArtifactStatus, DeleteArtifact (CreateArtifact adds a
row to an experiment, so it lives with the experiment: `experiments.services.artifact_create`)."""
from __future__ import annotations

from core.db import retry_on_lock_conflict

from .models import Artifact


@retry_on_lock_conflict
def artifact_update_status(*, artifact_id: int, status: str, reason: str | None = None,
                           message: str | None = None, expected: str | None = None
                           ) -> tuple[Artifact, bool]:
    """UpdateArtifactStatus: apply a guarded transition of the Artifact state machine.

    Returns `(artifact, changed)`; raises as `StatefulModel.transition_pk`.
    """
    return Artifact.transition_pk(artifact_id, status, reason=reason, message=message,
                                  expected=expected)


@retry_on_lock_conflict
def artifact_delete(*, artifact_id: int) -> None:
    """DeleteArtifact: delete one artifact record, only when it is terminal (Succeeded, Failed).

    The files stay in the store (as with DeleteExp). A Created artifact is still to be decided
    by the exp controller, so deleting it is refused; the status check is part of the DELETE
    statement, so it cannot race a status change.

    Raises:
        NotFound: no such artifact.
        Conflict: the artifact is still Created (HTTP 409).
    """
    Artifact.delete_terminal_pk(artifact_id)
