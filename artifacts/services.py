"""Artifact use cases that write (seed 000, 3.3.1): UpdateArtifactStatus."""
from __future__ import annotations

from falcon_site.statemachine import apply_transition

from . import state
from .models import Artifact


def artifact_update_status(*, artifact_id: int, status: str, reason: str | None = None,
                           message: str | None = None, expected: str | None = None
                           ) -> tuple[Artifact, bool]:
    """UpdateArtifactStatus: apply a guarded transition of the Artifact state machine.

    Returns `(artifact, changed)`; raises as `falcon_site.statemachine.apply_transition`.
    """
    return apply_transition(state.MACHINE, Artifact.objects, pk=artifact_id, target=status,
                            reason=reason, message=message, expected=expected)
