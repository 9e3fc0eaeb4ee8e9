"""The Job entity: one per role of an experiment, run as one cluster job."""
from __future__ import annotations

from django.db import models

from core.models import StatefulModel
from core.statemachine import run_lifecycle
from core.statuses import JobStatus, choices



class Job(StatefulModel):
    """One role of an experiment, run by the resource manager as one cluster job.

    `task_spec` is the role's validated TaskSpec (`command`, `replica`, `image`, `device_count`,
    `device_type`, `device_topo`, `envs`). `cluster_job_name` is the name of the cluster object
    (Kubernetes Job or local process group) once the resource manager created it.
    """

    experiment = models.ForeignKey("experiments.Experiment", on_delete=models.CASCADE,
                                   related_name="jobs")
    cluster_name = models.CharField(max_length=255, db_index=True)
    exp_type = models.CharField(max_length=255)
    role = models.CharField(max_length=63)
    task_spec = models.JSONField()
    artifact_path = models.CharField(max_length=512, blank=True, default="")
    priority = models.IntegerField(default=-1)
    status = models.CharField(max_length=16, choices=choices(JobStatus), default=JobStatus.PENDING,
                              db_index=True)
    cluster_job_name = models.CharField(max_length=255, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    aborting_at = models.DateTimeField(null=True, blank=True)
    aborted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "jobs"
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "role"], name="uk_job_exp_role"),
        ]

    machine = run_lifecycle("Job", JobStatus)

    def __str__(self) -> str:
        return f"{self.experiment_id}/{self.role} ({self.pk})"

    # State-machine methods: each is one guarded transition by pk (`StatefulModel.transition`)
    # and returns whether it changed the row. A non-terminal row already in the target state
    # gets its reason and message refreshed (a Pending job's "why still pending").

    def mark_pending(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Stay Pending with a fresh reason and message (the cluster job is not running yet)."""
        return self.transition(JobStatus.PENDING, reason=reason, message=message)

    def mark_running(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Pending -> Running: every task of the job runs."""
        return self.transition(JobStatus.RUNNING, reason=reason, message=message)

    def mark_succeeded(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Pending | Running -> Succeeded: every task succeeded."""
        return self.transition(JobStatus.SUCCEEDED, reason=reason, message=message)

    def mark_failed(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Pending | Running -> Failed: a task failed."""
        return self.transition(JobStatus.FAILED, reason=reason, message=message)

    def request_abort(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Pending | Running -> Aborting: the resource manager then stops the cluster job."""
        return self.transition(JobStatus.ABORTING, reason=reason, message=message)

    def mark_aborted(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Aborting -> Aborted: nothing of the cluster job is left."""
        return self.transition(JobStatus.ABORTED, reason=reason, message=message)
