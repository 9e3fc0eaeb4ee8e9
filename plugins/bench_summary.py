"""bench-summary: count, mean, min, max, p50, p90, p99 per numeric metric of benchmark results.

Inputs: JSONL (one object per line), JSON (an object or a list) and CSV (a header row), plain or
gzipped (by magic bytes). Nested objects flatten into key paths (``config.n``); a list of objects
yields one record per element under its path (``results`` -> metrics ``results.gflops``), a list
of numbers one value per element. Booleans, strings and non-finite numbers are not numbers: they
are skipped and counted. ``--group-by KEY`` splits each metric by the value of KEY, a key path
relative to the records that hold the metric (``--group-by n`` groups ``results.gflops`` by the
``n`` of each ``results`` element).
"""
from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from plugins.common import (EXIT_NO_INPUT, EXIT_OK, EXIT_PARSE_ERROR, InputFile, PluginError,
                            argument_parser, discover, meta_record, open_text, resolve_io, run,
                            warn, write_jsonl)

PLUGIN = "bench-summary"
PERCENTILES = (50, 90, 99)


@dataclass
class Record:
    """Scalar fields of one record (key paths relative to it) and the path of the record."""

    path: str
    fields: dict[str, Any]


def flatten(value: Any, path: str = "") -> Iterator[Record]:
    """The records of a JSON value: its own scalars (nested objects as ``a.b`` key paths) and,
    recursively, one record per element of each list of objects it holds."""
    own: dict[str, Any] = {}
    nested: list[Record] = []

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(node, list):
            full = f"{path}.{key}" if path and key else (path or key)
            if node and all(isinstance(e, dict) for e in node):
                for element in node:
                    nested.extend(flatten(element, full))
            else:
                own[key] = list(node)
        else:
            own[key] = node

    walk(value, "")
    yield Record(path, own)
    yield from nested


