"""What Falcon's staff may do in the Django admin, and how its changelists filter.

`ReadOnlyAdminMixin` is the one read-only admin (model admins and inlines alike): operators view
rows and run the actions a model admin declares, nothing is added, edited or deleted by a form
(status fields change only through transitions; deleting goes through the services).
`FilterSetAdminMixin` makes a changelist's filters and search those of the entity's FilterSet
(`core.http.filters`), the same names and values as the HTTP and gRPC lists.

The display helpers make every entity's pages alike: `status_badge` (a coloured badge),
`truncated` (a cell cut to fit a 1400-pixel list, the full text on hover), `duration`,
`yaml_block` (a spec pretty-printed as YAML), `history_table` (the transition history) and
`confirm_action` (the confirmation page of an action that changes rows).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import yaml
from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from core.errors import ValidationFailed
from core.http.filters import FalconFilterSet, SearchFilter


class ReadOnlyAdminMixin:
    """A read-only admin for operators: view every field, run the declared actions, no forms.

    Falcon's `is_staff` is the operator role (staff may abort or delete any experiment), set in
    the admin; per-model Django permissions would leave an operator who is not a superuser with
    an empty admin, so every active staff user may view. Adding, changing and deleting are
    refused to everyone by default; every field is read-only. An action that changes rows goes
    through a service and declares `allowed_permissions = ("operate",)`
    (`has_operate_permission`: active staff).

    Mix it in before `admin.ModelAdmin` or an inline (`admin.TabularInline`, ...).
    """

    def is_operator(self, request) -> bool:
        """True when the request's user is active staff (an operator)."""
        user = request.user
        return bool(user.is_active and user.is_staff)

    def has_module_permission(self, request) -> bool:
        return self.is_operator(request) or super().has_module_permission(request)

    def has_view_permission(self, request, obj=None) -> bool:
        return self.is_operator(request) or super().has_view_permission(request, obj)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_operate_permission(self, request) -> bool:
        """Whether the user may run the actions that call services (`allowed_permissions`)."""
        return self.is_operator(request)

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        """Every field shown: the admin's `fields` if it declares them, else every model field."""
        if self.fields:
            return list(self.fields)
        if getattr(self, "fieldsets", None):
            return [name for _title, options in self.fieldsets for name in options["fields"]]
        return [field.name for field in self.model._meta.fields]

    def get_fields(self, request, obj=None) -> list[str]:
        """The fields shown: those of `fieldsets` when declared (no form field besides)."""
        if getattr(self, "fieldsets", None):
            return self.get_readonly_fields(request, obj)
        return super().get_fields(request, obj)

    def history_view(self, request, object_id, extra_context=None):
        """Django's "History" (edits made in the admin, of which there are none here) goes to
        the row's page, which shows its transition history."""
        from django.shortcuts import redirect

        return redirect("../change/")

    def render_change_form(self, request, context, add=False, change=False, form_url="",
                           obj=None):
        """The page of one row with no Save or Delete button: nothing here is saved."""
        context.update({"show_save": False, "show_save_and_continue": False,
                        "show_save_and_add_another": False, "show_delete": False,
                        "show_delete_link": False})
        return super().render_change_form(request, context, add=add, change=change,
                                          form_url=form_url, obj=obj)


# Badge colours by status (text colour on a light background), the CLI's colours.
BADGE_COLOURS = {
    "created": ("#055160", "#cff4fc"), "pending": ("#055160", "#cff4fc"),
    "running": ("#664d03", "#fff3cd"), "succeeded": ("#0f5132", "#d1e7dd"),
    "failed": ("#842029", "#f8d7da"), "aborting": ("#6f42c1", "#e9dcff"),
    "aborted": ("#6f42c1", "#e9dcff"), "cancelled": ("#6f42c1", "#e9dcff"),
}


def status_badge(status: str | None) -> str:
    """Return `status` as a coloured badge (HTML); `-` for none."""
    if not status:
        return "-"
    colour, background = BADGE_COLOURS.get(str(status).lower(), ("#333", "#e9ecef"))
    return format_html(
        '<span class="falcon-status falcon-status-{}" style="color:{};background:{};'
        'padding:1px 8px;border-radius:10px;font-weight:600;white-space:nowrap">{}</span>',
        str(status).lower(), colour, background, status)


