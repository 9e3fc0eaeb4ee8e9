"""Django admin for operators: experiments with their jobs and artifact; abort via the service.

The admin's actions call the same services as the APIs, as the logged-in admin user: the admin
only admits staff (`AdminSite.has_permission`), and staff may abort or delete any experiment
(`experiments.services.exp_may_change`).
"""
from django.contrib import admin, messages

from artifacts.models import Artifact
from core.admin import FilterSetAdminMixin, ReadOnlyAdminMixin, filterset_list_filter
from core.errors import FalconError
from jobs.models import Job

from . import services
from .filters import ExperimentFilter
from .models import Experiment

STATUS_FIELDS = ("status", "reason", "message", "created_at", "updated_at", "started_at",
                 "finished_at", "aborting_at", "aborted_at")


class JobInline(ReadOnlyAdminMixin, admin.TabularInline):
    """The experiment's jobs, read-only, each linking to its own page."""

    model = Job
    extra = 0
    fields = ("role", "status", "reason", "message", "cluster_job_name", "started_at",
              "finished_at")
    show_change_link = True


class ArtifactInline(ReadOnlyAdminMixin, admin.StackedInline):
    """The experiment's artifact, read-only."""

    model = Artifact
    extra = 0
    fields = ("path", "artifact_type", "status", "reason", "message", "finished_at")


def _for_each(modeladmin, request, queryset, service, done: str) -> None:
    """Call `service(exp_id=..., actor=request.user)` for each selected experiment.

    Each refusal (a finished experiment cannot be aborted, a running one cannot be deleted) is
    shown to the operator; the other experiments are still processed.
    """
    count = 0
    for exp_id in queryset.values_list("pk", flat=True):
        try:
            service(exp_id=exp_id, actor=request.user)
            count += 1
        except FalconError as exc:
            modeladmin.message_user(request, exc.message, level=messages.WARNING)
    if count:
        modeladmin.message_user(request, done.format(count=count))


@admin.action(description="Abort selected experiments", permissions=["operate"])
def abort_experiments(modeladmin, request, queryset):
    """Call AbortExp for each selected experiment; report the ones that cannot be aborted."""
    _for_each(modeladmin, request, queryset, services.exp_abort,
              "Abort requested for {count} experiment(s).")


@admin.action(description="Delete selected experiments (finished ones only)",
              permissions=["operate"])
def delete_experiments(modeladmin, request, queryset):
    """Call DeleteExp for each selected experiment; running ones are refused, not deleted."""
    _for_each(modeladmin, request, queryset, services.exp_delete,
              "Deleted {count} experiment(s).")


@admin.register(Experiment)
class ExperimentAdmin(ReadOnlyAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    """Experiments are created through the API; status fields change only through transitions.

    Everything is read-only: a name or spec changed here would no longer match the artifact
    path and cluster jobs made from it. Aborting and deleting are the actions, which call the
    services. The changelist filters and searches with `ExperimentFilter`, as ListExps does.
    """

    list_display = ("id", "name", "exp_type", "cluster_name", "creator", "status", "created_at")
    filterset_class = ExperimentFilter
    list_filter = [
        filterset_list_filter(ExperimentFilter, "status"),
        filterset_list_filter(ExperimentFilter, "exp_type"),
        filterset_list_filter(ExperimentFilter, "cluster_name"),
        filterset_list_filter(ExperimentFilter, "creator", values_from="creator__email"),
    ]
    list_select_related = ("creator",)
    inlines = [JobInline, ArtifactInline]
    actions = [abort_experiments, delete_experiments]
    fields = ("name", "priority", "creator", "cluster_name", "exp_type", "role_to_task_spec",
              "config", "artifact_path") + STATUS_FIELDS
