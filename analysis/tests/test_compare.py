"""CompareExps over HTTP (`GET /api/v1/exps/compare`) and as a service, on analyses made by the
real bench-summary plugin: the config key that changed, the metric that dropped, the gate, NaN,
missing metrics, differing metric sets and twenty experiments."""
from __future__ import annotations

import pytest

from accounts.models import User
from analysis.compare import MAX_EXPERIMENTS, exp_compare
from analysis.tests.compare_helpers import (BENCH_CONFIG, bench_rows, make_bench_exp,
                                            run_bench_summary, write_results)

pytestmark = pytest.mark.django_db(transaction=True)

SLOWER = BENCH_CONFIG.replace("bfloat16", "float32")
URL = "/api/v1/exps/compare"


@pytest.fixture
def root(settings, tmp_path):
    root = (tmp_path / "store").as_uri()
    settings.FALCON_ANALYSIS_ROOT = root
    return root


@pytest.fixture
def alice(auth_api):
    assert auth_api.get("/api/v1/exps").status_code == 200  # registers the user
    return auth_api, User.objects.get(email="alice@example.com")


def _bench(user, tmp_path, root, gflops, *, config=BENCH_CONFIG, name="bench", **kwargs):
    exp = make_bench_exp(user, name=name, config=config, **kwargs)
    run_bench_summary(exp, bench_rows(gflops), work=tmp_path, result_root=root)
    return exp


def _metric(doc, plugin, path):
    [section] = [s for s in doc["plugins"] if s["plugin"] == plugin]
    [metric] = [m for m in section["metrics"] if m["path"] == path]
    return metric


def test_a_slower_dtype_shows_the_config_key_and_the_metric_that_dropped(alice, tmp_path, root):
    client, user = alice
    base = _bench(user, tmp_path, root, [100.0, 102.0, 98.0], name="base")
    slow = _bench(user, tmp_path, root, [50.0, 51.0, 49.0], config=SLOWER, name="base",
                  cloned_from=base.pk)
    resp = client.get(URL, {"ids": f"{base.pk},{slow.pk}",
                            "fail_on": "bench-summary:results.gflops.mean < -5%"})
    assert resp.status_code == 200, resp.json()
    doc = resp.json()
    assert doc["baseline"] == base.pk
    assert [e["id"] for e in doc["experiments"]] == [base.pk, slow.pk]
    assert doc["experiments"][0]["jobs"] == [{"role": "main", "status": "Succeeded",
                                              "duration_seconds": pytest.approx(0, abs=5)}]
    dtype = [d for d in doc["differences"] if d["path"] == "config.dtype"]
    assert dtype and dtype[0]["values"] == ["bfloat16", "float32"]
    # The duration differs by the milliseconds each took to finish here.
    assert [d["path"] for d in doc["differences"] if d["path"] != "duration_seconds"] == [
        "cloned_from", "config.dtype"]
    mean = _metric(doc, "bench-summary", "results.gflops.mean")
    assert mean["unit"] == "GFLOP/s" and [c["state"] for c in mean["values"]] == ["number", "number"]
    assert mean["values"][0] == {"state": "number", "value": 100.0, "change": 0.0,
                                 "change_percent": 0.0}
    assert mean["values"][1] == {"state": "number", "value": 50.0, "change": -50.0,
                                 "change_percent": -50.0}
    assert _metric(doc, "bench-summary", "results.latency_ms.p50")["unit"] == "ms"
    assert _metric(doc, "bench-summary", "results.gflops.count")["unit"] == "count"
    [section] = doc["plugins"]
    assert [a["state"] for a in section["analyses"]] == ["used", "used"]
    gate = doc["gate"]
    assert gate["failed"] is True
    [condition] = gate["conditions"]
    assert condition["matched"] == 1 and condition["relative"] is True
    assert condition["failures"] == [{
        "experiment": slow.pk, "path": "results.gflops.mean", "baseline": 100.0, "value": 50.0,
        "change": -50.0, "change_percent": -50.0, "why": "condition"}]


