"""`falcon exp compare` over the wire against the real Django app (live_server), on analyses made
by the real bench-summary plugin: a clone with a slower dtype shows the config key and the
metric that dropped, the gate exits 13 on it and 0 on an unchanged clone, missing and NaN
values, and twenty experiments."""
from __future__ import annotations

import json

import pytest

from accounts.models import User
from analysis import compare as server_compare
from analysis.tests.compare_helpers import (bench_rows, make_bench_exp,
                                            run_bench_summary, write_results)
from cli.exp import compare as exp_compare
from cli.exit_codes import ExitCode

pytestmark = pytest.mark.django_db(transaction=True)

GATE = "bench-summary:results.gflops.mean < -5%"


@pytest.fixture
def root(settings, tmp_path):
    root = (tmp_path / "store").as_uri()
    settings.FALCON_ANALYSIS_ROOT = root
    return root


@pytest.fixture
def user(logged_in):
    """alice, registered by her first call (the server registers a user on first sight)."""
    assert logged_in("exp", "list", "-o", "json").exit_code == 0
    logged_in.transport.requests.clear()
    return User.objects.get(email="alice@example.com")


def _bench(user, tmp_path, root, gflops, **kwargs):
    exp = make_bench_exp(user, **kwargs)
    run_bench_summary(exp, bench_rows(gflops), work=tmp_path, result_root=root)
    return exp


