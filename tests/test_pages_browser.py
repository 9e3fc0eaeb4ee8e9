"""The experiment page and the compare page in a real browser (Debian's Chromium, Playwright),
against pytest-django's `live_server`, as tests/test_admin_browser.py does.

An operator changes an experiment's labels, reads its replicas' last log lines, downloads an
artifact file through the page's link, and sees its analysis' chart; then selects experiments
in the list, runs the Compare action, and reads the metrics table and the charts (one mark per
experiment). Hostile text in a log line, a config and a result never runs as script. With
`FALCON_SCREENSHOTS=DIR` each page is saved there as a PNG.
"""
from __future__ import annotations

import json
import os
import re
import uuid

import pytest

from accounts.models import User
from analysis.tests.compare_helpers import bench_rows, make_bench_exp, run_bench_summary
from artifacts.store import replica_log_url, store_for
from experiments.models import Experiment
from tests.test_admin_browser import page  # noqa: F401  (the Chromium page fixture)

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = '"><svg onload=window.__pwned=1><script>window.__pwned=2</script>'


def _put(url: str, data: bytes, tmp_path) -> None:
    src = tmp_path / f"src-{uuid.uuid4().hex}"
    src.write_bytes(data)
    store_for(url).put_file(src, url)


def _shot(page, name: str) -> None:  # noqa: F811  (a page, not the fixture)
    folder = os.environ.get("FALCON_SCREENSHOTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        page.screenshot(path=os.path.join(folder, name), full_page=True)


def _login(page, live_server) -> None:  # noqa: F811
    User.objects.create_superuser("ops@example.com", password="pw-for-browser-tests")
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "ops@example.com")
    page.fill("#id_password", "pw-for-browser-tests")
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")


def _bench(user, tmp_path, name, gflops, config="model: llama-8b\ndtype: bfloat16\n"):
    exp = make_bench_exp(user, name=name, config=config)
    run_bench_summary(exp, bench_rows(gflops, [10.0 + g / 100 for g in gflops]),
                      work=tmp_path / f"work-{exp.pk}", result_root=(tmp_path / "store").as_uri())
    return exp


def test_experiment_page_labels_logs_download_and_chart(page, live_server, user,  # noqa: F811
                                                        tmp_path):
    exp = _bench(user, tmp_path, "browser-bench", [100.0, 120.0])
    log = "".join(f"step {i} loss {1 / (i + 1):.3f}\n" for i in range(60)) + HOSTILE + "\n"
    _put(replica_log_url(exp.artifact_path, "main", 0), log.encode(), tmp_path)
    _put(f"{exp.artifact_path}/main/result.json", json.dumps({"gflops": 110}).encode(),
         tmp_path)
    _login(page, live_server)
    page.goto(f"{live_server.url}/admin/experiments/experiment/{exp.pk}/change/")

    # Labels: none yet; change them on their page; back on the experiment's page.
    assert page.inner_text("#falcon-labels") == "none"
    page.click("#falcon-labels-edit")
    page.fill("#id_changes", "baseline=true team=perf")
    page.click("#falcon-labels-submit")
    page.wait_for_selector(".messagelist")
    assert page.locator("#falcon-labels .falcon-label").all_inner_texts() == [
        "baseline=true", "team=perf"]
    assert Experiment.objects.get(pk=exp.pk).labels == {"baseline": "true", "team": "perf"}

    # The last lines of the replica's log, the hostile one as text.
    lines = page.inner_text('[data-role="main"][data-replica="0"] pre.falcon-log').splitlines()
    assert lines[0] == "step 41 loss 0.024" and lines[-1] == HOSTILE
    assert page.evaluate("window.__pwned") is None

    # The artifact file downloads through the page's link.
    with page.expect_download() as download:
        page.evaluate("(a) => { a.setAttribute('download', ''); a.click(); }",
                      page.locator("a.falcon-file", has_text="main/result.json")
                      .element_handle())
    assert json.loads(open(download.value.path(), encoding="utf-8").read()) == {"gflops": 110}

    # The analysis' charts: bench-summary draws each metric's statistics.
    chart = page.locator('.falcon-analysis[data-plugin="bench-summary"] svg.falcon-chart').first
    assert chart.get_attribute("aria-label") == "results.gflops"
    assert chart.locator("rect.falcon-mark").count() == 6
    assert chart.is_visible()
    _shot(page, "exp-page.png")

    # The list filters by the new label.
    page.goto(f"{live_server.url}/admin/experiments/experiment/")
    page.locator("#changelist-filter").get_by_role("link", name="baseline=true").click()
    page.wait_for_url(re.compile(r"label=baseline"))
    assert page.locator("#result_list tbody tr").count() == 1