def test_an_unchanged_clone_passes_the_gate(alice, tmp_path, root):
    client, user = alice
    base = _bench(user, tmp_path, root, [100.0, 102.0, 98.0])
    same = _bench(user, tmp_path, root, [99.0, 101.0, 100.0], cloned_from=base.pk)
    doc = client.get(URL, {"ids": [base.pk, same.pk], "fail_on": [
        "bench-summary:results.gflops.mean < -5%", "bench-summary:results.*.p99 > 10"]}).json()
    assert doc["gate"]["failed"] is False
    assert [c["matched"] for c in doc["gate"]["conditions"]] == [1, 2]
    assert [d["path"] for d in doc["differences"] if d["path"] != "duration_seconds"] == [
        "cloned_from"]


def test_the_baseline_goes_first_and_the_newest_succeeded_analysis_is_used(alice, tmp_path,
                                                                           root):
    client, user = alice
    a = _bench(user, tmp_path, root, [100.0])
    b = _bench(user, tmp_path, root, [80.0])
    newer = run_bench_summary(b, bench_rows([120.0]), work=tmp_path, result_root=root)
    doc = client.get(URL, {"ids": [a.pk, b.pk], "baseline": b.pk}).json()
    assert doc["baseline"] == b.pk and [e["id"] for e in doc["experiments"]] == [b.pk, a.pk]
    [section] = doc["plugins"]
    assert section["analyses"][0]["analysis_id"] == newer.analysis_id
    mean = _metric(doc, "bench-summary", "results.gflops.mean")
    assert [c["value"] for c in mean["values"]] == [120.0, 100.0]
    assert mean["values"][1]["change_percent"] == pytest.approx(-100 / 6)


def test_nan_missing_and_differing_metric_sets_are_not_zero(alice, tmp_path, root):
    client, user = alice
    a, b, c = (make_bench_exp(user, name=n) for n in "abc")
    write_results(a, [{"kind": "meta"}, {"name": "matmul", "gflops": 10.0, "err": None,
                                         "zero": 0, "only_a": 1, "ok": True, "tag": "x"}],
                  result_root=root)
    write_results(b, [{"name": "matmul", "gflops": 0.0, "err": 0.5, "zero": 3, "only_b": 2}],
                  result_root=root)
    doc = client.get(URL, {"ids": [a.pk, b.pk, c.pk],
                           "fail_on": ["command/mine:matmul.gflops < -5%",
                                       "command/mine:matmul.only_a > 100"]}).json()
    [section] = doc["plugins"]
    assert section["plugin"] == "command/mine"
    assert [x["state"] for x in section["analyses"]] == ["used", "used", "missing"]
    assert section["analyses"][2]["analysis_id"] is None
    paths = [m["path"] for m in section["metrics"]]
    assert paths == ["matmul.gflops", "matmul.err", "matmul.zero", "matmul.only_a",
                     "matmul.only_b"]  # booleans and strings are not metrics
    cells = {m["path"]: m["values"] for m in section["metrics"]}
    missing = {"state": "missing", "value": None, "change": None, "change_percent": None}
    assert cells["matmul.gflops"][1] == {"state": "number", "value": 0.0, "change": -10.0,
                                         "change_percent": -100.0}
    assert cells["matmul.gflops"][2] == missing
    # null in a result is a non-finite number: NaN, not zero, and no change against it.
    assert cells["matmul.err"][0]["state"] == "nan"
    assert cells["matmul.err"][1] == {"state": "number", "value": 0.5, "change": None,
                                      "change_percent": None}
    # Against a baseline of 0 the relative change is undefined (null); the absolute one is 3.
    assert cells["matmul.zero"][1] == {"state": "number", "value": 3.0, "change": 3.0,
                                       "change_percent": None}
    assert cells["matmul.only_a"][1] == missing
    assert cells["matmul.only_b"][0] == missing and cells["matmul.only_b"][1]["value"] == 2.0
    gate = doc["gate"]
    assert gate["failed"] is True
    first, second = gate["conditions"]
    assert [(f["experiment"], f["why"]) for f in first["failures"]] == [
        (b.pk, "condition"), (c.pk, "missing")]
    # A metric the run lost fails the gate even when the condition could never hold.
    assert [(f["experiment"], f["why"]) for f in second["failures"]] == [
        (b.pk, "missing"), (c.pk, "missing")]


