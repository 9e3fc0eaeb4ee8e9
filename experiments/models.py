"""The Experiment entity (seed 000, sections 3.2.1 and 3.5)."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from core.fields import StatusFields


class ExpStatus(models.TextChoices):
    """Experiment states (seed 000, 3.2.1)."""

    CREATED = "Created"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ABORTING = "Aborting"
    ABORTED = "Aborted"


class Experiment(StatusFields):
    """One experiment: a cluster, a type, one task spec per role and a verbatim config.

    `config` is stored exactly as sent (seed 3.3.4: "服务端不解析") so runs can be compared, and
    is injected into every task as `CUSTOM_CONFIG_KEY`. Jobs (one per role) and the Artifact are
    created with it in one transaction by `experiments.services.exp_create`.
    """

    name = models.CharField(max_length=255, db_index=True)
    creator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="experiments",
        db_column="creator_id",
    )
    cluster_name = models.CharField(max_length=255, db_index=True)
    exp_type = models.CharField(max_length=255, db_index=True)
    role_to_task_spec = models.JSONField()
    config = models.TextField(blank=True, default="")
    artifact_path = models.CharField(max_length=512, blank=True, default="")
    priority = models.IntegerField(default=-1)
    status = models.CharField(max_length=16, choices=ExpStatus.choices, default=ExpStatus.CREATED,
                              db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    aborting_at = models.DateTimeField(null=True, blank=True)
    aborted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "experiments"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.pk})"