def is_number(value: Any) -> bool:
    """True for ints and floats a double holds as a finite number; booleans are not numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer past a double's range: skipped and counted, as inf
        return False


@dataclass
class FileStats:
    """What one input contributed."""

    format: str
    records: int = 0
    values: int = 0
    non_numeric: int = 0
    errors: list[str] = field(default_factory=list)


def read_records(path: Path, rel: str, stats: FileStats) -> Iterator[Record]:
    """The records of one file by its content: JSON, JSONL, or CSV. Bad JSONL lines are counted
    in ``stats.errors``; raises PluginError(exit 1) when the whole file cannot be read."""
    with open_text(path) as f:
        text = f.read()
    stripped = text.lstrip()
    if not stripped:
        return
    if stripped[0] in "[{":
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            if stripped[0] == "{" and "\n" in stripped.strip():
                stats.format = "jsonl"
                yield from _jsonl(text, rel, stats)
                return
            raise PluginError(f"{rel}: not JSON at byte offset "
                              f"{len(text[:exc.pos].encode())}: {exc.msg}", EXIT_PARSE_ERROR) from exc
        stats.format = "json"
        for element in document if isinstance(document, list) else [document]:
            yield from flatten(element)
        return
    stats.format = "csv"
    for row in csv.DictReader(text.splitlines()):
        yield Record("", {k: _csv_value(v) for k, v in row.items() if k is not None and v != ""})


def _jsonl(text: str, rel: str, stats: FileStats) -> Iterator[Record]:
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if line.strip():
            try:
                yield from flatten(json.loads(line))
            except json.JSONDecodeError as exc:
                stats.errors.append(f"{rel}: line {number} (byte offset "
                                    f"{len(text[:offset].encode()) + exc.pos}): {exc.msg}")
        offset += len(line)


def _csv_value(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            continue
    return text


def accepts(path: Path) -> bool:
    """True for the file names searched in directories: ``*.jsonl``, ``*.json``, ``*.csv``."""
    return path.suffix.lower() in (".jsonl", ".json", ".csv")


def _metric(record: Record, key: str) -> str:
    return f"{record.path}.{key}" if record.path else key


def summarise(values: list[float]) -> dict[str, float]:
    """count, mean, min, max and p50/p90/p99 (numpy's linear interpolation) of ``values``.

    Every statistic lies between the (finite) min and max, so it is finite too: when a sum or a
    difference on the way overflows (values near a double's limit, 1.7e308), the figures are
    computed again on the values divided by a power of two, which is exact, and scaled back.
    """
    array = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        result = _statistics(array, 0)
        if not all(math.isfinite(v) for v in result.values()):
            exponent = math.frexp(float(np.abs(array).max()))[1]
            result = _statistics(np.ldexp(array, -exponent), exponent)
    return {"count": int(array.size), **result}


def _statistics(array: np.ndarray, exponent: int) -> dict[str, float]:
    """The figures of `array`, each multiplied by 2**exponent."""
    result = {"mean": array.mean(), "min": array.min(), "max": array.max()}
    for q in PERCENTILES:
        result[f"p{q}"] = np.percentile(array, q)
    return {key: math.ldexp(float(value), exponent) for key, value in result.items()}


def analyse(sources: Sequence[InputFile], group_by: str | None) -> list[dict[str, Any]]:
    """Read every source and build the result records (meta first).

    Raises PluginError: exit 1 when every source failed to parse, exit 2 when there was no
    numeric value at all.
    """
    values: dict[tuple[str, Any], list[float]] = defaultdict(list)
    per_file: dict[tuple[str, Any], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    skipped: dict[str, int] = defaultdict(int)
    inputs, failures = [], []
    for source in sources:
        stats = FileStats("unknown")
        entry: dict[str, Any] = {"path": source.rel, "bytes": source.size_bytes}
        try:
            for record in read_records(source.path, source.rel, stats):
                stats.records += 1
                group = record.fields.get(group_by) if group_by else None
                for key, value in record.fields.items():
                    if key == group_by:
                        continue
                    for v in value if isinstance(value, list) else [value]:
                        metric = _metric(record, key)
                        if is_number(v):
                            values[(metric, group)].append(float(v))
                            per_file[(metric, group)][source.rel] += 1
                            stats.values += 1
                        else:
                            skipped[metric] += 1
                            stats.non_numeric += 1
        except PluginError as exc:
            failures.append(str(exc))
            entry["error"] = str(exc)
            warn(f"error: {exc}")
        for error in stats.errors:
            warn(f"warning: {error}")
        entry.update(format=stats.format, records=stats.records, values=stats.values,
                     non_numeric=stats.non_numeric, bad_lines=len(stats.errors))
        inputs.append(entry)
    if failures and len(failures) == len(sources):
        raise PluginError("; ".join(failures), EXIT_PARSE_ERROR)
    if not values:
        raise PluginError(f"{', '.join(s.rel for s in sources)}: no numeric values (expected "
                          f"JSONL, JSON or CSV benchmark results)", EXIT_NO_INPUT)
    records: list[dict[str, Any]] = [meta_record(PLUGIN, inputs, group_by=group_by,
                                                 metrics=len({m for m, _ in values}))]
    for (metric, group), vals in sorted(values.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        record: dict[str, Any] = {"kind": "metric", "metric": metric}
        if group_by:
            record.update(group_by=group_by, group=group)
        record.update(summarise(vals), non_numeric=skipped.get(metric, 0),
                      files=dict(per_file[(metric, group)]))
        records.append(record)
    return records


def main(argv: Sequence[str] | None = None) -> int:
    """Run bench-summary with command-line arguments ``argv``; returns the exit status."""
    parser = argument_parser(PLUGIN, "Per-metric statistics of JSONL, JSON and CSV results.")
    parser.add_argument("--group-by", default=None, metavar="KEY",
                        help="split metrics by this key path, relative to the records")
    args = parser.parse_args(argv)

    def body() -> int:
        inputs, output = resolve_io(args)
        sources = discover(inputs, accepts)
        if not sources:
            raise PluginError(f"{', '.join(map(str, inputs))}: no *.jsonl, *.json or *.csv "
                              f"files", EXIT_NO_INPUT)
        write_jsonl(output, analyse(sources, args.group_by))
        return EXIT_OK

    return run(body)
