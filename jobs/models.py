"""The Job entity: one per role of an experiment (seed 000, sections 3.2.1 and 3.5)."""
from __future__ import annotations

from django.db import models

from core.fields import StatusFields


class JobStatus(models.TextChoices):
    """Job states (seed 000, 3.2.1)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ABORTING = "Aborting"
    ABORTED = "Aborted"


class Job(StatusFields):
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
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING,
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

    def __str__(self) -> str:
        return f"{self.experiment_id}/{self.role} ({self.pk})"
