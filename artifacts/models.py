"""The Artifact entity: what an experiment's jobs write (seed 000, sections 3.2.1 and 3.5)."""
from __future__ import annotations

from django.db import models

from core.fields import StatusFields


class ArtifactStatus(models.TextChoices):
    """Artifact states (seed 000, 3.2.1)."""

    CREATED = "Created"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Artifact(StatusFields):
    """The artifacts of one experiment: a path in the artifact store (`file://` or `gs://`).

    It succeeds only when its experiment's jobs succeeded and the path holds files.
    """

    experiment = models.OneToOneField("experiments.Experiment", on_delete=models.CASCADE,
                                      related_name="artifact")
    path = models.CharField(max_length=512)
    artifact_type = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=ArtifactStatus.choices,
                              default=ArtifactStatus.CREATED, db_index=True)

    class Meta:
        db_table = "artifacts"
        ordering = ["id"]

    def __str__(self) -> str:
        return self.path
