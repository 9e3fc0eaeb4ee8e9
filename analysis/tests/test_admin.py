"""The analyses' admin: filters, the record page with its log and results, the cancel action."""
from __future__ import annotations

import pytest

from accounts.models import User
from analysis import analyzer_client
from analysis.models import AnalysisRecord
from analysis.tests.factories import make_analysis, make_finished_exp
from analysis.tests.fake_analyzer import closed_port
from artifacts.store import local_path

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):
    admin = User.objects.create_superuser("ops@example.com", password="pw-for-tests")
    client.force_login(admin)
    return client


def test_changelist_filters(staff_client):
    exp = make_finished_exp()
    make_analysis(exp=exp, plugin_name="alpha-plugin", name="first-row")
    make_analysis(exp=exp, plugin_name="beta-plugin", analysis_type="online",
                  name="second-row")
    res = staff_client.get("/admin/analysis/analysisrecord/?analysis_type=online")
    assert res.status_code == 200
    assert b"second-row" in res.content and b"first-row" not in res.content
    res = staff_client.get(f"/admin/analysis/analysisrecord/?plugin=alpha-plugin&exp={exp.pk}"
                           "&status=pending")
    assert b"first-row" in res.content and b"second-row" not in res.content


def test_record_page_shows_log_and_results(staff_client, tmp_path):
    record = make_analysis(result_root=(tmp_path / "store").as_uri())
    res = staff_client.get(f"/admin/analysis/analysisrecord/{record.analysis_id}/change/")
    assert res.status_code == 200 and b"no log yet" in res.content
    for name, data in (("output.log", b"the <log> tail\n"),
                       ("summary.jsonl", b'{"metric": "p50", "value": 12}\nnot json\n')):
        path = local_path(record.result_path + name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    res = staff_client.get(f"/admin/analysis/analysisrecord/{record.analysis_id}/change/")
    assert b"the &lt;log&gt; tail" in res.content and b"&quot;metric&quot;: &quot;p50&quot;" \
        in res.content
    assert b"1 line of " in res.content and b"summary.jsonl could not be read: line 2: not " \
        b"JSON: Expecting value at column 1." in res.content


def test_cancel_action_falls_back_to_the_database(staff_client, settings):
    settings.FALCON_ANALYZER_TARGET = closed_port()
    records = [make_analysis(analysis_type="online") for _ in range(2)]
    try:
        res = staff_client.post("/admin/analysis/analysisrecord/", {
            "action": "cancel_analyses",
            "_selected_action": [r.analysis_id for r in records]}, follow=True)
    finally:
        analyzer_client.close()
    assert res.status_code == 200 and b"Cancelled 2 analyses." in res.content
    assert set(AnalysisRecord.objects.values_list("status", flat=True)) == {"cancelled"}


def _succeed(record: AnalysisRecord, results: bytes) -> AnalysisRecord:
    from analysis.services import analysis_record_update

    path = local_path(record.result_path + f"{record.plugin_name}.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(results)
    analysis_record_update(record.analysis_id, {"status": "running"})
    done, _ = analysis_record_update(record.analysis_id, {"status": "succeeded"})
    return done


def test_experiment_page_shows_each_succeeded_analysis_with_charts(staff_client, tmp_path):
    import json
    import xml.etree.ElementTree as ET

    hostile = '"><svg onload=alert(1)><script>alert(2)</script>'
    exp = make_finished_exp()
    rows = [{"kind": "meta", "plugin": "bench-summary"},
            {"kind": "metric", "metric": "gflops", "count": 2, "mean": 20.0, "min": 10,
             "p50": 20.0, "p90": 28.0, "p99": 29.8, "max": 30},
            {"kind": "metric", "metric": hostile, "count": 1, "mean": 1.0, "min": 1,
             "p50": 1.0, "p90": 1.0, "p99": 1.0, "max": 1}]
    bench = _succeed(make_analysis(exp=exp, plugin_name="bench-summary",
                                   result_root=(tmp_path / "store").as_uri()),
                     "".join(json.dumps(r) + "\n" for r in rows).encode())
    make_analysis(exp=exp, plugin_name="trace-summary",
                  result_root=(tmp_path / "store").as_uri())  # pending: not shown
    text = staff_client.get(f"/admin/experiments/experiment/{exp.pk}/change/").content.decode()
    panel = text.split('<div class="falcon-analysis" data-plugin="bench-summary">')[1]
    assert f"/admin/analysis/analysisrecord/{bench.analysis_id}/change/" in panel
    assert 'data-plugin="trace-summary"' not in text
    charts = [ET.fromstring(svg.split("</svg>")[0] + "</svg>")
              for svg in ('<svg xmlns' + part for part in panel.split('<svg xmlns')[1:]
              if 'class="falcon-chart"' in part.split('>')[0])]
    titles = [c.get("aria-label") for c in charts]
    assert titles == ["gflops", hostile]  # drawn as text, never as markup
    marks = [r for r in charts[0].iter("{http://www.w3.org/2000/svg}rect")]
    assert [m.get("data-label") for m in marks] == ["min", "p50", "mean", "p90", "p99", "max"]
    assert "<script>alert(2)" not in text and "<svg onload" not in text
    assert "<td>gflops</td>" in panel  # and the table under the charts