def test_a_condition_that_matches_no_metric_fails_the_gate(alice, tmp_path, root):
    client, user = alice
    a = _bench(user, tmp_path, root, [1.0])
    b = _bench(user, tmp_path, root, [1.0])
    doc = client.get(URL, {"ids": [a.pk, b.pk],
                           "fail_on": "bench-summary:results.gflop.mean < -5%"}).json()
    assert doc["gate"]["failed"] is True
    assert doc["gate"]["conditions"][0]["matched"] == 0


def test_plugin_and_metric_filters(alice, tmp_path, root):
    client, user = alice
    a = _bench(user, tmp_path, root, [1.0])
    b = _bench(user, tmp_path, root, [2.0])
    write_results(a, [{"name": "m", "x": 1}], result_root=root)
    doc = client.get(URL, {"ids": [a.pk, b.pk]}).json()
    assert [s["plugin"] for s in doc["plugins"]] == ["bench-summary", "command/mine"]
    doc = client.get(URL, {"ids": [a.pk, b.pk], "plugin": "bench-summary",
                           "metric": ["*.mean", "*gflops.p9?"],
                           "fail_on": "command/mine:m.x > 100"}).json()
    [section] = doc["plugins"]
    assert [m["path"] for m in section["metrics"]] == [
        "results.gflops.mean", "results.gflops.p90", "results.gflops.p99",
        "results.latency_ms.mean", "step.mean"]
    assert doc["filters"] == {"plugin": ["bench-summary"], "metric": ["*.mean", "*gflops.p9?"]}
    # The gate reads its plugin even when the table leaves it out.
    assert doc["gate"]["conditions"][0]["matched"] == 1


def test_twenty_experiments_and_not_twenty_one(alice, tmp_path, root):
    client, user = alice
    exps = [_bench(user, tmp_path, root, [100.0 + i]) for i in range(MAX_EXPERIMENTS)]
    ids = [e.pk for e in exps]
    doc = client.get(URL, {"ids": ",".join(map(str, ids)),
                           "fail_on": "bench-summary:results.gflops.mean < -1%"}).json()
    assert [e["id"] for e in doc["experiments"]] == ids
    mean = _metric(doc, "bench-summary", "results.gflops.mean")
    assert [c["value"] for c in mean["values"]] == [100.0 + i for i in range(20)]
    assert doc["gate"]["failed"] is False
    extra = make_bench_exp(user)
    resp = client.get(URL, {"ids": ids + [extra.pk]})
    assert resp.status_code == 400
    assert resp.json()["ids"] == ["give 2 to 20 experiment ids to compare; got 21."]


@pytest.mark.parametrize("params, field", [
    ({"ids": "1"}, "ids"),
    ({"ids": "1,1"}, "ids"),
    ({"ids": "1,x"}, "ids"),
    ({}, "ids"),
    ({"ids": "1,2", "baseline": "3"}, "baseline"),
    ({"ids": "1,2", "baseline": "0"}, "baseline"),
    ({"ids": "1,2", "fail_on": "gflops < 5"}, "fail_on"),
    ({"ids": "1,2", "fail_on": "p:x < fast"}, "fail_on"),
    ({"ids": "1,2", "metric": " "}, "metric"),
])
def test_bad_parameters_name_the_field(alice, params, field):
    client, _ = alice
    resp = client.get(URL, params)
    assert resp.status_code == 400, resp.json()
    assert set(resp.json()) == {field, "code"} and resp.json()["code"] == "invalid"


def test_a_bad_condition_is_quoted_once(alice):
    client, _ = alice
    resp = client.get(URL, {"ids": "1,2", "fail_on": ["p:x == 5%", "p:x < 1" + "0" * 500]})
    first, second = resp.json()["fail_on"]
    assert first.startswith("'p:x == 5%' is not PLUGIN:METRIC OP THRESHOLD")
    assert first.count("p:x == 5%") == 1
    assert second.endswith("is 507 characters; a condition is at most 500.")


