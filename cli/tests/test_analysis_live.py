"""`falcon analysis` and `falcon plugins` over the wire against the real API server (the Django
app behind `live_server`), which calls a real AnalyzerService (the root `analyzer` fixture: a
small fake controller on a gRPC port) and reads the store itself.

The stub tests (`test_analysis.py`) cover the CLI's every branch; these check that it speaks the
server's actual contract: string analysis ids, the list's JSON, queue positions, a real plugin's
results file, a log read from the store, and the 503 of a controller that is down.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from accounts.models import User
from analysis import analyzer_client
from analysis.models import ANALYSIS_ID_MAX, AnalysisRecord
from analysis.services import analysis_record_update
from analysis.tests.factories import make_analysis, make_finished_exp
from analysis.tests.fake_analyzer import LOG, closed_port
from artifacts.store import local_path
from cli.exit_codes import ExitCode
from core.domain.statuses import AnalysisStatus
from plugins.render import format_value

from .conftest import EMAIL, one_line

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
ID = re.compile(r"an-[0-9a-f]{16}")
UNAVAILABLE = ("error: the analyzer controller is unavailable; records stay readable "
               "(falcon analysis list/get)")
# What a benchmark run might leave in its artifact: one JSON file, three measured points.
BENCH_JSON = {"model": "qwen3-32b", "results": [
    {"concurrency": 8, "latency_ms": 12.5, "tokens_per_s": 950.0},
    {"concurrency": 16, "latency_ms": 20.0, "tokens_per_s": 1480.0},
    {"concurrency": 32, "latency_ms": 41.5, "tokens_per_s": 1702.5},
]}
# The keys scripts (scripts/demo.py) read from `falcon analysis list -o json`.
DEMO_KEYS = {"id", "status", "plugin_name", "result_path"}


@pytest.fixture(autouse=True)
def _fresh_channel():
    """Each test's API server opens its own channel to the analyzer it is given."""
    analyzer_client.close()
    yield
    analyzer_client.close()


@pytest.fixture
def cli(logged_in, analyzer):
    """The CLI logged in as alice to the live server, whose analyzer is the fake one."""
    return logged_in


@pytest.fixture
def alice(cli):
    """alice's user, made by her first authenticated request, as the server makes users."""
    assert cli("analysis", "list").exit_code == 0
    return User.objects.get(email=EMAIL)


@pytest.fixture
def exp(alice):
    """A Succeeded benchmark experiment of alice's, its artifact Succeeded."""
    return make_finished_exp(creator=alice, name="bench", exp_type="benchmark")


def _succeeded(record: AnalysisRecord) -> AnalysisRecord:
    """Move a pending record to running, then succeeded, as the controller would."""
    analysis_record_update(record.analysis_id, {"status": AnalysisStatus.RUNNING})
    analysis_record_update(record.analysis_id, {"status": AnalysisStatus.SUCCEEDED})
    record.refresh_from_db()
    return record


