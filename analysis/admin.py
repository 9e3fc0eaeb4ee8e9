"""Django admin for operators: analyses, read-only, filtered by `AnalysisFilter`; cancel through
the analyzer controller (the database when it is unavailable); the log's tail and the first
results read from the store on the record's page. It also adds to the experiment pages what
needs this app: each succeeded analysis on an experiment's page (`admin_panels`) and the
"Compare" action with its page (`admin_compare`)."""
from __future__ import annotations

from django.contrib import admin, messages
from django.utils.html import format_html

from artifacts.store import store_for
from core.admin import (
    FilterSetAdminMixin, ReadOnlyAdminMixin, duration, filterset_list_filter, history_table,
    status_badge, truncated,
)
from core.errors import FalconError
from core.domain.history import entity_events
from experiments import admin_page
from experiments.admin import ExperimentAdmin

from . import analyzer_client, services
from .admin_compare import compare_experiments, compare_view
from .admin_panels import exp_results_panel, results_html
from .analyzer_client import ServiceUnavailable
from .filters import AnalysisFilter
from .models import AnalysisRecord
from .outputs import LOG_FILE, read_results

LOG_TAIL_BYTES = 64 * 1024
RESULTS_SHOWN = 50


@admin.action(description="Cancel selected analyses", permissions=["operate"])
def cancel_analyses(modeladmin, request, queryset):
    """CancelAnalysis for each selected analysis (the database when the controller is down)."""
    count = 0
    for record in queryset.select_related(None).only("analysis_id", "status"):
        if record.is_terminal:
            continue
        try:
            try:
                analyzer_client.cancel_analysis(analysis_id=record.analysis_id,
                                                requester_email=request.user.email)
            except ServiceUnavailable:
                services.analysis_cancel_in_db(record.analysis_id, actor=request.user)
            count += 1
        except FalconError as exc:
            modeladmin.message_user(request, f"{record.analysis_id}: {exc.message}",
                                    level=messages.WARNING)
    modeladmin.message_user(request, f"Cancelled {count} "
                                     f"{'analysis' if count == 1 else 'analyses'}.")


def unparsable_note(results: dict) -> str:
    """One sentence naming the lines of the results file that could not be read, and why."""
    lines = results["unparsable"]
    shown = "; ".join(f"line {u['line']}: {u['error']}" for u in lines[:5])
    return (f"{len(lines)} line{'s' if len(lines) != 1 else ''} of {results['file']} could "
            f"not be read: {shown}{'; …' if len(lines) > 5 else ''}.")


@admin.register(AnalysisRecord)
class AnalysisRecordAdmin(ReadOnlyAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    """Analyses are created by the analyzer controller and users; nothing is edited here."""

    list_display = ("analysis_id", "status_badge", "exp_name", "plugin_name", "analysis_type",
                    "attempts", "creator", "run_time", "created_at")
    filterset_class = AnalysisFilter
    list_filter = [
        filterset_list_filter(AnalysisFilter, "status"),
        filterset_list_filter(AnalysisFilter, "analysis_type"),
        filterset_list_filter(AnalysisFilter, "plugin", title="plugin name"),
        filterset_list_filter(AnalysisFilter, "exp", title="experiment"),
    ]
    list_select_related = ("experiment", "creator")
    actions = [cancel_analyses]
    fields = ("analysis_id", "name", "experiment", "artifact", "creator", "analysis_type",
              "plugin_name", "command", "script_name", "script_content", "status", "reason",
              "error_message",
              "result_path", "attempts", "cluster_object_name", "created_at", "updated_at",
              "started_at", "finished_at", "run_time", "links", "log_tail", "results",
              "history")

    @admin.display(description="status", ordering="status")
    def status_badge(self, record: AnalysisRecord) -> str:
        return status_badge(record.status)

    @admin.display(description="experiment", ordering="experiment_id")
    def exp_name(self, record: AnalysisRecord) -> str:
        return truncated(record.experiment, 40)

    @admin.display(description="duration")
    def run_time(self, record: AnalysisRecord) -> str:
        return duration(record.started_at, record.finished_at)

    @admin.display(description="links")
    def links(self, record: AnalysisRecord) -> str:
        """The run's whole log over HTTP, and the experiment's page."""
        from django.urls import reverse

        return format_html(
            '<a href="{}">log (API)</a> · <a href="{}">experiment</a>',
            reverse("analysis-logs", kwargs={"analysis_id": record.analysis_id}),
            reverse("admin:experiments_experiment_change", args=[record.experiment_id]))

    @admin.display(description="transition history")
    def history(self, record: AnalysisRecord) -> str:
        return history_table(entity_events(entity_type="analysis",
                                           entity_id=record.analysis_id))

    @admin.display(description=f"log (last {LOG_TAIL_BYTES // 1024} KiB)")
    def log_tail(self, record: AnalysisRecord) -> str:
        """The end of `output.log`, read from the store."""
        if not record.result_path:
            return "-"
        url = record.result_path + LOG_FILE
        try:
            store = store_for(url)
            size = store.size_of(url)
            if size is None:
                return "no log yet"
            data = store.read_range(url, max(0, size - LOG_TAIL_BYTES), LOG_TAIL_BYTES)
        except (OSError, ValueError) as exc:
            return f"cannot read {url}: {exc}"
        return format_html("<pre>{}</pre>", data.decode("utf-8", "replace"))

    @admin.display(description="error message")
    def error_message(self, record: AnalysisRecord) -> str:
        """Why the analysis failed or was cancelled (the `error_message` column)."""
        return record.message or "-"

    @admin.display(description=f"results (first {RESULTS_SHOWN})")
    def results(self, record: AnalysisRecord) -> str:
        """The first results read from the store: the CLI's tables for a built-in plugin
        (`plugins.render`), pretty-printed JSON for anything else."""
        try:
            out = read_results(record, max_records=RESULTS_SHOWN)
        except FalconError as exc:
            return exc.message
        except (OSError, ValueError) as exc:
            return f"cannot read the results: {exc}"
        more = f"… more in {out['file']}" if out["truncated"] else ""
        if out["unparsable"]:
            more = " ".join(filter(None, [more, unparsable_note(out)]))
        return results_html(record.plugin_name, out["records"], more)


admin_page.RESULT_PANELS.append(exp_results_panel)
admin_page.PAGE_VIEWS.append(("compare/", compare_view, "compare"))
ExperimentAdmin.actions = [*ExperimentAdmin.actions, compare_experiments]
