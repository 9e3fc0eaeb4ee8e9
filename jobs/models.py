"""The Job entity: one per role of an experiment, run as one cluster job."""
from __future__ import annotations

from django.db import models

from core.models import RunModel
from core.domain.statemachine import run_lifecycle
from core.domain.statuses import JOB_TERMINAL, JobStatus, choices


class Job(RunModel):
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

    class Meta:
        db_table = "jobs"
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "role"], name="uk_job_exp_role"),
        ]

    statuses = JobStatus
    machine = run_lifecycle("Job", JobStatus, terminal=JOB_TERMINAL)

    def __str__(self) -> str:
        return f"{self.experiment_id}/{self.role} ({self.pk})"
