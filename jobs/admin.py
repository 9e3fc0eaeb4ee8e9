"""Django admin for jobs: read-only, filtered by `JobFilter`; status changes only through
transitions."""
from django.contrib import admin

from core.admin import FilterSetAdminMixin, ReadOnlyAdminMixin, filterset_list_filter

from .filters import JobFilter
from .models import Job


@admin.register(Job)
class JobAdmin(ReadOnlyAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    """Jobs are created with their experiment; the changelist filters as ListJobs does."""

    list_display = ("id", "experiment", "role", "cluster_name", "status", "updated_at")
    filterset_class = JobFilter
    list_filter = [filterset_list_filter(JobFilter, name)
                   for name in ("status", "exp_status", "cluster_name", "exp_type")]
    list_select_related = ("experiment",)