def test_a_repeated_id_among_others_is_refused_not_dropped(alice):
    """`ids=1,2,1` was quietly compared as `1,2` (and `1,1` said "got 1")."""
    client, user = alice
    a, b = make_bench_exp(user), make_bench_exp(user)
    for ids in (f"{a.pk},{b.pk},{a.pk}", f"{a.pk},{a.pk}", [a.pk, b.pk, b.pk]):
        resp = client.get(URL, {"ids": ids})
        assert resp.status_code == 400, resp.json()
        assert resp.json()["ids"] == ["lists an experiment twice; give each id once."]


def test_reading_rights_are_those_of_reading_the_experiments(alice, tmp_path, root):
    from rest_framework.test import APIClient

    client, user = alice
    a = _bench(user, tmp_path, root, [1.0])
    missing = a.pk + 1000
    compare = client.get(URL, {"ids": [a.pk, missing]})
    read = client.get(f"/api/v1/exps/{missing}")
    assert compare.status_code == read.status_code == 404
    assert compare.json()["code"] == read.json()["code"]
    assert str(missing) in compare.json()["detail"]
    # Without a token: the answer of reading an experiment without one.
    anonymous = APIClient()
    assert anonymous.get(URL, {"ids": [a.pk, a.pk + 1]}).status_code == 401
    assert anonymous.get(f"/api/v1/exps/{a.pk}").status_code == 401


def test_the_service_refuses_a_baseline_outside_the_ids(alice, tmp_path, root):
    from core.errors import ValidationFailed

    _, user = alice
    a, b = make_bench_exp(user), make_bench_exp(user)
    with pytest.raises(ValidationFailed) as info:
        exp_compare(exp_ids=[a.pk, b.pk], baseline=b.pk + 5)
    assert "is not among the ids compared" in info.value.errors["baseline"][0]


def test_a_service_token_reads_a_compare_as_it_reads_experiments(alice, tmp_path, root):
    """Whoever may read the experiments may compare them: the view has the read views'
    authentication and permissions, and no rule of its own."""
    from analysis.api.compare import ExpCompareView
    from experiments.api.views import ExpDetailView

    assert [type(p) for p in ExpCompareView().get_permissions()] == [
        type(p) for p in ExpDetailView().get_permissions()]


def test_the_schema_states_the_limits(api):
    schema = api.get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/v1/exps/compare"]["get"]
    params = {p["name"]: p for p in operation["parameters"]}
    assert params["ids"]["schema"]["minItems"] == 2 and params["ids"]["schema"]["maxItems"] == 20
    assert params["ids"]["required"] is True
    assert set(params) == {"ids", "baseline", "plugin", "metric", "fail_on"}


def test_lines_that_are_not_json_objects_are_skipped_not_fatal(alice, tmp_path, root):
    from analysis.outputs import parse_results, results_url
    from artifacts.store import local_path

    client, user = alice
    a, b = make_bench_exp(user), make_bench_exp(user)
    write_results(a, [{"name": "m", "x": 1}], result_root=root)
    record = write_results(b, [{"name": "m", "x": 2}], result_root=root)
    path = local_path(results_url(record))
    path.write_bytes(path.read_bytes() + b'{"name": "m", "y": }\n[1]\n\xff\n{"name": "n", "x": 3}\n')
    doc = client.get(URL, {"ids": [a.pk, b.pk]}).json()
    cells = {m["path"]: [c["value"] for c in m["values"]] for m in doc["plugins"][0]["metrics"]}
    assert cells == {"m.x": [1.0, 2.0], "n.x": [None, 3.0]}
    records, unparsable, _ = parse_results(path.read_bytes(), strict=False)
    assert [u["line"] for u in unparsable] == [2, 3, 4] and len(records) == 2
    # The skipped lines are said in the analysis' note, not hidden.
    note = doc["plugins"][0]["analyses"][1]["note"]
    assert note.startswith("3 line(s) of its results file are not JSON objects and were "
                           "skipped (line 2: not JSON")
    assert doc["plugins"][0]["analyses"][1]["state"] == "used"


