"""What a daily user looks for on an experiment's admin page, and the pages behind its links.

- Labels: shown as badges, changed on their own page through `services.exp_update_labels` (the
  service `PATCH /api/v1/exps/{id}/labels` calls), filtered in the list by `key=value`.
- Logs: the last `LOG_TAIL_LINES` lines of each replica, read by `files.exp_log_chunk` (what
  `falcon exp logs --tail` reads); at most `REPLICAS_SHOWN` replicas a role.
- Artifact files: the first `FILES_SHOWN` names (`files.exp_artifact_page`), each linking to a
  download served by the API's file view (`ExpArtifactFileView`, Range and ETag included),
  mounted under the admin so it takes the admin's session and only admits active staff.
- Result panels: other apps add sections (the analysis app its results with charts) through
  `RESULT_PANELS`, since this app may not import theirs (docs/architecture.md, layers).
"""
from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from core.errors import FalconError, ValidationFailed

from . import services
from .files import exp_artifact_page, exp_log_chunk, replica_count
from .filters import ExperimentFilter
from .labels import parse_label_args
from .models import ExpLabel, Experiment

LOG_TAIL_LINES = 20
LOG_LINE_CHARS = 400  # a longer line is cut with `…` on the page (the API has the whole line)
REPLICAS_SHOWN = 8
FILES_SHOWN = 100
LABEL_CHOICES = 100  # `key=value` pairs offered in the list's sidebar

# `(route, view, name)`: pages other apps add under the experiments' admin URL, each
# `view(model_admin, request)` (the analysis app's compare page).
PAGE_VIEWS: list[tuple[str, Callable, str]] = []

# `panel(exp)` returns HTML for the experiment page, every user text in it escaped by the panel.
RESULT_PANELS: list[Callable[[Experiment], str]] = []


def labels_html(exp: Experiment) -> str:
    """The labels as `key=value` badges and a link to change them."""
    edit = reverse("admin:experiments_experiment_labels", args=[exp.pk])
    badges = format_html_join(" ", '<span class="falcon-label">{}={}</span>',
                              sorted(exp.labels.items())) if exp.labels else "none"
    return format_html('<span id="falcon-labels">{}</span> · <a href="{}" '
                       'id="falcon-labels-edit">change labels</a>', badges, edit)


def _cut(line: str) -> str:
    return line if len(line) <= LOG_LINE_CHARS else line[:LOG_LINE_CHARS - 1] + "…"


def log_tails_html(exp: Experiment) -> str:
    """The last lines of each replica's log, one `<pre>` a replica; why none where none."""
    jobs = sorted(exp.jobs.all(), key=lambda job: job.role)
    if not jobs:
        return "no jobs"
    parts = []
    for job in jobs:
        count = replica_count(job.task_spec or {})
        for replica in range(min(count, REPLICAS_SHOWN)):
            api = reverse("exp-logs", kwargs={"exp_id": exp.pk}) + "?" + urlencode(
                {"role": job.role, "replica": replica})
            try:
                chunk = exp_log_chunk(exp=exp, role=job.role, replica=replica,
                                      tail=LOG_TAIL_LINES)
                lines = chunk.data.decode("utf-8", "replace").splitlines()
                body = format_html('<pre class="falcon-log">{}</pre>',
                                   "\n".join(_cut(line) for line in lines) or "(empty)")
            except FalconError as exc:
                body = format_html('<p class="falcon-log-none">{}</p>', exc.message)
            parts.append(format_html(
                '<div class="falcon-log-replica" data-role="{}" data-replica="{}"><h4>{} '
                'replica {} <a href="{}">(whole log, API)</a></h4>{}</div>',
                job.role, replica, job.role, replica, api, body))
        if count > REPLICAS_SHOWN:
            parts.append(format_html("<p>{} more replicas of {}: falcon exp logs --role {} "
                                     "--replica N</p>", count - REPLICAS_SHOWN, job.role,
                                     job.role))
    return format_html_join("", "{}", ((part,) for part in parts))


