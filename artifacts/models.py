"""The Artifact entity: what an experiment's jobs write."""
from __future__ import annotations

from django.db import models

from core.models import StatefulModel
from core.statemachine import StateMachine
from core.statuses import ARTIFACT_TERMINAL, ArtifactStatus, choices


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