def _store_dir(record: AnalysisRecord) -> Path:
    """The record's output folder in the (file://) store, created."""
    folder = local_path(record.result_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _run_bench_summary(tmp_path: Path, results_file: Path) -> str:
    """Run the real bench-summary plugin over `BENCH_JSON`, writing `results_file`; return what
    it printed (stdout and stderr, as a run's output.log holds them)."""
    inputs = tmp_path / "input"
    inputs.mkdir()
    (inputs / "bench.json").write_text(json.dumps(BENCH_JSON))
    done = subprocess.run(
        [sys.executable, str(ROOT / "plugins" / "bin" / "bench-summary"), "--input", str(inputs),
         "--output", str(results_file)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert done.returncode == 0, done.stdout
    assert results_file.stat().st_size > 0
    return done.stdout


def test_create_list_get_cancel_delete(cli, analyzer, exp):
    result = cli("analysis", "create", "--exp", str(exp.pk), "--plugin", "bench-summary")
    assert result.exit_code == 0, result.output
    match = re.search(rf"\bid\s+({ID.pattern})\b", result.stdout)
    assert match, result.stdout
    analysis_id = match.group(1)
    assert len(analysis_id) <= ANALYSIS_ID_MAX
    record = AnalysisRecord.objects.get(pk=analysis_id)
    assert (record.experiment_id, record.plugin_name, record.creator.email) == \
        (exp.pk, "bench-summary", EMAIL)
    assert [call[0] for call in analyzer.calls] == ["CreateAnalysis"]
    assert re.search(r"queue position\s+1\b", result.stdout)

    # list: the table names it; -o json is a list of analysis objects, as scripts read it.
    result = cli("analysis", "list", "--exp", str(exp.pk))
    assert result.exit_code == 0, result.output
    assert analysis_id in result.stdout and "bench-summary" in result.stdout
    result = cli("analysis", "list", "--exp", str(exp.pk), "-o", "json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert isinstance(listed, list) and len(listed) == 1
    assert DEMO_KEYS <= set(listed[0])
    assert listed[0]["id"] == analysis_id and listed[0]["status"] == "pending"
    assert listed[0]["plugin_name"] == "bench-summary"
    assert listed[0]["result_path"] == record.result_path
    assert record.result_path.endswith(f"/analysis/{exp.pk}/{analysis_id}/")
    result = cli("analysis", "list", "--exp", str(exp.pk), "--status", "running", "-o", "json")
    assert json.loads(result.stdout) == []

    # get: every field, the queue position while pending.
    result = cli("analysis", "get", analysis_id)
    assert result.exit_code == 0, result.output
    assert re.search(rf"id\s+{analysis_id}", result.stdout)
    assert re.search(r"queue position\s+1\b", result.stdout)
    got = json.loads(cli("analysis", "get", analysis_id, "-o", "json").stdout)
    assert got["id"] == analysis_id and got["queue_position"] == 1
    assert got["exp_id"] == exp.pk and got["status"] == "pending"

    # delete needs an analysis that has ended: a conflict, and nothing is deleted.
    result = cli("analysis", "delete", analysis_id, "--yes")
    assert result.exit_code == ExitCode.CONFLICT, result.output
    assert one_line(result.stderr) == (
        f"error: Analysis {analysis_id} is pending; only succeeded, failed, cancelled or "
        f"skipped analyses can be deleted. Cancel it first (`falcon analysis cancel {analysis_id}`)")
    assert AnalysisRecord.objects.filter(pk=analysis_id).exists()

    # cancel, through the controller; again is harmless.
    result = cli("analysis", "cancel", analysis_id)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"analysis {analysis_id} is cancelled\n"
    assert [call[0] for call in analyzer.calls][-1] == "CancelAnalysis"
    assert AnalysisRecord.objects.get(pk=analysis_id).status == AnalysisStatus.CANCELLED
    again = json.loads(cli("analysis", "cancel", analysis_id, "-o", "json").stdout)
    assert again["status"] == "cancelled" and again["queue_position"] is None

    # delete --purge --yes: the record and its output folder go.
    folder = _store_dir(record)
    (folder / "output.log").write_text("cancelled before it started\n")
    result = cli("analysis", "delete", analysis_id, "--purge", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"deleted analysis {analysis_id} with its results and log\n"
    assert not AnalysisRecord.objects.filter(pk=analysis_id).exists()
    assert not (folder / "output.log").exists()
    delete_call = analyzer.calls[-1]
    assert delete_call[0] == "DeleteAnalysis" and delete_call[1].purge_gcs
    assert delete_call[1].analysis_id == analysis_id

    result = cli("analysis", "get", analysis_id)
    assert result.exit_code == ExitCode.NOT_FOUND
    assert one_line(result.stderr) == \
        f"error: no analysis {analysis_id} (see `falcon analysis list`)"


def test_create_json_prints_the_new_analysis(cli, exp):
    result = cli("analysis", "create", "--exp", str(exp.pk), "--plugin", "bench-summary",
                 "--name", "latency", "-o", "json")
    assert result.exit_code == 0, result.output
    created = json.loads(result.stdout)
    assert ID.fullmatch(created["id"])
    assert created["name"] == "latency" and created["analysis_type"] == "online"
    assert AnalysisRecord.objects.get(pk=created["id"]).name == "latency"


def test_results_of_a_real_bench_summary_run(cli, exp, alice, tmp_path):
    record = _succeeded(make_analysis(exp=exp, creator=alice, analysis_type="online",
                                      plugin_name="bench-summary",
                                      result_root=settings.FALCON_ANALYSIS_ROOT))
    results_file = _store_dir(record) / "bench-summary.jsonl"
    _run_bench_summary(tmp_path, results_file)
    stored = results_file.read_text().splitlines()
    metrics = [json.loads(line) for line in stored if json.loads(line)["kind"] == "metric"]
    assert {m["metric"] for m in metrics} == {"results.concurrency", "results.latency_ms",
                                              "results.tokens_per_s"}

    result = cli("analysis", "results", record.analysis_id)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # the bench-summary tables, not the fallback
    assert "metrics" in result.stdout
    assert re.search(r"metric\s+count\s+mean\s+min\s+p50\s+p90\s+p99\s+max", result.stdout)
    for metric in metrics:
        row = rf"{re.escape(metric['metric'])}\s+{metric['count']}\s+" + r"\s+".join(
            re.escape(str(format_value(key, metric[key])))
            for key in ("mean", "min", "p50", "p90", "p99", "max"))
        assert re.search(row, result.stdout), (row, result.stdout)
    assert "qwen3" not in result.stdout and '"kind"' not in result.stdout

    result = cli("analysis", "results", record.analysis_id, "-o", "json")
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == \
        [json.loads(line) for line in stored]
    assert result.stdout == "".join(line + "\n" for line in stored)  # compact, in key order

    # -o yaml, as every read command, from the real process into a pipe.
    import os

    import yaml

    done = subprocess.run([sys.executable, "-m", "cli", "analysis", "results",
                           record.analysis_id, "-o", "yaml"], cwd=ROOT, timeout=120,
                          capture_output=True, text=True,
                          env={**os.environ, "FALCON_SERVER": cli.server,
                               "FALCON_CONFIG_DIR": str(cli.config_dir)})
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout) == [json.loads(line) for line in stored]


def test_results_not_written_yet_is_not_found(cli, exp, alice):
    record = make_analysis(exp=exp, creator=alice, plugin_name="bench-summary",
                           result_root=settings.FALCON_ANALYSIS_ROOT)
    result = cli("analysis", "results", record.analysis_id)
    assert result.exit_code == ExitCode.NOT_FOUND
    assert one_line(result.stderr) == (
        f"error: analysis {record.analysis_id} has no results yet: {record.result_path}"
        "bench-summary.jsonl does not exist; it is pending")


def test_logs_live_from_the_controller_and_from_the_store_when_it_is_down(cli, exp, alice,
                                                                         tmp_path):
    record = _succeeded(make_analysis(exp=exp, creator=alice, plugin_name="bench-summary",
                                      result_root=settings.FALCON_ANALYSIS_ROOT))
    folder = _store_dir(record)
    printed = _run_bench_summary(tmp_path, folder / "bench-summary.jsonl")
    log = f"+ bench-summary --input \"$FALCON_INPUT_DIR\"\n{printed}caf\u00e9 done\n"
    (folder / "output.log").write_text(log, encoding="utf-8")

    # The controller answers the live log (the fake's fixed one).
    result = cli("analysis", "logs", record.analysis_id)
    assert result.exit_code == 0, result.output
    assert result.stdout == LOG.decode()
    assert one_line(result.stderr) == "note: live"

    # The controller is down: the API server reads output.log from the store itself.
    settings.FALCON_ANALYZER_TARGET = closed_port()
    result = cli("analysis", "logs", record.analysis_id)
    assert result.exit_code == 0, result.output
    assert result.stdout == log
    assert one_line(result.stderr) == \
        "note: read from the store: the analyzer controller is unavailable"
    result = cli("analysis", "logs", record.analysis_id, "--follow")  # complete: it has ended
    assert result.exit_code == 0 and result.stdout == log


def test_plugins_list_and_get(cli):
    result = cli("plugins", "list")
    assert result.exit_code == 0, result.output
    assert re.search(r"summary\s+profiling\s+10m00s", result.stdout)
    assert "trace" in result.stdout
    listed = json.loads(cli("plugins", "list", "-o", "json").stdout)
    assert [p["name"] for p in listed] == ["summary", "trace"]
    assert listed[1]["artifact_types"] == ["profiling", "benchmark"]

    got = json.loads(cli("plugins", "get", "summary", "-o", "json").stdout)
    assert got["resources"]["cpu_request"] == "500m" and got["timeout_seconds"] == 600
    result = cli("plugins", "get", "nope")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert one_line(result.stderr) == "error: no plugin 'nope' (see `falcon plugins list`)"


def test_a_controller_that_is_down_is_503_and_records_stay_readable(cli, exp, alice):
    record = make_analysis(exp=exp, creator=alice, plugin_name="bench-summary",
                           result_root=settings.FALCON_ANALYSIS_ROOT)
    settings.FALCON_ANALYZER_TARGET = closed_port()

    for args in (["analysis", "create", "--exp", str(exp.pk), "--plugin", "bench-summary"],
                 ["analysis", "delete", record.analysis_id, "--purge", "--yes"],
                 ["plugins", "list"], ["plugins", "get", "summary"]):
        if args[1] == "delete":
            _succeeded(record)
        result = cli(*args)
        assert result.exit_code == ExitCode.UNAVAILABLE == 9, (args, result.output)
        assert one_line(result.stderr) == UNAVAILABLE, args
    assert list(AnalysisRecord.objects.values_list("pk", flat=True)) == [record.analysis_id]

    listed = json.loads(cli("analysis", "list", "-o", "json").stdout)
    assert [a["id"] for a in listed] == [record.analysis_id]
    result = cli("analysis", "get", record.analysis_id)
    assert result.exit_code == 0, result.output
    assert record.analysis_id in result.stdout
