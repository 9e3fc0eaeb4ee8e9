"""Django admin for jobs: read-only, filtered by `JobFilter`; status changes only through
transitions. Statuses as badges, the duration, the spec as YAML and the job's history."""
from django.contrib import admin

from core.admin import (
    FilterSetAdminMixin, ReadOnlyAdminMixin, duration, filterset_list_filter, history_table,
    status_badge, truncated, yaml_block,
)
from core.domain.history import entity_events

from .filters import JobFilter
from .models import Job


@admin.register(Job)
class JobAdmin(ReadOnlyAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    """Jobs are created with their experiment; the changelist filters as ListJobs does."""

    list_display = ("id", "exp_link", "role", "status_badge", "cluster_name", "short_reason",
                    "run_time", "updated_at")
    filterset_class = JobFilter
    list_filter = [filterset_list_filter(JobFilter, name)
                   for name in ("status", "exp_status", "cluster_name", "exp_type")]
    list_select_related = ("experiment",)
    fieldsets = [
        (None, {"fields": ("experiment", "role", "status_badge", "reason", "message",
                           "run_time", "cluster_name", "exp_type", "priority",
                           "cluster_job_name", "artifact_path")}),
        ("Times", {"fields": ("created_at", "updated_at", "started_at", "finished_at",
                              "aborting_at", "aborted_at")}),
        ("Task spec (YAML)", {"fields": ("task_spec_yaml",)}),
        ("History", {"fields": ("history",)}),
    ]

    @admin.display(description="experiment", ordering="experiment_id")
    def exp_link(self, job: Job) -> str:
        return truncated(job.experiment, 40)

    @admin.display(description="status", ordering="status")
    def status_badge(self, job: Job) -> str:
        return status_badge(job.status)

    @admin.display(description="reason")
    def short_reason(self, job: Job) -> str:
        return truncated(job.reason, 24) if job.reason else "-"

    @admin.display(description="duration")
    def run_time(self, job: Job) -> str:
        return duration(job.started_at, job.finished_at)

    @admin.display(description="task spec")
    def task_spec_yaml(self, job: Job) -> str:
        return yaml_block(job.task_spec)

    @admin.display(description="transition history")
    def history(self, job: Job) -> str:
        return history_table(entity_events(entity_type="job", entity_id=job.pk))