def test_a_users_python_written_nan_and_infinity_are_nan_not_a_lost_record(alice, root):
    """Python's json.dumps writes NaN, Infinity and -Infinity (MLflow #15535, #3406: one NaN
    metric broke the run's page); orjson refuses them, so such a line was dropped whole and
    its finite metrics went missing. Each is now a `nan` cell and the rest are read."""
    import json
    import math

    from analysis.outputs import results_url
    from artifacts.store import local_path

    client, user = alice
    a, b = make_bench_exp(user), make_bench_exp(user)
    write_results(a, [{"name": "eval", "loss": 0.5, "acc": 0.9, "big": 1.0}], result_root=root)
    record = write_results(b, [], result_root=root)
    line = json.dumps({"name": "eval", "loss": math.nan, "acc": 0.8, "big": -math.inf})
    assert "NaN" in line and "-Infinity" in line
    local_path(results_url(record)).write_text(line + '\n{"name": "huge", "v": 1e400}\n')
    doc = client.get(URL, {"ids": [a.pk, b.pk], "fail_on": "command/mine:eval.acc < -50%"}).json()
    [section] = doc["plugins"]
    cells = {m["path"]: [c["state"] for c in m["values"]] for m in section["metrics"]}
    assert cells == {"eval.loss": ["number", "nan"], "eval.acc": ["number", "number"],
                     "eval.big": ["number", "nan"], "huge.v": ["missing", "nan"]}
    acc = [m for m in section["metrics"] if m["path"] == "eval.acc"][0]["values"][1]
    assert acc["change"] == pytest.approx(-0.1) and acc["change_percent"] == pytest.approx(-11.11, abs=0.01)
    assert section["analyses"][1]["note"] == ""
    assert doc["gate"]["failed"] is False


def test_an_analysis_whose_results_are_gone_is_unreadable_and_its_metrics_missing(alice, tmp_path,
                                                                                   root):
    from analysis.outputs import results_url
    from artifacts.store import local_path

    client, user = alice
    a, b = make_bench_exp(user), make_bench_exp(user)
    write_results(a, [{"name": "m", "x": 1}], result_root=root)
    gone = write_results(b, [{"name": "m", "x": 2}], result_root=root)
    local_path(results_url(gone)).unlink()
    doc = client.get(URL, {"ids": [a.pk, b.pk], "fail_on": "command/mine:m.x < -5%"}).json()
    [section] = doc["plugins"]
    assert section["analyses"][1]["state"] == "unreadable"
    assert section["analyses"][1]["analysis_id"] == gone.analysis_id
    assert "has no results" in section["analyses"][1]["note"]
    assert section["metrics"][0]["values"][1]["state"] == "missing"
    assert doc["gate"]["conditions"][0]["failures"][0]["why"] == "missing"


@pytest.mark.parametrize("line, value", [
    (b'{"a": NaN, "b": 1}', {"a": None, "b": 1}),
    (b'{"a": -Infinity}', {"a": None}),
    (b'{"a": 1e400}', {"a": float("inf")}),
    (b'{"a": "\\ud800", "b": NaN}', None),  # a lone surrogate stays refused
    (b'[NaN]', None),
    (b'{"a": NaN', None),
])
def test_the_fast_reader_reads_non_finite_literals_and_nothing_else_new(line, value):
    from analysis.outputs import parse_line_fast

    assert parse_line_fast(line)[0] == value


def test_a_plugin_record_whose_kind_is_not_a_string_is_skipped_not_a_500(alice, tmp_path, root):
    """A record `{"kind": [...]}` in a catalog plugin's results made the rule lookup raise
    TypeError (unhashable list): the compare answered 500. Found by
    plugins/tests/test_gate_properties.py."""
    from analysis.outputs import results_url
    from artifacts.store import local_path

    client, user = alice
    a = _bench(user, tmp_path, root, [100.0])
    b = _bench(user, tmp_path, root, [90.0])
    from analysis.models import AnalysisRecord

    record = AnalysisRecord.objects.get(experiment_id=b.pk)
    path = local_path(results_url(record))
    path.write_bytes(path.read_bytes() + b'{"kind": ["metric"], "metric": "x", "mean": 1}\n'
                     b'{"kind": {"a": 1}, "mean": 2}\n')
    resp = client.get(URL, {"ids": [a.pk, b.pk], "metric": "results.gflops.mean"})
    assert resp.status_code == 200, resp.content[:300]
    [metric] = resp.json()["plugins"][0]["metrics"]
    assert [c["value"] for c in metric["values"]] == [100.0, 90.0]


