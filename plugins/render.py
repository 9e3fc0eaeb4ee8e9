"""Tables for the CLI from a built-in plugin's JSONL records (Django-free, no I/O).

``tables(plugin_name, records)`` returns the tables to print; an unknown plugin gives ``[]`` so
the CLI can fall back to printing raw records. Numbers are formatted for reading by
``format_value`` (a field ending in ``_us``: whole microseconds with thousands separators; in
``_bytes``: binary units; any other float: 4 significant digits); the exact values stay in the
results file and ``falcon analysis results -o json``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from plugins.metrics import unit_for

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def human_bytes(count: float) -> str:
    """`count` bytes in binary units: `512 B`, `1.5 KiB`, `2 GiB` (4 significant digits)."""
    size, unit = float(count), 0
    while abs(size) >= 1024 and unit < len(BYTE_UNITS) - 1:
        size, unit = size / 1024, unit + 1
    if unit == 0:
        return f"{count:,} B" if isinstance(count, int) else f"{size:.4g} B"
    return f"{size:.4g} {BYTE_UNITS[unit]}"


def format_value(field: str, value: Any) -> Any:
    """One result value as a table shows it, by its field's name.

    A number in a field ending in `_us` is whole microseconds with thousands separators
    (`12,346`); in a field ending in `_bytes` (or named `bytes`), binary units (`1.5 MiB`); any
    other float has 4 significant digits (`5.381e-05`, `0.125`); other ints, strings and
    anything else are returned as they are. Only for reading: the exact values are the JSON's.
    """
    if not _is_number(value):
        return value
    if value != value or value in (float("inf"), float("-inf")):  # NaN, infinities
        return str(value)
    name = str(field)
    if name.endswith("_us"):
        return f"{round(value):,}"
    if name.endswith("_bytes") or name == "bytes":
        return human_bytes(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return value


@dataclass(frozen=True)
class Table:
    """A titled table: column names and rows of cell values (str, int or None; numbers are
    formatted by `format_value`)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


def _of(records: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == kind]


def _table(title: str, columns: Sequence[str], records: Sequence[dict[str, Any]]) -> Table:
    return Table(title, tuple(columns),
                 tuple(tuple(format_value(c, r.get(c)) for c in columns) for r in records))


def _trace_summary(records: Sequence[dict[str, Any]]) -> list[Table]:
    out: list[Table] = []
    for source in dict.fromkeys(r["input"] for r in records if "input" in r):
        mine = [r for r in records if r.get("input") == source]
        out.append(_table(f"{source}: groups", ("group", "slices", "ops", "busy_us"),
                          _of(mine, "group")))
        for group in (g["group"] for g in _of(mine, "group")):
            ops = [o for o in _of(mine, "op") if o["group"] == group]
            out.append(_table(f"{source}: {group}", ("name", "count", "total_us", "self_us",
                                                     "mean_us", "max_us"), ops))
        out.append(_table(f"{source}: all groups", ("name", "count", "total_us", "self_us",
                                                    "groups"), _of(mine, "op_total")))
        steps = _of(mine, "steps")
        if steps:
            out.append(_table(f"{source}: steps", ("group", "count", "mean_us", "min_us",
                                                   "p50_us", "max_us"), steps))
    return out


def _hlo_stats(records: Sequence[dict[str, Any]]) -> list[Table]:
    modules = _of(records, "module")
    rows = [{**m, "top_entry_ops": ", ".join(f"{k} {v}" for k, v in
                                             list(m["entry_opcodes"].items())[:4])}
            for m in modules]
    out = [_table("modules", ("file", "stage", "instructions", "fusions", "parameter_bytes",
                              "output_bytes", "top_entry_ops"), rows)]
    for kind, columns in (("fusion", ("file", "name", "fusion_kind", "instructions",
                                      "output_bytes")),
                          ("custom_call", ("file", "name", "target", "operand_count",
                                           "output_bytes")),
                          ("collective", ("file", "name", "op", "bytes", "executions",
                                          "total_bytes")),
                          ("while", ("file", "name", "trip_count", "executions"))):
        if _of(records, kind):
            out.append(_table(f"{kind.replace('_', ' ')}s", columns, _of(records, kind)))
    return out


def _bench_summary(records: Sequence[dict[str, Any]]) -> list[Table]:
    columns = ["metric", "count", "mean", "min", "p50", "p90", "p99", "max"]
    if any("group" in r for r in _of(records, "metric")):
        columns.insert(1, "group")
    return [_table("metrics", columns, _of(records, "metric"))]


