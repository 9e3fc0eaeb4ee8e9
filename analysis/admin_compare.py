"""The admin's compare page: a "Compare" action on the experiment list opens it for the 2 to 20
selected experiments. It renders the compare document of `analysis.compare.exp_compare` (the
one `falcon exp compare -o json` and `GET /api/v1/exps/compare` return, docs/compare.md):

- the experiments, their outcome and duration;
- the config differences by key path;
- the metrics of each plugin side by side, a change against the baseline beyond `threshold`
  percent (default `DEFAULT_THRESHOLD`) highlighted, better or worse when the catalog says
  which way is better;
- one bar chart per chosen metric, one mark per experiment (the baseline highlighted). The
  metrics to chart are picked with the table's check boxes; by default those that changed
  beyond the threshold, at most `MAX_CHARTS`.
"""
from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.safestring import mark_safe

from core.http.charts import Mark, bar_chart, format_quantity
from core.errors import FalconError, ValidationFailed
from core.limits.numbers import BadNumber, parse_decimal
from experiments.models import Experiment

from .compare import MAX_EXPERIMENTS, MIN_EXPERIMENTS, exp_compare

DEFAULT_THRESHOLD = 5.0  # percent
MAX_THRESHOLD = 1_000_000.0
MAX_CHARTS = 12
CHART_SEP = "::"  # `chart=<plugin>::<metric path>`
UNITS = {"bytes": "B", "count": ""}  # the document's units as `core.http.charts` names them


@admin.action(description="Compare selected experiments (2 to 20)")
def compare_experiments(modeladmin, request, queryset):
    """Open the compare page for the selection, oldest first: the oldest (smallest id) is the
    baseline, as a run is usually compared with the one it came from; the page can change it."""
    selected = [int(pk) for pk in request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)
                if pk.isdigit()]
    found = set(queryset.values_list("pk", flat=True))
    ids = sorted(pk for pk in set(selected) if pk in found)
    if not MIN_EXPERIMENTS <= len(ids) <= MAX_EXPERIMENTS:
        modeladmin.message_user(request, f"Select {MIN_EXPERIMENTS} to {MAX_EXPERIMENTS} "
                                         f"experiments to compare; {len(ids)} selected.",
                                messages.WARNING)
        return None
    return HttpResponseRedirect(reverse("admin:experiments_experiment_compare") + "?"
                                + urlencode({"ids": ",".join(map(str, ids))}))


def _ids(raw: str) -> list[int]:
    try:
        return [parse_decimal(part.strip(), minimum=1, maximum=2 ** 63 - 1)
                for part in raw.split(",") if part.strip()]
    except BadNumber as exc:
        raise ValidationFailed({"ids": [f"{exc}: give experiment ids separated by commas, "
                                        f"e.g. ids=12,15."]}) from None


def _baseline(raw: str | None) -> int | None:
    """The one id of `baseline` (the page's select), None when not given."""
    if raw in (None, ""):
        return None
    try:
        return parse_decimal(raw.strip(), minimum=1, maximum=2 ** 63 - 1)
    except BadNumber as exc:
        raise ValidationFailed({"baseline": [f"{exc}: give one of the ids compared, e.g. "
                                             f"baseline=12; got {raw[:40]!r}."]}) from None


def _threshold(raw: str | None) -> float:
    if raw in (None, ""):
        return DEFAULT_THRESHOLD
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_THRESHOLD:  # NaN fails too
        raise ValidationFailed({"threshold": [
            f"must be a number of percent from 0 to {MAX_THRESHOLD:g}, e.g. 5; got "
            f"{str(raw)[:40]!r}."]})
    return value


def _patterns(query) -> list[str]:
    """The metric patterns: each `metric` value, a comma list (the page's box); blanks out."""
    return [part.strip() for value in query.getlist("metric") for part in value.split(",")
            if part.strip()]


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _beyond(cell: dict[str, Any], threshold: float) -> bool:
    """True when a cell changed more than `threshold` percent (any change from a baseline 0)."""
    if cell["state"] != "number" or cell["change"] in (None, 0):
        return False
    percent = cell["change_percent"]
    return percent is None or abs(percent) > threshold


def _verdict(cell: dict[str, Any], better: str) -> str:
    if better not in ("higher", "lower"):
        return "changed"
    return "better" if (cell["change"] > 0) == (better == "higher") else "worse"


