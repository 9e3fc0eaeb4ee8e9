"""Comparable metrics: the catalog's rules read the real results of each built-in plugin (run as
processes on the real JAX fixtures and on JSONL), the generic rule reads a user's rows, the rules
are validated naming the field, and gate conditions parse and hold as documented."""
from __future__ import annotations

import copy
import json
import math

import pytest

from plugins.catalog import load_catalog, parse_entry
from plugins.gate import changes, condition_problem, parse_condition, path_matches
from plugins.metrics import extract, key_path

from .conftest import REAL, REAL_PROFILE, run_plugin
from .test_catalog import GOOD

CATALOG = load_catalog()


def test_trace_summary_metrics_are_op_times_busy_and_steps(out):
    run = run_plugin("trace-summary", "--input", REAL_PROFILE.parents[3], output=out)
    assert run.returncode == 0, run.stderr
    got = extract(run.records, CATALOG["trace-summary"].metrics)
    fusion = [r for r in run.kind("op_total") if r["name"] == "ynn_fusion.1"][0]
    # `ynn_fusion.1` holds a dot, so it is one quoted key.
    assert got.values['ops["ynn_fusion.1"].total_us'] == fusion["total_us"]
    assert got.values['ops["ynn_fusion.1"].self_us'] == fusion["self_us"]
    assert got.units['ops["ynn_fusion.1"].self_us'] == "us"
    assert got.better['ops["ynn_fusion.1"].self_us'] == "lower"
    group = run.kind("group")[0]
    assert got.values[key_path("busy", group["group"]) + ".busy_us"] == group["busy_us"]
    # The folder holds the same trace twice: the first input's figure is kept, and counted.
    assert got.duplicates > 0
    assert not any(path.startswith(("meta", "phases")) for path in got.values)


def test_hlo_stats_metrics_are_opcode_counts_per_module_and_stage(out):
    run = run_plugin("hlo-stats", "--input", REAL / "hlo", output=out)
    assert run.returncode == 0, run.stderr
    got = extract(run.records, CATALOG["hlo-stats"].metrics)
    module = [r for r in run.kind("module") if r["module"] == "jit_mlp"
              and r["stage"] == "cpu_after_optimizations"][0]
    prefix = "modules.jit_mlp.cpu_after_optimizations"
    assert got.values[f"{prefix}.instructions"] == module["instructions"]
    for opcode, count in module["executed_opcodes"].items():
        assert got.values[key_path(f"{prefix}.executed_opcodes", opcode)] == count
        assert got.units[key_path(f"{prefix}.executed_opcodes", opcode)] == "count"


