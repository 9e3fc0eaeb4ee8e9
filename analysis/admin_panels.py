"""Analysis results as the admin shows them: tables (`plugins.render.tables`) and charts
(`plugins.render.series` drawn by `core.http.charts`), on an analysis's page and, for each succeeded
analysis, on its experiment's page (`experiments.admin_page.RESULT_PANELS`)."""
from __future__ import annotations

import json

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from core.http.charts import Mark, bar_chart
from core.errors import FalconError
from core.domain.statuses import AnalysisStatus
from plugins.render import series, tables

from .models import AnalysisRecord
from .outputs import read_results

ANALYSES_SHOWN = 10  # the newest succeeded analyses of an experiment on its page
RECORDS_READ = 2000  # records of each results file read for its charts and tables
ROWS_SHOWN = 50  # table rows shown on the experiment's page


def results_html(plugin_name: str, records: list[dict], more: str = "") -> str:
    """Results as HTML: the CLI's tables for a built-in plugin (`plugins.render`),
    pretty-printed JSON for anything else; `more` is a note under them."""
    try:
        rendered = tables(plugin_name, records)
    except (KeyError, TypeError, ValueError):
        rendered = []  # records a renderer cannot read are shown as they are
    if rendered:
        return format_html("{}<p>{}</p>", format_html_join(
            "", "<h4>{}</h4><table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>",
            ((t.title, format_html_join("", "<th>{}</th>", ((c,) for c in t.columns)),
              format_html_join("", "<tr>{}</tr>", ((format_html_join(
                  "", "<td>{}</td>", ((cell,) for cell in row)),) for row in t.rows)))
             for t in rendered)), more)
    text = "\n".join(json.dumps(r, indent=2, ensure_ascii=False) for r in records)
    return format_html("<pre>{}</pre><p>{}</p>", text, more)


def charts_html(plugin_name: str, records: list[dict]) -> str:
    """One SVG bar chart per series of the results (`plugins.render.series`)."""
    try:
        found = series(plugin_name, records)
    except (KeyError, TypeError, ValueError, AttributeError):
        return ""  # records of an unexpected shape: the tables (or JSON) still show them
    # `bar_chart` escapes every text it draws: its output is markup to keep as it is.
    return format_html_join("", '<div class="falcon-chart-box">{}</div>', (
        (mark_safe(bar_chart(s.title, [Mark(label, value) for label, value in s.points],
                             unit=s.unit)),) for s in found))


def exp_results_panel(exp) -> str:
    """The experiment's newest `ANALYSES_SHOWN` succeeded analyses: charts, then tables."""
    records = list(AnalysisRecord.objects.filter(experiment_id=exp.pk,
                                                 status=AnalysisStatus.SUCCEEDED)
                   .order_by("-created_at", "-analysis_id")[:ANALYSES_SHOWN + 1])
    if not records:
        return "no succeeded analysis"
    parts = []
    for record in records[:ANALYSES_SHOWN]:
        link = reverse("admin:analysis_analysisrecord_change", args=[record.analysis_id])
        try:
            out = read_results(record, max_records=RECORDS_READ)
        except FalconError as exc:
            body = format_html("<p>{}</p>", exc.message)
        except (OSError, ValueError) as exc:
            body = format_html("<p>cannot read the results: {}</p>", exc)
        else:
            more = (format_html('more on <a href="{}">the analysis page</a>', link)
                    if out["truncated"] or len(out["records"]) > ROWS_SHOWN else "")
            body = format_html("{}{}", charts_html(record.plugin_name, out["records"]),
                               results_html(record.plugin_name, out["records"][:ROWS_SHOWN],
                                            more))
        parts.append(format_html(
            '<div class="falcon-analysis" data-plugin="{}"><h3><a href="{}">{}</a> {}</h3>{}'
            "</div>", record.plugin_name, link, record.plugin_name or "script",
            record.analysis_id, body))
    if len(records) > ANALYSES_SHOWN:
        parts.append(format_html('<p><a href="{}?exp={}&amp;status=succeeded">all succeeded '
                                 "analyses</a></p>",
                                 reverse("admin:analysis_analysisrecord_changelist"), exp.pk))
    return format_html_join("", "{}", ((p,) for p in parts))
