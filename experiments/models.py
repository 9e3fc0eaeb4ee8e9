"""The Experiment entity: the aggregate root of its Jobs and its Artifact."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from core.models import RunModel
from core.statemachine import run_lifecycle
from core.statuses import EXP_TERMINAL, ExpStatus, choices


class Experiment(RunModel):
    """One experiment: a cluster, a type, one task spec per role and a verbatim config.

    `config` is stored exactly as sent (the server never parses it) so runs can be compared, and
    is injected into every task as `CUSTOM_CONFIG_KEY` (`core.statuses.CONFIG_ENV`). Jobs (one per role) and the Artifact are
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
    status = models.CharField(max_length=16, choices=choices(ExpStatus), default=ExpStatus.CREATED,
                              db_index=True)

    class Meta:
        db_table = "experiments"
        ordering = ["-created_at", "-id"]

    statuses = ExpStatus
    machine = run_lifecycle("Experiment", ExpStatus, terminal=EXP_TERMINAL)

    def __str__(self) -> str:
        return f"{self.name} ({self.pk})"
