"""The Artifact entity: what an experiment's jobs write."""
from __future__ import annotations

from django.db import models

from core.models import StatefulModel
from core.domain.statemachine import StateMachine
from core.domain.statuses import ARTIFACT_TERMINAL, ArtifactStatus, choices


class PruneState(models.TextChoices):
    """Retention of an artifact's stored files, apart from its status (which says how the run
    ended and never changes again): Kept -> Pruning -> Pruned.

    Pruning is recorded BEFORE any file is deleted, Pruned after the last one is gone: a
    `prune_artifacts` run that crashes in between leaves Pruning rows, which the next run
    finishes (deleting files that are already gone is a no-op).
    """

    KEPT = "", "Kept"
    PRUNING = "Pruning", "Pruning"
    PRUNED = "Pruned", "Pruned"


# Which prune state each target may be entered from (a guarded conditional UPDATE).
PRUNE_TRANSITIONS = {
    PruneState.PRUNING: frozenset({PruneState.KEPT, PruneState.PRUNING}),
    PruneState.PRUNED: frozenset({PruneState.PRUNING, PruneState.PRUNED}),
}


class Artifact(StatefulModel):
    """The artifacts of one experiment: a path in the artifact store (`file://` or `gs://`).

    It succeeds only when its experiment's jobs succeeded and the path holds files.
    """

    experiment = models.OneToOneField("experiments.Experiment", on_delete=models.CASCADE,
                                      related_name="artifact")
    path = models.CharField(max_length=512)
    artifact_type = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=choices(ArtifactStatus),
                              default=ArtifactStatus.CREATED, db_index=True)
    # The manifest, recorded when the artifact succeeds: what the store held under `path`.
    file_count = models.PositiveBigIntegerField(null=True, blank=True)
    total_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    prune_state = models.CharField(max_length=16, choices=PruneState.choices, blank=True,
                                   default=PruneState.KEPT, db_index=True)
    pruned_at = models.DateTimeField(null=True, blank=True)
    # Offline discovery's mark (ListExpsAwaitingAnalysis): NULL while the artifact cannot owe
    # an offline analysis; "" from the transition that makes it and its experiment both
    # Succeeded; the fingerprint of the analyzer's catalog once it owes no plugin of that
    # catalog. Discovery walks the index on it and never the settled rest, so a poll costs
    # O(awaiting) whatever the number of experiments (decisions.md#dec-offline-settled).
    offline_settled = models.CharField(max_length=64, null=True, blank=True, db_index=True)

    class Meta:
        db_table = "artifacts"
        ordering = ["id"]

    # Created -> Succeeded | Failed.
    machine = StateMachine(
        name="Artifact",
        transitions={
            ArtifactStatus.CREATED: frozenset(),  # entered on create only
            ArtifactStatus.SUCCEEDED: frozenset({ArtifactStatus.CREATED}),
            ArtifactStatus.FAILED: frozenset({ArtifactStatus.CREATED}),
        },
        terminal=ARTIFACT_TERMINAL,
        set_on_enter={ArtifactStatus.SUCCEEDED: ("finished_at",),
                      ArtifactStatus.FAILED: ("finished_at",)},
    )

    def __str__(self) -> str:
        return self.path

    def mark_succeeded(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Created -> Succeeded: the jobs succeeded and the path holds files."""
        return self.transition(ArtifactStatus.SUCCEEDED, reason=reason, message=message)

    def mark_failed(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Created -> Failed: a job failed, or the path holds no files."""
        return self.transition(ArtifactStatus.FAILED, reason=reason, message=message)