def _metric_rows(document: dict[str, Any], threshold: float) -> list[dict[str, Any]]:
    rows = []
    for section in document["plugins"]:
        for metric in section["metrics"]:
            unit = UNITS.get(metric["unit"], metric["unit"])
            cells, changed = [], False
            for position, cell in enumerate(metric["values"]):
                beyond = position > 0 and _beyond(cell, threshold)
                changed = changed or beyond
                percent = cell["change_percent"]
                cells.append({
                    "state": cell["state"],
                    "text": (format_quantity(cell["value"], unit) if cell["state"] == "number"
                             else "NaN" if cell["state"] == "nan" else "missing"),
                    # An unchanged value shows no `+0.0 %`, as the CLI's table does.
                    "change": ("" if position == 0 or cell["change"] in (None, 0) else
                               f"{percent:+.1f} %" if percent is not None else
                               f"{format_quantity(cell['change'], unit)} (from 0)"),
                    "css": f"falcon-{_verdict(cell, metric['better'])}" if beyond else ""})
            rows.append({"key": f"{section['plugin']}{CHART_SEP}{metric['path']}",
                         "plugin": section["plugin"], "path": metric["path"],
                         "unit": metric["unit"], "better": metric["better"], "cells": cells,
                         "changed": changed, "metric": metric})
    return rows


def _charts(document: dict[str, Any], rows: list[dict[str, Any]],
            chosen: list[str]) -> tuple[list[str], list[str]]:
    """The charts of the chosen metric keys (default: the changed ones), and the keys drawn."""
    keys = chosen or [row["key"] for row in rows if row["changed"]]
    keys = keys[:MAX_CHARTS]
    by_key = {row["key"]: row for row in rows}
    labels = [f"#{exp['id']} {exp['name']}" for exp in document["experiments"]]
    charts = []
    for key in keys:
        row = by_key.get(key)
        if row is None:
            continue
        marks = [Mark(label, cell["value"] if cell["state"] == "number" else None,
                      highlight=position == 0)
                 for position, (label, cell) in enumerate(zip(labels, row["metric"]["values"]))]
        unit = UNITS.get(row["unit"], row["unit"])
        # `bar_chart` escapes every text it draws (names, paths): keep its markup as it is.
        charts.append(mark_safe(bar_chart(f"{row['plugin']}: {row['path']}", marks, unit=unit)))
    return charts, [k for k in keys if k in by_key]


def compare_view(model_admin, request):
    """The compare page of `?ids=12,15[&baseline=15][&threshold=5][&metric=PATTERN...]
    [&plugin=NAME...][&chart=PLUGIN::PATH...]`; a bad parameter is shown naming it."""
    errors: dict[str, list[str]] = {}
    document, rows, charts, drawn = None, [], [], []
    query = request.GET
    threshold = DEFAULT_THRESHOLD
    try:
        threshold = _threshold(query.get("threshold"))
        document = exp_compare(
            exp_ids=_ids(query.get("ids", "")),
            baseline=_baseline(query.get("baseline")),
            plugins=[p for p in query.getlist("plugin") if p.strip()],
            metrics=_patterns(query))
    except ValidationFailed as exc:
        errors = exc.errors
    except FalconError as exc:
        errors = {"ids": [exc.message]}
    if document is not None:
        rows = _metric_rows(document, threshold)
        charts, drawn = _charts(document, rows, query.getlist("chart"))
    experiments = document["experiments"] if document else []
    differences = [{"path": d["path"], "values": [
        "absent" if position in d["absent"] else _shown(value)
        for position, value in enumerate(d["values"])]} for d in
        (document["differences"] if document else [])]
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Compare {len(experiments)} experiments" if document else "Compare",
        "opts": Experiment._meta, "errors": errors, "document": document,
        "experiments": experiments, "differences": differences, "rows": rows,
        "charts": charts, "drawn": drawn, "threshold": threshold,
        "default_threshold": DEFAULT_THRESHOLD, "ids": query.get("ids", ""),
        "baseline": document["baseline"] if document else "",
        "metric_patterns": _patterns(query), "plugins": query.getlist("plugin"),
        "max_charts": MAX_CHARTS, "analyses": _analyses(document),
    }
    return TemplateResponse(request, "admin/analysis/compare.html", context,
                            status=400 if errors else 200)


def _analyses(document: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per plugin, which analysis stands for each experiment (or why none)."""
    if document is None:
        return []
    return [{"plugin": s["plugin"], "cells": [
        {"id": a["analysis_id"], "state": a["state"], "note": a["note"],
         "url": reverse("admin:analysis_analysisrecord_change", args=[a["analysis_id"]])
         if a["analysis_id"] else ""} for a in s["analyses"]]} for s in document["plugins"]]