def test_generated_filters_and_conditions_never_answer_5xx(alice, tmp_path, root):
    """Any `metric`, `plugin` and `fail_on` text: 200, or 400 naming that parameter."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    client, user = alice
    ids = [_bench(user, tmp_path, root, [1.0]).pk, _bench(user, tmp_path, root, [0.0]).pk]
    text = st.one_of(st.text(max_size=40), st.sampled_from(
        ["bench-summary:*", "bench-summary:results.gflops.mean < -5%", "*.(mean|p9?)",
         "bench-summary:[a-z]+ >= 1e99", "bench-summary:x < 1e999", "\x00", "ü:ü < ٥%"]))

    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(st.sampled_from(["metric", "plugin", "fail_on"]), st.lists(text, min_size=1,
                                                                      max_size=3))
    def check(name, values):
        resp = client.get(URL, {"ids": ids, name: values})
        assert resp.status_code in (200, 400), resp.content[:300]
        if resp.status_code == 400:
            assert set(resp.json()) == {name, "code"}

    check()


def test_metric_names_with_slashes_dots_and_other_scripts_are_readable_and_matched(alice, root):
    """W&B #8445 (a glob over keys with `/`), MLflow unicode keys: a name with `/`, `.` or
    letters outside ASCII is one quoted key, written as typed (it was `["\\u541e..."]`, which no
    pattern typed by a user matched), and a pattern and a condition find it."""
    client, user = alice
    a, b = make_bench_exp(user), make_bench_exp(user)
    write_results(a, [{"name": "train/loss", "val.acc": 0.5}, {"name": "吞吐量", "tok_s": 100}],
                  result_root=root)
    write_results(b, [{"name": "train/loss", "val.acc": 0.4}, {"name": "吞吐量", "tok_s": 80}],
                  result_root=root)
    doc = client.get(URL, {"ids": [a.pk, b.pk], "metric": ["*train/loss*", "*吞吐*"],
                           "fail_on": "command/mine:[\"吞吐量\"].tok_s < -10%"}).json()
    paths = [m["path"] for m in doc["plugins"][0]["metrics"]]
    assert paths == ['["train/loss"]["val.acc"]', '["吞吐量"].tok_s']
    [condition] = doc["gate"]["conditions"]
    assert condition["matched"] == 1 and condition["failures"][0]["change_percent"] == -20.0


def test_an_invisible_character_in_a_key_stays_escaped():
    from plugins.metrics import key_path

    assert key_path("r", "safe\u202eexe") == 'r["safe\\u202eexe"]'
    assert key_path("r", "a\u2028b\x01") == 'r["a\\u2028b\\u0001"]'
    assert key_path("r", "\ud800") == 'r["\\ud800"]'


def test_results_of_only_bad_lines_are_unreadable_with_the_reason(alice, root):
    from analysis.outputs import results_url
    from artifacts.store import local_path

    client, user = alice
    a, b = make_bench_exp(user), make_bench_exp(user)
    write_results(a, [{"name": "m", "x": 1}], result_root=root)
    record = write_results(b, [], result_root=root)
    local_path(results_url(record)).write_bytes(b"step 1 loss 0.5\nstep 2 loss 0.4\n")
    doc = client.get(URL, {"ids": [a.pk, b.pk]}).json()
    analysis = doc["plugins"][0]["analyses"][1]
    assert analysis["state"] == "unreadable"
    assert analysis["note"].startswith("2 line(s) of its results file are not JSON objects")
    assert doc["plugins"][0]["metrics"][0]["values"][1]["state"] == "missing"