def files_html(exp: Experiment) -> str:
    """The first `FILES_SHOWN` artifact files with their sizes, each a download link."""
    from core.http.charts import format_quantity

    try:
        _, page = exp_artifact_page(exp=exp, after=None, limit=FILES_SHOWN)
    except FalconError as exc:
        return exc.message
    if not page.files:
        return "no files yet"
    base = reverse("admin:experiments_experiment_file", args=[exp.pk])
    rows = format_html_join("", '<tr><td><a class="falcon-file" href="{}">{}</a></td>'
                                "<td>{}</td></tr>",
                            ((base + "?" + urlencode({"name": f.name}), f.name,
                              format_quantity(f.size, "B")) for f in page.files))
    more = (format_html("<p>More files: falcon exp artifacts {}</p>", exp.pk)
            if page.next_after is not None else "")
    return format_html('<table class="falcon-files"><thead><tr><th>file</th><th>size</th>'
                       "</tr></thead><tbody>{}</tbody></table>{}", rows, more)


def result_panels_html(exp: Experiment) -> str:
    """The sections other apps add (`RESULT_PANELS`), in the order they were added."""
    if not RESULT_PANELS:
        return "-"
    return format_html_join("", '<div class="falcon-panel">{}</div>',
                            ((panel(exp),) for panel in RESULT_PANELS))


class LabelChangeForm(forms.Form):
    """kubectl-style label changes: `key=value` sets a label, `key-` removes it."""

    changes = forms.CharField(
        max_length=8192, widget=forms.TextInput(attrs={"size": 80, "autofocus": True}),
        help_text="Space-separated: key=value sets a label, key- removes it "
                  "(as falcon exp label). Example: baseline=true stale-")

    def clean_changes(self) -> tuple[dict[str, str], list[str]]:
        try:
            return parse_label_args(self.cleaned_data["changes"].split())
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


def label_view(model_admin: admin.ModelAdmin, request, exp_id: int):
    """GET: the labels and a form to change them; POST: `services.exp_update_labels` as the
    logged-in operator, then back to the experiment's page."""
    exp = get_object_or_404(Experiment, pk=exp_id)
    if not model_admin.has_operate_permission(request):
        from django.core.exceptions import PermissionDenied

        raise PermissionDenied
    form = LabelChangeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        to_set, to_remove = form.cleaned_data["changes"]
        try:
            labels = services.exp_update_labels(exp_id=exp.pk, actor=request.user,
                                                set_labels=to_set, remove=to_remove)
        except ValidationFailed as exc:
            form.add_error("changes", " ".join(m for ms in exc.errors.values() for m in ms))
        except FalconError as exc:
            form.add_error("changes", exc.message)
        else:
            shown = ", ".join(f"{k}={v}" for k, v in labels.items()) or "none"
            model_admin.message_user(request, f"Labels of experiment {exp.pk}: {shown}.",
                                     messages.SUCCESS)
            return HttpResponseRedirect(reverse("admin:experiments_experiment_change",
                                                args=[exp.pk]))
    context = {**model_admin.admin_site.each_context(request), "title": f"Labels of {exp}",
               "opts": Experiment._meta, "exp": exp, "form": form,
               "labels": sorted(exp.labels.items())}
    return TemplateResponse(request, "admin/experiments/experiment/labels.html", context)


def file_view():
    """The API's artifact-file view with the admin's session as its authentication and active
    staff as its permission (the admin wraps it in `admin_view` too, which sends anyone else to
    its login page). Left out of the OpenAPI schema: it is no API route."""
    from drf_spectacular.utils import extend_schema
    from rest_framework.authentication import SessionAuthentication
    from rest_framework.permissions import IsAdminUser

    from .api.files import ExpArtifactFileView

    class AdminArtifactFileView(ExpArtifactFileView):
        authentication_classes = [SessionAuthentication]
        permission_classes = [IsAdminUser]

        @extend_schema(exclude=True)
        def get(self, request, exp_id: int):
            return super().get(request, exp_id)

    return AdminArtifactFileView.as_view()


class LabelListFilter(admin.SimpleListFilter):
    """Filter the list by one label, `?label=key=value`, through `ExperimentFilter` (the
    ListExps `label` selector); the sidebar offers the first `LABEL_CHOICES` pairs in use."""

    title = "label"
    parameter_name = "label"

    def lookups(self, request, model_admin):
        pairs = (ExpLabel.objects.order_by("key", "value").values_list("key", "value")
                 .distinct()[:LABEL_CHOICES])
        return [(f"{key}={value}", f"{key}={value}") for key, value in pairs]

    def queryset(self, request, queryset):
        from django.contrib.admin.options import IncorrectLookupParameters

        if self.value() is None:
            return queryset
        try:
            values = ExperimentFilter.validate({"label": self.value()})
        except ValidationFailed as exc:
            raise IncorrectLookupParameters(exc.message) from exc
        return ExperimentFilter.apply(queryset, values)
