"""bench-summary: flattening of JSON, JSONL and CSV results, statistics checked against numpy."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from plugins.bench_summary import flatten
from plugins.tests.conftest import run_plugin


def replica(i: int) -> dict:
    return {"replica": i, "host": f"h{i}", "ok": True,
            "config": {"dtype": "f32", "repeats": 5},
            "results": [{"n": n, "best_seconds": n * 1e-6 * (i + 1), "gflops": 40.0 + n / 64 + i}
                        for n in (128, 256, 512)]}


def metrics(run) -> dict:
    return {(m["metric"], m.get("group")): m for m in run.kind("metric")}


def test_json_results_flatten_into_key_paths_and_match_numpy(tmp_path, out):
    for i in range(3):
        (tmp_path / f"replica-{i}.json").write_text(json.dumps(replica(i)))
    run = run_plugin("bench-summary", "--input", tmp_path, output=out)
    assert run.returncode == 0, run.stderr
    m = metrics(run)
    gflops = [40.0 + n / 64 + i for i in range(3) for n in (128, 256, 512)]
    g = m[("results.gflops", None)]
    assert g["count"] == 9
    for q in (50, 90, 99):
        assert g[f"p{q}"] == pytest.approx(float(np.percentile(gflops, q)))
    assert (g["mean"], g["min"], g["max"]) == pytest.approx(
        (np.mean(gflops), min(gflops), max(gflops)))
    assert g["files"] == {"replica-0.json": 3, "replica-1.json": 3, "replica-2.json": 3}
    assert m[("config.repeats", None)]["count"] == 3 and m[("replica", None)]["max"] == 2
    # Strings and booleans are not numbers: skipped and counted.
    assert ("host", None) not in m and ("ok", None) not in m
    assert sum(i["non_numeric"] for i in run.records[0]["inputs"]) == 3 * 3  # host, ok, dtype


def test_group_by_a_key_relative_to_the_records(tmp_path, out):
    (tmp_path / "r.json").write_text(json.dumps([replica(0), replica(1)]))
    run = run_plugin("bench-summary", "--input", tmp_path / "r.json", "--group-by", "n",
                     output=out)
    assert run.returncode == 0, run.stderr
    m = metrics(run)
    assert m[("results.gflops", 128)]["count"] == 2
    assert m[("results.gflops", 128)]["mean"] == pytest.approx(40.0 + 2 + 0.5)
    assert ("results.n", 128) not in m          # the key itself is not a metric
    assert m[("replica", None)]["count"] == 2   # records without the key: group null
    assert run.records[0]["group_by"] == "n"


def test_jsonl_csv_and_gzip_by_magic_bytes(tmp_path, out):
    (tmp_path / "a.jsonl").write_text('{"lat_us": 1, "x": [1, 2]}\n{"lat_us": 3}\nnot json\n'
                                      '{"lat_us": 2, "ok": false}\n')
    (tmp_path / "b.csv").write_text("name,lat_us\nfoo,4\nbar,\nbaz,oops\n")
    (tmp_path / "c.json").write_bytes(gzip.compress(b'{"lat_us": 5}'))
    run = run_plugin("bench-summary", "--input", tmp_path, output=out)
    assert run.returncode == 0, run.stderr
    lat = metrics(run)[("lat_us", None)]
    assert (lat["count"], lat["p50"], lat["non_numeric"]) == (5, 3.0, 1)
    assert lat["files"] == {"a.jsonl": 3, "b.csv": 1, "c.json": 1}
    assert metrics(run)[("x", None)]["count"] == 2
    formats = {i["path"]: (i["format"], i["bad_lines"]) for i in run.records[0]["inputs"]}
    assert formats == {"a.jsonl": ("jsonl", 1), "b.csv": ("csv", 0), "c.json": ("json", 0)}
    assert "a.jsonl: line 3" in run.stderr


def test_no_numbers_is_no_usable_input_and_broken_json_a_parse_error(tmp_path, out):
    (tmp_path / "empty.jsonl").write_text("")
    run = run_plugin("bench-summary", "--input", tmp_path, output=out)
    assert run.returncode == 2 and "no numeric values" in run.stderr and run.output is None
    (tmp_path / "empty.jsonl").unlink()
    (tmp_path / "bad.json").write_text('{"a": [1, 2,, 3]}')
    run = run_plugin("bench-summary", "--input", tmp_path, output=out)
    assert run.returncode == 1 and "bad.json: not JSON at byte offset 12" in run.stderr


def test_numbers_at_the_edge_of_float_range_are_summarised_or_skipped(tmp_path, out):
    # An integer past a double's range stopped the whole run with OverflowError (mlflow#3586
    # crashed on large metric values), and a sum past it made the mean null.
    huge = 10 ** 400
    (tmp_path / "a.jsonl").write_text(f'{{"lat": 1e308}}\n{{"lat": 1.7e308}}\n'
                                      f'{{"lat": {huge}}}\n{{"lat": -{huge}}}\n'
                                      '{"spread": -1.7e308}\n{"spread": 1.7e308}\n')
    (tmp_path / "b.csv").write_text(f"name,ops\nx,{huge}\ny,3\n")
    run = run_plugin("bench-summary", "--input", tmp_path, output=out)
    assert run.returncode == 0, run.stderr
    lat, ops = metrics(run)[("lat", None)], metrics(run)[("ops", None)]
    assert (lat["count"], lat["non_numeric"]) == (2, 2)
    assert lat["mean"] == pytest.approx(1.35e308) and lat["max"] == 1.7e308
    assert (ops["count"], ops["non_numeric"], ops["mean"]) == (1, 1, 3.0)
    spread = metrics(run)[("spread", None)]
    assert (spread["mean"], spread["p50"]) == (0.0, 0.0)
    assert spread["p90"] == pytest.approx(0.8 * 1.7e308)
    assert "Warning" not in run.stderr


def test_flatten_yields_one_record_per_list_element():
    records = list(flatten({"a": 1, "r": [{"b": 2, "s": [{"c": 3}]}, {"b": 4}]}))
    assert [(r.path, r.fields) for r in records] == [
        ("", {"a": 1}), ("r", {"b": 2}), ("r.s", {"c": 3}), ("r", {"b": 4})]
