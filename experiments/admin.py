"""Django admin for operators: experiments with their jobs and artifact; abort via the service.

The admin's actions call the same services as the APIs, as the logged-in admin user: the admin
only admits staff (`AdminSite.has_permission`), and staff may abort or delete any experiment
(`experiments.services.exp_may_change`). Each action first shows a confirmation page listing
which selected experiments will change and which will not, and why (`core.admin.confirm_action`).
"""
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html

from artifacts.models import Artifact
from core.admin import (
    FilterSetAdminMixin, ReadOnlyAdminMixin, duration, filterset_list_filter, history_table,
    status_badge, truncated, verbatim_block, yaml_block,
)
from core.errors import FalconError
from core.domain.history import exp_events
from core.domain.statuses import ExpStatus
from jobs.models import Job

from . import admin_page, services
from .filters import ExperimentFilter
from .models import Experiment

TIME_FIELDS = ("created_at", "updated_at", "started_at", "finished_at", "aborting_at",
               "aborted_at")


class JobInline(ReadOnlyAdminMixin, admin.TabularInline):
    """The experiment's jobs, read-only, each linking to its own page."""

    model = Job
    extra = 0
    fields = ("role", "status_badge", "reason", "message", "cluster_job_name", "started_at",
              "finished_at", "run_time")
    show_change_link = True

    @admin.display(description="status")
    def status_badge(self, job: Job) -> str:
        return status_badge(job.status)

    @admin.display(description="duration")
    def run_time(self, job: Job) -> str:
        return duration(job.started_at, job.finished_at)


class ArtifactInline(ReadOnlyAdminMixin, admin.StackedInline):
    """The experiment's artifact, read-only."""

    model = Artifact
    extra = 0
    fields = ("path", "artifact_type", "status_badge", "reason", "message", "finished_at")

    @admin.display(description="status")
    def status_badge(self, artifact: Artifact) -> str:
        return status_badge(artifact.status)


def _run_each(modeladmin, request, exp_ids, service, done: str) -> None:
    """Call `service(exp_id=..., actor=request.user)` for each id; report refusals and the count.

    A row that changed between the confirmation page and the confirming POST is refused by the
    service with its reason, shown to the operator; the others are still processed.
    """
    count = 0
    for exp_id in exp_ids:
        try:
            service(exp_id=exp_id, actor=request.user)
            count += 1
        except FalconError as exc:
            modeladmin.message_user(request, exc.message, level=messages.WARNING)
    if count:
        modeladmin.message_user(request, done.format(count=count))


def abort_plan(exps) -> tuple[list[Experiment], list[tuple[Experiment, str]]]:
    """Split experiments into those AbortExp would move to Aborting and the others, with why.

    The rules are `services.exp_abort_refusal`, read without locks for the confirmation page;
    the service decides again under its locks when the operator confirms.
    """
    will, will_not = [], []
    for exp in exps:
        if exp.status == ExpStatus.ABORTING:
            will_not.append((exp, "already being aborted"))
        elif exp.status == ExpStatus.ABORTED:
            will_not.append((exp, "already Aborted"))
        elif refusal := services.exp_abort_refusal(
                exp=exp, job_statuses=[job.status for job in exp.jobs.all()]):
            will_not.append((exp, refusal.message))
        else:
            will.append(exp)
    return will, will_not


def delete_plan(exps) -> tuple[list[Experiment], list[tuple[Experiment, str]]]:
    """Split experiments into those DeleteExp would delete (terminal ones) and the others.

    The rule is `services.exp_delete_refusal`, read without locks for the confirmation page.
    """
    will, will_not = [], []
    for exp in exps:
        if refusal := services.exp_delete_refusal(exp=exp):
            will_not.append((exp, refusal.message))
        else:
            will.append(exp)
    return will, will_not


@admin.action(description="Abort selected experiments", permissions=["operate"])
def abort_experiments(modeladmin, request, queryset):
    """AbortExp for each selected experiment that can be aborted, after a confirmation page."""
    from core.admin import confirm_action

    will, will_not = abort_plan(queryset.prefetch_related("jobs"))
    return confirm_action(
        modeladmin, request, queryset, action="abort_experiments", verb="Abort", will=will,
        will_not=will_not, perform=lambda: _run_each(
            modeladmin, request, [exp.pk for exp in will], services.exp_abort,
            "Abort requested for {count} experiment(s)."))


@admin.action(description="Delete selected experiments (finished ones only)",
              permissions=["operate"])
def delete_experiments(modeladmin, request, queryset):
    """DeleteExp for each selected finished experiment, after a confirmation page."""
    from core.admin import confirm_action

    will, will_not = delete_plan(queryset)
    return confirm_action(
        modeladmin, request, queryset, action="delete_experiments", verb="Delete", will=will,
        will_not=will_not, perform=lambda: _run_each(
            modeladmin, request, [exp.pk for exp in will], services.exp_delete,
            "Deleted {count} experiment(s)."))