def truncated(text: Any, max_chars: int = 40) -> str:
    """Return `text` cut to `max_chars` characters with `…`, the full text in `title` (HTML)."""
    text = "" if text is None else str(text)
    if len(text) <= max_chars:
        return format_html('<span title="{}">{}</span>', text, text or "-")
    return format_html('<span title="{}">{}…</span>', text, text[:max_chars - 1])


def duration(started: datetime | None, finished: datetime | None,
             now: datetime | None = None) -> str:
    """How long a run ran, `1h 02m 03s` (seconds), up to now while it runs; `-` before it.
    Under a second it is shown in milliseconds (`12 ms`), never as `0s`."""
    if started is None:
        return "-"
    exact = ((finished or now or timezone.now()) - started).total_seconds()
    if 0 <= exact < 1:
        return f"{round(exact * 1000)} ms"
    seconds = int(exact)
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {seconds:02d}s"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def seconds_text(value: datetime | None) -> str:
    """A time to the second with its time zone (`2026-01-02 03:04:05 UTC`); `-` for none."""
    if value is None:
        return "-"
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")


class _BlockDumper(yaml.SafeDumper):
    """A SafeDumper that writes a multi-line string (a command, a config) as a `|` block."""


def _represent_block_str(dumper: yaml.SafeDumper, text: str) -> Any:
    # PyYAML itself falls back to a quoted string when a block cannot hold the text exactly
    # (trailing spaces on a line, control characters).
    return dumper.represent_scalar("tag:yaml.org,2002:str", text,
                                   style="|" if "\n" in text else None)


_BlockDumper.add_representer(str, _represent_block_str)


def yaml_block(value: Any) -> str:
    """Return JSON-shaped `value` pretty-printed as block YAML in a `<pre>` (HTML)."""
    text = yaml.dump(value, Dumper=_BlockDumper, sort_keys=True, allow_unicode=True,
                     default_flow_style=False, width=100)
    return format_html('<pre class="falcon-yaml">{}</pre>', text)


def verbatim_block(text: str | None) -> str:
    """Return `text` exactly as stored in a `<pre>` (HTML); `-` for none."""
    if not text:
        return "-"
    return format_html('<pre class="falcon-verbatim">{}</pre>', text)


def history_table(events: Iterable[Any], *, name_of: Callable[[Any], str] | None = None) -> str:
    """Return transition events (`core.models.TransitionEvent`) as an HTML table, oldest first.

    Args:
        events: the events, in order.
        name_of: names an event's row (`job/main`); default `<entity type> <entity id>`.
    """
    events = list(events)
    if not events:
        return "no status change yet"
    name_of = name_of or (lambda event: f"{event.entity_type} {event.entity_id}")
    rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                            "<td>{}</td><td>{}</td></tr>", (
        (timezone.localtime(event.at).strftime("%Y-%m-%d %H:%M:%S.%f %Z"), name_of(event),
         status_badge(event.from_status), status_badge(event.to_status), event.reason or "-",
         event.actor, truncated(event.message, 120))
        for event in events))
    return format_html(
        '<table class="falcon-history"><thead><tr><th>time</th><th>object</th><th>from</th>'
        "<th>to</th><th>reason</th><th>actor</th><th>message</th></tr></thead>"
        "<tbody>{}</tbody></table>", rows)


def confirm_action(modeladmin, request, queryset: QuerySet, *, action: str, verb: str,
                   will: list[Any], will_not: list[tuple[Any, str]],
                   perform: Callable[[], None]) -> TemplateResponse | None:
    """Show an action's confirmation page, or, once confirmed, perform it.

    The first POST (from the changelist) renders `admin/falcon_confirm_action.html`: the rows
    that will change and those that will not, each with why. Its form posts the same selection
    back with `confirm=yes`; then `perform()` runs and None is returned (the admin goes back to
    the changelist).

    Args:
        modeladmin: the ModelAdmin running the action.
        request: the action's request.
        queryset: the selected rows.
        action: the action's function name (the form's `action` value).
        verb: what the action does, for the page's title and button (`Abort`).
        will: the rows that would change.
        will_not: `(row, why)` for the selected rows that would not change.
        perform: does the work (called only on the confirming POST).
    """
    if request.POST.get("confirm") == "yes":
        perform()
        return None
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{verb} {len(will)} of {len(will) + len(will_not)} "
                 f"{opts.verbose_name_plural}?",
        "verb": verb, "action": action, "opts": opts, "will": will, "will_not": will_not,
        "queryset": queryset, "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "selected": [str(pk) for pk in queryset.values_list("pk", flat=True)],
    }
    return TemplateResponse(request, "admin/falcon_confirm_action.html", context)


