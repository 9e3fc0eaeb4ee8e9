"""render.tables turns each built-in plugin's real result into tables; unknown plugins give []."""
from __future__ import annotations

from plugins.render import Table, format_value, tables
from plugins.tests.conftest import FIXTURES, REAL, REAL_PROFILE, run_plugin


def test_trace_summary_tables(out):
    records = run_plugin("trace-summary", "--input", REAL_PROFILE / "vm.trace.json.gz",
                         output=out).records
    result = tables("trace-summary", records)
    assert all(isinstance(t, Table) for t in result)
    titles = [t.title for t in result]
    assert titles[0] == "vm.trace.json.gz: groups" and "vm.trace.json.gz: all groups" in titles
    python = next(t for t in result if t.title == "vm.trace.json.gz: /host:CPU · python")
    assert python.columns[:3] == ("name", "count", "total_us")
    assert python.rows[0][0] == "PjitFunction(mlp)"


def test_hlo_and_bench_tables(tmp_path, out):
    records = run_plugin("hlo-stats", "--input", REAL / "hlo", "--input",
                         FIXTURES / "hlo" / "jit_train.txt", output=out).records
    titles = {t.title: t for t in tables("hlo-stats", records)}
    assert {"modules", "fusions", "collectives", "whiles"} <= set(titles)
    assert len(titles["modules"].rows) == 6
    (tmp_path / "r.csv").write_text("lat_us\n1\n2\n")
    records = run_plugin("bench-summary", "--input", tmp_path / "r.csv", output=out).records
    (metrics,) = tables("bench-summary", records)
    assert metrics.rows == (("lat_us", 2, "1.5", "1", "1.5", "1.9", "1.99", "2"),)


def test_numbers_are_formatted_for_reading_by_field_name():
    assert format_value("mean", 5.3809999826626154e-05) == "5.381e-05"
    assert format_value("p99", 0.125) == "0.125" and format_value("max", 2.0) == "2"
    assert format_value("total_us", 1234567.89) == "1,234,568"
    assert format_value("self_us", 12) == "12"
    assert format_value("output_bytes", 1536) == "1.5 KiB"
    assert format_value("bytes", 512) == "512 B"
    assert format_value("total_bytes", 3 * 2**30) == "3 GiB"
    assert format_value("count", 12345) == 12345  # other ints as they are
    assert format_value("name", "x") == "x" and format_value("ok", True) is True
    assert format_value("mean", None) is None
    assert format_value("mean", float("nan")) == "nan"


def test_unknown_plugin_gives_no_tables():
    assert tables("someone-elses-plugin", [{"kind": "meta"}]) == []


def test_series_of_each_built_in_plugin_from_real_results(tmp_path, out):
    from plugins.render import MAX_POINTS, series

    records = run_plugin("trace-summary", "--input", REAL_PROFILE / "vm.trace.json.gz",
                         output=out).records
    (top,) = series("trace-summary", records)
    assert top.title == "vm.trace.json.gz: self time of the top ops" and top.unit == "us"
    values = [v for _, v in top.points]
    assert 1 <= len(values) <= MAX_POINTS and values == sorted(values, reverse=True)
    records = run_plugin("hlo-stats", "--input", FIXTURES / "hlo" / "jit_train.txt",
                         output=out).records
    (opcodes,) = series("hlo-stats", records)
    assert opcodes.title.endswith(": entry opcodes") and opcodes.points
    (tmp_path / "r.csv").write_text("lat_us,gflops\n1,10\n2,30\n")
    records = run_plugin("bench-summary", "--input", tmp_path / "r.csv", output=out).records
    gflops, lat = series("bench-summary", records)
    assert (gflops.title, gflops.unit, lat.title, lat.unit) == ("gflops", "GFLOP/s", "lat_us", "us")
    assert dict(gflops.points) == {"min": 10, "p50": 20, "mean": 20, "p90": 28, "p99": 29.8,
                                   "max": 30}


def test_series_of_a_users_rows_with_names_skip_what_is_not_a_number():
    from plugins.render import series

    records = [{"kind": "meta"}, {"name": "a", "wall_ms": 3, "ok": True, "note": "x"},
               {"name": "b", "wall_ms": None}, {"name": "c", "wall_ms": 5, "bytes": 2048}]
    found = {s.title: s for s in series("my-script", records)}
    assert set(found) == {"wall_ms", "bytes"}
    assert found["wall_ms"].points == (("a", 3), ("c", 5)) and found["wall_ms"].unit == "ms"
    assert found["bytes"].unit == "B"
    assert series("my-script", [{"kind": "meta"}]) == []
