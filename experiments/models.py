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
        db_column="creator_id", db_index=False,  # exp_creator_created leads with it
    )
    # Filtered columns are indexed together with the list order (Meta.indexes), not alone.
    cluster_name = models.CharField(max_length=255)
    exp_type = models.CharField(max_length=255)
    role_to_task_spec = models.JSONField()
    config = models.TextField(blank=True, default="")
    artifact_path = models.CharField(max_length=512, blank=True, default="")
    priority = models.IntegerField(default=-1)
    status = models.CharField(max_length=16, choices=choices(ExpStatus), default=ExpStatus.CREATED)

    class Meta:
        db_table = "experiments"
        ordering = ["-created_at", "-id"]
        # One index per list filter, followed by the list order and its unique tie-breaker:
        # a filtered page is a backward range scan of one index, LIMIT rows long, never a sort
        # of every matching row (docs/architecture.md, "List queries and their indexes").
        # The unfiltered list walks the index on created_at (its entries end with the id).
        indexes = [
            models.Index(fields=["status", "created_at", "id"], name="exp_status_created"),
            models.Index(fields=["creator", "created_at", "id"], name="exp_creator_created"),
            models.Index(fields=["cluster_name", "created_at", "id"],
                         name="exp_cluster_created"),
            models.Index(fields=["exp_type", "created_at", "id"], name="exp_type_created"),
        ]

    statuses = ExpStatus
    machine = run_lifecycle("Experiment", ExpStatus, terminal=EXP_TERMINAL)

    def __str__(self) -> str:
        return f"{self.name} ({self.pk})"