def test_select_compare_read_the_table_and_one_mark_per_experiment(page, live_server,  # noqa: F811
                                                                    user, tmp_path):
    base = _bench(user, tmp_path, "cmp-base", [100.0, 100.0])
    slow = _bench(user, tmp_path, "cmp-fp32", [50.0, 50.0],
                  config="model: llama-8b\ndtype: float32\n")
    same = _bench(user, tmp_path, "cmp-same", [102.0, 102.0])
    hostile = _bench(user, tmp_path, "cmp-hostile", [99.0, 99.0],
                     config=f"model: llama-8b\ndtype: bfloat16\nnote: '{HOSTILE}'\n")
    _login(page, live_server)

    page.goto(f"{live_server.url}/admin/experiments/experiment/")
    for exp in (base, slow, same, hostile):
        page.locator(f'input.action-select[value="{exp.pk}"]').check()
    page.select_option("select[name=action]", "compare_experiments")
    page.click("button[name=index]")
    page.wait_for_selector("#falcon-compare-metrics")
    # The oldest selected is the baseline; choosing another one on the page reorders it.
    assert page.locator("select[name=baseline]").input_value() == str(base.pk)
    page.select_option("select[name=baseline]", str(same.pk))
    page.click("#falcon-compare-params input[type=submit]")
    page.wait_for_url(re.compile(rf"baseline={same.pk}"))
    assert page.inner_text("#falcon-compare-exps tbody tr:first-child").startswith(
        f"#{same.pk} cmp-same")
    page.select_option("select[name=baseline]", str(base.pk))
    page.click("#falcon-compare-params input[type=submit]")
    page.wait_for_url(re.compile(rf"baseline={base.pk}"))
    assert page.locator("#falcon-compare-exps tbody tr").count() == 4

    diff = page.inner_text("#falcon-compare-diff")
    assert "config.dtype" in diff and "float32" in diff and HOSTILE in diff
    row = page.locator('#falcon-compare-metrics tr[data-key="bench-summary::results.gflops.mean"]')
    cells = row.locator("td.falcon-num")
    values = [cells.nth(i).inner_text().splitlines()[0] for i in range(cells.count())]
    headers = page.locator("#falcon-compare-metrics thead th").all_inner_texts()[4:]
    order = [int(h.strip().lstrip("#")) for h in headers]
    expected = {base.pk: "100 GFLOP/s", slow.pk: "50 GFLOP/s", same.pk: "102 GFLOP/s",
                hostile.pk: "99 GFLOP/s"}
    assert values == [expected[pk] for pk in order]
    assert "-50.0 %" in cells.nth(order.index(slow.pk)).inner_text()
    assert "falcon-changed" in cells.nth(order.index(slow.pk)).get_attribute("class")
    assert "falcon-changed" not in cells.nth(order.index(same.pk)).get_attribute("class")

    # Chart the mean and the p50 latency, one chart each, one mark per experiment.
    checked = page.locator("#falcon-compare-metrics input[name=chart]:checked")
    assert checked.count() >= 1  # by default the metrics that changed beyond the threshold
    while checked.count():
        checked.first.uncheck()
    row.locator("input[name=chart]").check()
    page.locator('#falcon-compare-metrics tr[data-key="bench-summary::results.latency_ms.p50"] '
                 "input[name=chart]").check()
    page.click("#falcon-chart-submit")
    page.wait_for_url(re.compile(r"chart="))
    charts = page.locator("#falcon-compare-charts svg.falcon-chart")
    assert charts.count() == 2
    for i in range(2):
        marks = charts.nth(i).locator("rect.falcon-mark")
        assert marks.count() == 4
        labels = [marks.nth(j).get_attribute("data-label") for j in range(4)]
        assert [int(label.split()[0].lstrip("#")) for label in labels] == order
    gflops = charts.nth(0).locator("rect.falcon-mark")
    assert [float(gflops.nth(j).get_attribute("data-value")) for j in range(4)] == [
        float(expected[pk].split()[0]) for pk in order]
    assert page.evaluate("window.__pwned") is None
    _shot(page, "compare.png")