class FilterSetListFilter(admin.SimpleListFilter):
    """A changelist filter that applies one filter of a FilterSet, under the same name.

    Made by `filterset_list_filter`. Its choices are the filter's own (the status enum's) or the
    values found in the rows; the URL parameter is the HTTP API's (`?status=Running,Created`).
    """

    filterset_class: type[FalconFilterSet]
    values_from: str | None = None

    def _filter(self):
        return self.filterset_class.base_filters[self.parameter_name]

    def lookups(self, request, model_admin) -> list[tuple[Any, str]]:
        """The filter's choices, or the distinct non-empty values of `values_from` in the rows."""
        choices = self._filter().extra.get("choices")
        if choices:
            return [(value, label) for value, label in choices]
        path = self.values_from or self._filter().field_name
        values = (model_admin.get_queryset(request).order_by(path)
                  .values_list(path, flat=True).distinct())
        return [(value, value) for value in values if value not in (None, "")]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        """Apply the FilterSet's filter to the chosen value.

        Raises:
            IncorrectLookupParameters: the value is invalid (the admin shows its error page).
        """
        value = self.value()
        if value is None:
            return queryset
        try:
            values = self.filterset_class.validate({self.parameter_name: value})
        except ValidationFailed as exc:
            raise IncorrectLookupParameters(exc.message) from exc
        return self.filterset_class.apply(queryset, values)


def filterset_list_filter(filterset_class: type[FalconFilterSet], name: str, *,
                          title: str | None = None,
                          values_from: str | None = None) -> type[FilterSetListFilter]:
    """Return a `list_filter` entry applying `filterset_class`'s filter `name`.

    Args:
        filterset_class: the entity's FilterSet (`ExperimentFilter`, ...).
        name: one of its filter names; also the URL parameter (`status`).
        title: the sidebar's heading (default: the name, with spaces).
        values_from: the model path whose distinct values are offered, when the filter has no
            choices of its own (default: the filter's `field_name`; e.g. `creator__email`).

    Raises:
        KeyError: `filterset_class` has no filter `name`.
    """
    if name not in filterset_class.base_filters:
        raise KeyError(f"{filterset_class.__name__} has no filter {name!r}.")
    return type(f"{filterset_class.__name__}_{name}_ListFilter", (FilterSetListFilter,), {
        "filterset_class": filterset_class, "parameter_name": name,
        "title": title or name.replace("_", " "), "values_from": values_from})


class FilterSetAdminMixin:
    """A changelist that filters and searches with the entity's FilterSet.

    Set `filterset_class`, and `list_filter` to `filterset_list_filter(...)` entries. The search
    box applies the FilterSet's `search` filter (every term in one of its fields), as the HTTP
    `?search=` does.
    """

    filterset_class: type[FalconFilterSet]

    def _search_filter(self) -> SearchFilter | None:
        search = self.filterset_class.base_filters.get("search")
        return search if isinstance(search, SearchFilter) else None

    def get_search_fields(self, request) -> tuple[str, ...]:
        """The fields the FilterSet's `search` looks in (the admin shows its box if any)."""
        search = self._search_filter()
        return search.search_fields if search else super().get_search_fields(request)

    def get_search_results(self, request, queryset: QuerySet,
                           search_term: str) -> tuple[QuerySet, bool]:
        """Return `(rows matching the FilterSet's search, False)`: no duplicates are possible."""
        if self._search_filter() is None:
            return super().get_search_results(request, queryset, search_term)
        if not search_term:
            return queryset, False
        return self.filterset_class.apply(queryset, {"search": search_term}), False
