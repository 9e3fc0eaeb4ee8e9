"""The Experiment entity: the aggregate root of its Jobs and its Artifact."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from core.models import StatefulModel
from core.statemachine import run_lifecycle
from core.statuses import ExpStatus, choices



class Experiment(StatefulModel):
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
    started_at = models.DateTimeField(null=True, blank=True)
    aborting_at = models.DateTimeField(null=True, blank=True)
    aborted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "experiments"
        ordering = ["-created_at", "-id"]

    machine = run_lifecycle("Experiment", ExpStatus)

    def __str__(self) -> str:
        return f"{self.name} ({self.pk})"

    # State-machine methods: each is one guarded transition by pk (`StatefulModel.transition`)
    # and returns whether it changed the row.

    def mark_running(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Created -> Running: a job of the experiment runs."""
        return self.transition(ExpStatus.RUNNING, reason=reason, message=message)

    def mark_succeeded(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Created | Running -> Succeeded: every job and the artifact succeeded."""
        return self.transition(ExpStatus.SUCCEEDED, reason=reason, message=message)

    def mark_failed(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Created | Running -> Failed: a job or the artifact failed."""
        return self.transition(ExpStatus.FAILED, reason=reason, message=message)

    def request_abort(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Created | Running -> Aborting: sets `aborting_at`; the controllers finish it."""
        return self.transition(ExpStatus.ABORTING, reason=reason, message=message)

    def mark_aborted(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Aborting -> Aborted: every job stopped."""
        return self.transition(ExpStatus.ABORTED, reason=reason, message=message)