def test_bench_summary_metrics_keep_the_results_own_key_paths(tmp_path, out):
    rows = [{"results": [{"gflops": 10.0 + i, "latency_ms": 2.0}], "mem_bytes": 5}
            for i in range(3)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = run_plugin("bench-summary", "--input", tmp_path / "r.jsonl", output=out)
    assert run.returncode == 0, run.stderr
    got = extract(run.records, CATALOG["bench-summary"].metrics)
    assert got.values["results.gflops.mean"] == 11.0
    assert got.values["results.gflops.count"] == 3
    assert got.units["results.gflops.count"] == "count"
    assert got.units["results.latency_ms.p99"] == "ms"  # from the metric's own name
    assert got.units["mem_bytes.max"] == "bytes" and got.units["results.gflops.p50"] == "GFLOP/s"


def test_group_by_results_get_the_group_as_a_key():
    records = [{"kind": "metric", "metric": "results.gflops", "group_by": "n", "group": 4,
                "mean": 1.5}, {"kind": "metric", "metric": "results.gflops", "group_by": "n",
                               "group": "big", "mean": 2.5}]
    got = extract(records, CATALOG["bench-summary"].metrics)
    assert got.values == {"results.gflops[4].mean": 1.5, "results.gflops.big.mean": 2.5}


def test_the_generic_rule_reads_numbers_of_named_rows():
    got = extract([{"kind": "meta", "name": "x", "n": 1},
                   {"name": "matmul 1k", "gflops": 3, "err": None, "ok": True, "s": "a",
                    "nested": {"a": 1}, "wall_s": 2.5},
                   {"gflops": 7}, {"name": "", "gflops": 8}])
    assert got.values == {'["matmul 1k"].gflops': 3.0, '["matmul 1k"].err': None,
                          '["matmul 1k"].wall_s': 2.5}
    assert got.units['["matmul 1k"].wall_s'] == "s"


def test_a_key_path_seen_again_keeps_its_first_value():
    got = extract([{"name": "a", "x": 1}, {"name": "a", "x": 2}])
    assert got.values == {"a.x": 1.0} and got.duplicates == 1


@pytest.mark.parametrize("metrics, words", [
    ("x", "metrics must be a list of rules"),
    ([{"kind": "m", "path": ["a"]}], "metrics[0]: missing field 'values'"),
    ([{"kind": "m", "path": ["a"], "values": ["v"], "colour": 1}], "unknown field 'colour'"),
    ([{"kind": "m", "path": [], "values": ["v"]}], "metrics[0].path must be a non-empty list"),
    ([{"kind": "m", "path": ["{a b}"], "values": ["v"]}], "metrics[0].path"),
    ([{"kind": "m", "path": ["a"], "values": ["a.b"]}], "metrics[0].values"),
    ([{"kind": "m", "path": ["a"], "values": ["v"], "units": {"w": "s"}}],
     "units names 'w', which is not in values"),
    ([{"kind": "m", "path": ["a"], "values": ["v"], "better": "up"}],
     "better must be 'higher' or 'lower'"),
    ([{"kind": "", "path": ["a"], "values": ["v"]}], "metrics[0].kind"),
])
def test_bad_rules_are_refused_naming_the_field(metrics, words):
    entry = copy.deepcopy(GOOD)
    entry["metrics"] = metrics
    with pytest.raises(ValueError, match="plugin 'x-1'") as info:
        parse_entry(0, entry)
    assert words in str(info.value)


def test_conditions_parse_and_hold():
    c = parse_condition("bench-summary:results.gflops.mean < -5%")
    assert (c.plugin, c.pattern, c.op, c.threshold, c.relative) == (
        "bench-summary", "results.gflops.mean", "<", -5.0, True)
    assert c.holds(*changes(100.0, 90.0)) and not c.holds(*changes(100.0, 96.0))
    d = parse_condition('trace-summary:ops["a b"].self_us>=+1e3')
    assert d.pattern == 'ops["a b"].self_us' and d.op == ">=" and not d.relative
    assert d.holds(*changes(10.0, 1010.0)) and not d.holds(*changes(10.0, 1009.0))
    assert parse_condition("command/mine:m.x > 0%").plugin == "command/mine"
    for bad in ("gflops < 5", "p:x < fast", "p:x == 5", "p: < 5", "", "p:x < 5%%", "p:x<1e999"):
        assert condition_problem(bad) is not None, bad
    with pytest.raises(ValueError, match="e.g. 'bench-summary:results.gflops.mean < -5%'"):
        parse_condition("nonsense")


def test_changes_against_zero_and_patterns():
    assert changes(0.0, 0.0) == (0.0, 0.0)
    assert changes(0.0, -2.0) == (-2.0, -math.inf)
    assert changes(-4.0, -2.0) == (2.0, 50.0)  # relative to the baseline's magnitude
    assert path_matches("*.mean", "results.gflops.mean")
    assert path_matches('ops["a.b"].*', 'ops["a.b"].self_us')  # `[` is itself
    assert not path_matches("results.gflops.p9?", "results.gflops.p9")
    assert not path_matches("*.mean", "results.gflops.mean_x")


@pytest.mark.parametrize("name,unit", [
    ("gflops", "GFLOP/s"), ("step_TFLOPS", "TFLOP/s"), ("latency_ms", "ms"), ("Total_US", "us"),
    ("wall_seconds", "s"), ("peak_bytes", "bytes"), ("tokens", ""), ("flops_per_step", ""),
])
def test_a_unit_comes_from_the_end_of_the_name_in_any_case(name, unit):
    from plugins.metrics import unit_for

    assert unit_for(name) == unit