RENDERERS: dict[str, Callable[[Sequence[dict[str, Any]]], list[Table]]] = {
    "trace-summary": _trace_summary, "hlo-stats": _hlo_stats, "bench-summary": _bench_summary}


def tables(plugin_name: str, records: list[dict[str, Any]]) -> list[Table]:
    """The tables showing ``records`` (a built-in plugin's result, meta record included).

    Returns [] for a plugin that is not built in. Records of unknown kinds are ignored; a
    missing field shows as None.
    """
    renderer = RENDERERS.get(plugin_name)
    return renderer(records) if renderer else []


def unit_of(field: str) -> str:
    """The unit a result field's name states, by the metrics' one convention
    (`plugins.metrics.unit_for`: `*_us`, `*_ms`, `*_s`, `*_bytes`, `gflops`...), with bytes
    as `B` (the charts scale them to KiB, MiB...) and a field named `bytes` in bytes too;
    `""` for a name that states none."""
    name = str(field).lower()
    unit = "bytes" if name == "bytes" else unit_for(name)
    return "B" if unit == "bytes" else unit


@dataclass(frozen=True)
class Series:
    """Values to chart, one per label: a title, the values' unit (`us`, `B` or `""`) and
    `(label, value)` points in the order to draw."""

    title: str
    unit: str
    points: tuple[tuple[str, float], ...]


MAX_POINTS = 15  # bars a chart of the top entries shows
MAX_SERIES = 12  # charts one analysis shows at most


def _numeric_points(pairs) -> tuple[tuple[str, float], ...]:
    return tuple((str(label), value) for label, value in pairs if _is_number(value))


def _bench_series(records: Sequence[dict[str, Any]]) -> list[Series]:
    out = []
    for r in _of(records, "metric"):
        name = str(r.get("metric")) + (f" [{r['group']}]" if "group" in r else "")
        points = _numeric_points((stat, r.get(stat)) for stat in
                                 ("min", "p50", "mean", "p90", "p99", "max"))
        if points:
            out.append(Series(name, unit_of(str(r.get("metric"))), points))
    return out


def _trace_series(records: Sequence[dict[str, Any]]) -> list[Series]:
    out = []
    for source in dict.fromkeys(r["input"] for r in records if "input" in r):
        ops = sorted((r for r in _of(records, "op_total") if r.get("input") == source
                      and _is_number(r.get("self_us"))), key=lambda r: -r["self_us"])
        if ops:
            out.append(Series(f"{source}: self time of the top ops", "us", _numeric_points(
                (o.get("name"), o["self_us"]) for o in ops[:MAX_POINTS])))
    return out


def _hlo_series(records: Sequence[dict[str, Any]]) -> list[Series]:
    out = []
    for m in _of(records, "module"):
        opcodes = m.get("entry_opcodes")
        if isinstance(opcodes, dict) and opcodes:
            top = sorted(opcodes.items(), key=lambda kv: -kv[1] if _is_number(kv[1]) else 0)
            out.append(Series(f"{m.get('file')}: entry opcodes", "",
                              _numeric_points(top[:MAX_POINTS])))
    return out


def _named_rows_series(records: Sequence[dict[str, Any]]) -> list[Series]:
    """A user's results: each numeric field of the rows that have a `name`, across them."""
    rows = [r for r in records if isinstance(r.get("name"), str)]
    fields = dict.fromkeys(k for r in rows for k, v in r.items() if _is_number(v))
    return [Series(field, unit_of(field), points) for field in fields
            if (points := _numeric_points((r["name"], r.get(field)) for r in rows[:MAX_POINTS]))]


SERIES = {"trace-summary": _trace_series, "hlo-stats": _hlo_series,
          "bench-summary": _bench_series}


def series(plugin_name: str, records: list[dict[str, Any]]) -> list[Series]:
    """The charts showing ``records``: a built-in plugin's own (bench-summary: each metric's
    statistics; trace-summary: the ops with the most self time; hlo-stats: each module's
    entry opcodes), else each numeric field of the rows that have a ``name``. At most
    ``MAX_SERIES`` charts of at most ``MAX_POINTS`` bars (bench-summary: its six statistics);
    values that are not finite numbers are left out.
    """
    found = SERIES.get(plugin_name, _named_rows_series)(records)
    return [s for s in found if s.points][:MAX_SERIES]