def _clone(logged_in, files, exp_id: int, *assignments: str) -> int:
    """`falcon exp clone ID --set ...`: the real clone, as a user makes one."""
    args = ["exp", "clone", str(exp_id), "-o", "json"]
    for assignment in assignments:
        args += ["--set", assignment]
    result = logged_in(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["id"]


def test_the_cli_and_the_server_agree_on_the_most_experiments():
    assert exp_compare.MAX_EXPERIMENTS == server_compare.MAX_EXPERIMENTS


def test_a_slower_dtype_clone_fails_the_gate_and_an_unchanged_one_passes(logged_in, user, files,
                                                                         tmp_path, root):
    from analysis.tests.factories import finish_exp
    from experiments.models import Experiment

    base = _bench(user, tmp_path, root, [100.0, 102.0, 98.0], name="llama-bench")
    slow_id = _clone(logged_in, files, base.pk, "dtype=float32")
    same_id = _clone(logged_in, files, base.pk)
    slow = finish_exp(Experiment.objects.get(pk=slow_id))
    same = finish_exp(Experiment.objects.get(pk=same_id))
    run_bench_summary(slow, bench_rows([61.0, 60.0, 59.0]), work=tmp_path, result_root=root)
    run_bench_summary(same, bench_rows([99.0, 101.0, 100.0]), work=tmp_path, result_root=root)

    result = logged_in("exp", "compare", str(base.pk), str(slow_id), "--fail-on", GATE)
    assert result.exit_code == ExitCode.GATE_FAILED == 13, result.output
    table = result.stdout
    assert "config.dtype" in table and '"bfloat16"' in table and '"float32"' in table
    assert "results.gflops.mean" in table and "-40 (-40.0%)" in table
    assert "Gate: FAILED" in table
    assert (f"{GATE}: experiment {slow_id} results.gflops.mean 60 against 100 (-40.0%)"
            in " ".join(table.split()))
    assert "the gate failed: 1 failure(s) of 1 condition(s)" in result.stderr

    result = logged_in("exp", "compare", str(base.pk), str(same_id), "--fail-on", GATE,
                       "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["gate"]["failed"] is False
    assert not [d for d in doc["differences"] if d["path"].startswith("config.")]

    # Both clones at once, the slow one's baseline named: the same document as the API's.
    result = logged_in("exp", "compare", str(slow_id), str(base.pk), str(same_id),
                       "--baseline", str(base.pk), "--metric", "*.mean", "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [e["id"] for e in doc["experiments"]] == [base.pk, slow_id, same_id]
    [section] = doc["plugins"]
    assert {m["path"] for m in section["metrics"]} == {
        "results.gflops.mean", "results.latency_ms.mean", "step.mean"}


def test_missing_and_nan_show_as_such_and_fail_the_gate(logged_in, user, tmp_path, root):
    a, b, c = (make_bench_exp(user, name=n) for n in "abc")
    write_results(a, [{"name": "matmul", "gflops": 10.0, "err": 0.1}], result_root=root)
    write_results(b, [{"name": "matmul", "gflops": 10.0, "err": None}], result_root=root)
    result = logged_in("exp", "compare", str(a.pk), str(b.pk), str(c.pk),
                       "--fail-on", "command/mine:matmul.* < -50%")
    assert result.exit_code == ExitCode.GATE_FAILED, result.output
    text = " ".join(result.stdout.split())
    assert "missing" in text and "NaN" in text
    assert f"experiment {b.pk} matmul.err NaN (baseline 0.1)" in text
    assert f"experiment {c.pk} matmul.gflops missing (baseline 10)" in text
    result = logged_in("exp", "compare", str(a.pk), str(b.pk), "-o", "yaml")
    assert result.exit_code == 0 and "state: nan" in result.stdout


def test_twenty_experiments(logged_in, user, tmp_path, root):
    ids = [_bench(user, tmp_path, root, [100.0 - i / 10]).pk for i in range(20)]
    result = logged_in("exp", "compare", *map(str, ids), "--fail-on", GATE, "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["experiments"]) == 20
    result = logged_in("exp", "compare", *map(str, ids), str(ids[-1] + 1))
    assert result.exit_code == ExitCode.USAGE and "give 2 to 20" in result.output


@pytest.mark.parametrize("args, words", [
    (["1"], "give 2 to 20 experiment ids"),
    (["1", "1"], "experiment 1 is given more than once"),
    (["1", "2", "--baseline", "3"], "--baseline 3 is not among"),
    (["1", "2", "--fail-on", "gflops < 5%"], "--fail-on: 'gflops < 5%' is not PLUGIN:METRIC"),
])
def test_bad_arguments_exit_2_before_sending(logged_in, args, words):
    result = logged_in("exp", "compare", *args)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert words in result.output
    assert logged_in.transport.requests == []


def test_an_unknown_id_exits_3_as_exp_get_does(logged_in, user):
    exp = make_bench_exp(user)
    result = logged_in("exp", "compare", str(exp.pk), str(exp.pk + 100))
    assert result.exit_code == ExitCode.NOT_FOUND == logged_in(
        "exp", "get", str(exp.pk + 100)).exit_code
    assert str(exp.pk + 100) in result.output


def test_help_has_examples_and_the_gate_exit_code(logged_in):
    result = logged_in("exp", "compare", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "Examples:" in text and "13 the gate failed" in text
    assert "falcon exp compare 12 15 --fail-on 'bench-summary:results.gflops.mean < -5%'" in text


def test_a_users_odd_results_draw_and_gate_through_the_cli(logged_in, user, root):
    """A user's own JSONL as Python writes it: NaN and -Infinity literals, huge, negative,
    boolean and string values, names with `/`, `.` and other scripts. The table draws each
    metric (nan and missing named, never 0), `--metric` finds the quoted names as typed, and
    the gate fails with exit 13 on the metric that went NaN."""
    import math

    from analysis.outputs import results_url
    from artifacts.store import local_path

    a, b = make_bench_exp(user), make_bench_exp(user)
    rows = {"name": "train/loss", "val.acc": 0.9, "loss": 0.5, "big": 1e308, "neg": -3,
            "ok": True, "text": "1.5"}
    write_results(a, [rows, {"name": "吞吐量", "tok_s": 100}], result_root=root)
    record = write_results(b, [], result_root=root)
    lines = [json.dumps({**rows, "loss": math.nan, "big": -1e308, "neg": -math.inf}),
             json.dumps({"name": "吞吐量", "tok_s": 120}, ensure_ascii=False)]
    local_path(results_url(record)).write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids = [str(a.pk), str(b.pk)]

    shown = logged_in("exp", "compare", *ids, "--metric", "*train/loss*", "--metric", "*吞吐*")
    assert shown.exit_code == 0, shown.output
    assert '["train/loss"].loss' in shown.stdout and '["吞吐量"].tok_s' in shown.stdout
    assert "+20 (+20.0%)" in shown.stdout
    doc = json.loads(logged_in("exp", "compare", *ids, "-o", "json").stdout)
    cells = {m["path"]: [c["state"] for c in m["values"]] for m in doc["plugins"][0]["metrics"]}
    assert cells['["train/loss"].loss'] == ["number", "nan"]
    assert cells['["train/loss"].neg'] == ["number", "nan"]
    assert cells['["train/loss"].big'] == ["number", "number"]
    assert '["train/loss"].ok' not in cells and '["train/loss"].text' not in cells

    gate = logged_in("exp", "compare", *ids, "--fail-on", 'command/mine:*train/loss*.loss > 10%')
    assert gate.exit_code == ExitCode.GATE_FAILED, gate.output
    assert "nan" in gate.stdout.lower()


def test_filters_that_keep_nothing_say_so_rather_than_no_analysis(logged_in, user, tmp_path,
                                                                 root):
    """`--plugin nope` said "No succeeded analysis on these experiments" although both had one."""
    a = _bench(user, tmp_path, root, [1.0])
    b = _bench(user, tmp_path, root, [2.0])
    ids = [str(a.pk), str(b.pk)]
    result = logged_in("exp", "compare", *ids, "--plugin", "bench-sumary")
    assert result.exit_code == 0, result.output
    assert "No succeeded analysis of bench-sumary on these experiments (--plugin)" in " ".join(
        result.stdout.split())
    result = logged_in("exp", "compare", *ids, "--metric", "results.gflop.mean")
    assert "no metric matches --metric results.gflop.mean" in result.stdout


@pytest.mark.parametrize("option", ["--metric", "--plugin", "--fail-on"])
def test_an_argument_that_is_not_utf8_is_a_usage_error(logged_in, user, option):
    """A byte that is not UTF-8 in argv arrives as a lone surrogate ('\\udcff'); it ended in
    "unexpected UnicodeEncodeError" when the request was built."""
    result = logged_in("exp", "compare", "1", "2", option, "bench-summary:x\udcff < 5")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert f"{option} 'bench-summary:x? < 5' is not UTF-8 text" in result.output
    assert logged_in.transport.requests == []