@admin.register(Experiment)
class ExperimentAdmin(ReadOnlyAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    """Experiments are created through the API; status fields change only through transitions.

    Everything is read-only: a name or spec changed here would no longer match the artifact
    path and cluster jobs made from it. Aborting and deleting are the actions, which call the
    services. The changelist filters and searches with `ExperimentFilter`, as ListExps does; its
    columns fit a 1400-pixel screen (long names cut, the full name on hover).
    """

    list_display = ("id", "short_name", "status_badge", "type_", "cluster", "creator_email",
                    "short_reason", "run_time", "created_at")
    list_display_links = ("id", "short_name")
    filterset_class = ExperimentFilter
    list_filter = [
        filterset_list_filter(ExperimentFilter, "status"),
        filterset_list_filter(ExperimentFilter, "exp_type"),
        filterset_list_filter(ExperimentFilter, "cluster_name"),
        filterset_list_filter(ExperimentFilter, "creator", values_from="creator__email"),
        admin_page.LabelListFilter,
    ]
    list_select_related = ("creator",)
    inlines = [JobInline, ArtifactInline]
    actions = [abort_experiments, delete_experiments]
    fieldsets = [
        (None, {"fields": ("name", "status_badge", "reason", "message", "run_time", "creator",
                           "cluster_name", "exp_type", "priority", "labels_", "artifact_path",
                           "links")}),
        ("Logs", {"fields": ("log_tails",)}),
        ("Artifact files", {"fields": ("artifact_files",)}),
        ("Analysis results", {"fields": ("result_panels",)}),
        ("Times", {"fields": TIME_FIELDS}),
        ("Task specs (YAML)", {"fields": ("task_specs_yaml",)}),
        ("Config", {"fields": ("config_yaml", "config")}),
        ("History", {"fields": ("history",)}),
    ]

    def get_urls(self):
        """The labels page, artifact downloads and the pages other apps add
        (`admin_page.PAGE_VIEWS`), under the experiments' admin URL."""
        from django.urls import path

        wrap = self.admin_site.admin_view

        def bound(view):
            return wrap(lambda request, **kwargs: view(self, request, **kwargs))

        return [path(route, bound(view), name=f"experiments_experiment_{name}")
                for route, view, name in admin_page.PAGE_VIEWS] + [
            path("<int:exp_id>/labels/", wrap(lambda request, exp_id: admin_page.label_view(
                self, request, exp_id)), name="experiments_experiment_labels"),
            path("<int:exp_id>/file", wrap(admin_page.file_view()),
                 name="experiments_experiment_file"),
        ] + super().get_urls()

    @admin.display(description="labels")
    def labels_(self, exp: Experiment) -> str:
        return admin_page.labels_html(exp)

    @admin.display(description=f"last {admin_page.LOG_TAIL_LINES} lines of each replica")
    def log_tails(self, exp: Experiment) -> str:
        return admin_page.log_tails_html(exp)

    @admin.display(description=f"files (first {admin_page.FILES_SHOWN})")
    def artifact_files(self, exp: Experiment) -> str:
        return admin_page.files_html(exp)

    @admin.display(description="succeeded analyses")
    def result_panels(self, exp: Experiment) -> str:
        return admin_page.result_panels_html(exp)

    @admin.display(description="name", ordering="name")
    def short_name(self, exp: Experiment) -> str:
        return truncated(exp.name, 32)

    @admin.display(description="type", ordering="exp_type")
    def type_(self, exp: Experiment) -> str:
        return truncated(exp.exp_type, 16)

    @admin.display(description="cluster", ordering="cluster_name")
    def cluster(self, exp: Experiment) -> str:
        return truncated(exp.cluster_name, 16)

    @admin.display(description="status", ordering="status")
    def status_badge(self, exp: Experiment) -> str:
        return status_badge(exp.status)

    @admin.display(description="creator", ordering="creator__email")
    def creator_email(self, exp: Experiment) -> str:
        return truncated(exp.creator.email, 22)

    @admin.display(description="reason")
    def short_reason(self, exp: Experiment) -> str:
        return truncated(exp.reason, 18) if exp.reason else "-"

    @admin.display(description="duration")
    def run_time(self, exp: Experiment) -> str:
        return duration(exp.started_at, exp.finished_at)

    @admin.display(description="task specs")
    def task_specs_yaml(self, exp: Experiment) -> str:
        return yaml_block(exp.role_to_task_spec)

    @admin.display(description="config, parsed as YAML")
    def config_yaml(self, exp: Experiment) -> str:
        """The config pretty-printed when it is YAML (the verbatim text is below it)."""
        from core.limits.boundedyaml import YamlLimitError, load

        if not exp.config:
            return "-"
        try:
            # The bounded reader: an alias chain would expand to billions of values here.
            return yaml_block(load(exp.config))
        except YamlLimitError as exc:
            if exc.limit == "syntax":
                return "not YAML: shown verbatim below"
            return f"not shown parsed ({exc}): shown verbatim below"

    @admin.display(description="links")
    def links(self, exp: Experiment) -> str:
        """The experiment's analyses (their pages link their logs) and its events in the API."""
        analyses = reverse("admin:analysis_analysisrecord_changelist") + f"?exp={exp.pk}"
        return format_html('<a href="{}">analyses ({})</a> · <a href="{}">events (API)</a>',
                           analyses, exp.analyses.count(),
                           reverse("exp-events", kwargs={"exp_id": exp.pk}))

    @admin.display(description="transition history")
    def history(self, exp: Experiment) -> str:
        """Every status change of the experiment, its jobs, artifact and analyses, in order."""
        roles = dict(exp.jobs.values_list("pk", "role"))

        def name_of(event) -> str:
            if event.entity_type == "job":
                return f"job/{roles.get(int(event.entity_id), event.entity_id)}"
            if event.entity_type == "analysis":
                return f"analysis/{event.entity_id}"
            return event.entity_type

        return history_table(exp_events(exp_id=exp.pk), name_of=name_of)
