"""Comparable metrics of an analysis' JSONL results: which numbers, under which key path and unit.

A catalog entry may declare ``metrics`` (docs/plugins.md, "Comparable metrics"): rules that each
take the records of one ``kind``, build a key path from some of their fields and read some of
their numeric fields as metrics. A plugin without rules, and a user's own command, take part
through the generic rule: every record with a string ``name`` (its ``kind`` not ``meta``) gives
one metric per top-level number, ``<name>.<field>``.

This module imports no Django: the catalog is read by the analyzer and the API server alike.
Paths are written as ``experiments.diff`` writes config paths (``a.b``, ``a["x.y"]``, ``a[3]``);
the rule is repeated here because the plugins layer sits below every app.
"""
from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_FIELD_PART = re.compile(r"^\{([A-Za-z0-9_]+)(:path)?\}$")
_VALUE_NAME = re.compile(r"^[A-Za-z0-9_]+(\.\*)?$")
RULE_FIELDS = ("kind", "path", "values", "units", "better")
BETTER = ("higher", "lower")
# A metric's unit from the end of its name, the plugins' own convention (docs/plugins.md).
# Throughputs are named by their unit alone as often as by a suffix (`gflops`, `step_tflops`).
SUFFIX_UNITS = (("_us", "us"), ("_ms", "ms"), ("_seconds", "s"), ("_s", "s"),
                ("_bytes", "bytes"), ("gflops", "GFLOP/s"), ("tflops", "TFLOP/s"))
# What one results file may contribute: a compare reads many of them in one request.
MAX_METRICS_PER_RESULT = 5000


def key_path(parent: str, key: Any) -> str:
    """Return the path of `key` under `parent`: `parent.key` for a plain key (letters, digits,
    `_`, `-`), `parent[3]` for an integer, `parent["a.b"]` (JSON string) otherwise."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{parent}[{key}]"
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{_quoted(key if isinstance(key, str) else str(key))}]"


# Characters kept escaped in a quoted key: controls, format characters (bidi overrides),
# surrogates, private-use and unassigned code points, line and paragraph separators.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _quoted(key: str) -> str:
    """`key` as a JSON string, letters of every script as they are (`["吞吐量"]`, `["ü/é"]`:
    readable, and matched by a pattern typed as seen), the invisible ones as `\\uXXXX`."""
    text = json.dumps(key, ensure_ascii=False)
    if text.isascii():
        return text
    return "".join(_escaped(c) if unicodedata.category(c) in _ESCAPED_CATEGORIES else c
                   for c in text)


def _escaped(char: str) -> str:
    """`char` as JSON escapes: one `\\uXXXX`, or a UTF-16 surrogate pair past U+FFFF."""
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def unit_for(name: str) -> str:
    """The unit a metric's name implies by its suffix (`total_us` -> `us`, `gflops` ->
    `GFLOP/s`, whatever the case), else ``""``."""
    name = name.lower()
    for suffix, unit in SUFFIX_UNITS:
        if name.endswith(suffix):
            return unit
    return ""


@dataclass(frozen=True)
class MetricRule:
    """One ``metrics`` entry of a catalog plugin.

    Attributes:
        kind: the records it reads (their ``kind`` field).
        path: the parts of the key path: a literal key (``ops``), ``{field}`` (the field's value
            as one key, quoted when it holds a ``.``), or ``{field:path}`` (the field's text as
            a key path as it is, e.g. bench-summary's ``results.gflops``). A part whose field
            is absent or null is left out.
        values: the numeric fields read, each appended to the path; ``field.*`` reads every
            entry of a mapping field (``executed_opcodes.*`` -> ``executed_opcodes.fusion``).
        units: unit by value field; a field not listed takes its suffix's (`unit_for`) or,
            failing that, the suffix of the path's last part (bench-summary's ``latency_ms``).
        better: ``higher``, ``lower`` or ``""`` (unknown): which way is an improvement.
    """

    kind: str
    path: tuple[str, ...]
    values: tuple[str, ...]
    units: tuple[tuple[str, str], ...] = ()
    better: str = ""

    def unit_of(self, name: str, last_key: str) -> str:
        """The unit of value field `name` under a path ending in `last_key`."""
        return (dict(self.units).get(name) or unit_for(name.removesuffix(".*"))
                or unit_for(last_key))


@dataclass
class Extracted:
    """The metrics of one results file: `values` by key path (None: the result holds null, a
    non-finite number), with `units` and `better` per key path, in first-seen order;
    `duplicates` counts key paths met again (the first value is kept)."""

    values: dict[str, float | None] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    better: dict[str, str] = field(default_factory=dict)
    duplicates: int = 0
    truncated: bool = False

    def add(self, path: str, value: float | None, unit: str, better: str) -> None:
        if path in self.values:
            self.duplicates += 1
            return
        if len(self.values) >= MAX_METRICS_PER_RESULT:
            self.truncated = True
            return
        self.values[path] = value
        self.units[path] = unit
        self.better[path] = better


def _number(value: Any) -> tuple[bool, float | None]:
    """`(True, x)` for a finite number, `(True, None)` for null (how plugins write NaN and
    infinities), `(False, None)` for anything else (booleans are not numbers)."""
    if value is None:
        return True, None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False, None
    try:
        number = float(value)
    except OverflowError:
        return True, None
    return True, (number if math.isfinite(number) else None)


def _prefix(rule: MetricRule, record: Mapping[str, Any]) -> str:
    path = ""
    for part in rule.path:
        match = _FIELD_PART.fullmatch(part)
        if match is None:
            path = key_path(path, part)
            continue
        value = record.get(match.group(1))
        if value is None or isinstance(value, (dict, list)):
            continue
        if match.group(2):
            text = str(value)
            path = f"{path}.{text}" if path else text
        else:
            path = key_path(path, value)
    return path


def _apply(rule: MetricRule, record: Mapping[str, Any], out: Extracted) -> None:
    prefix = _prefix(rule, record)
    last = prefix.rsplit(".", 1)[-1]
    for name in rule.values:
        unit = rule.unit_of(name, last)
        if name.endswith(".*"):
            mapping = record.get(name[:-2])
            if not isinstance(mapping, Mapping):
                continue
            base = key_path(prefix, name[:-2])
            for key, value in mapping.items():
                ok, number = _number(value)
                if ok:
                    out.add(key_path(base, key), number, unit, rule.better)
            continue
        if name not in record:
            continue
        ok, number = _number(record[name])
        if ok:
            out.add(key_path(prefix, name), number, unit, rule.better)


def _generic(record: Mapping[str, Any], out: Extracted) -> None:
    name = record.get("name")
    if not isinstance(name, str) or not name or record.get("kind") == "meta":
        return
    prefix = key_path("", name)
    for key, value in record.items():
        if key in ("name", "kind"):
            continue
        ok, number = _number(value)
        if ok:
            out.add(key_path(prefix, key), number, unit_for(key), "")


def extract(records: Iterable[Mapping[str, Any]], rules: Iterable[MetricRule] = ()) -> Extracted:
    """The comparable metrics of a results file's records.

    Args:
        records: the file's JSON objects, in order.
        rules: the plugin's catalog rules; none: the generic rule (records with a ``name``).

    Returns:
        An `Extracted`; a key path met twice keeps its first value (trace-summary summarises
        each input file on its own, and a profile folder often holds the same trace twice).
    """
    rules = tuple(rules)
    by_kind: dict[str, list[MetricRule]] = {}
    for rule in rules:
        by_kind.setdefault(rule.kind, []).append(rule)
    out = Extracted()
    for record in records:
        if rules:
            # A kind that is not a string (a list, an object) names no rule and is no key:
            # looking it up raised TypeError and answered 500.
            kind = record.get("kind")
            for rule in by_kind.get(kind, ()) if isinstance(kind, str) else ():
                _apply(rule, record, out)
        else:
            _generic(record, out)
    return out


def parse_rules(value: Any, where: str) -> tuple[MetricRule, ...]:
    """Validate a catalog entry's ``metrics`` list; raises ValueError naming
    ``metrics[i].<field>`` and what it must be."""
    if not isinstance(value, list):
        raise ValueError(f"{where}: metrics must be a list of rules "
                         f"({{kind, path, values, units?, better?}}), got {value!r}")
    rules = []
    for index, entry in enumerate(value):
        at = f"{where}: metrics[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{at} must be a mapping, got {entry!r}")
        unknown = sorted(set(entry) - set(RULE_FIELDS))
        if unknown:
            raise ValueError(f"{at}: unknown field {unknown[0]!r} (known: {', '.join(RULE_FIELDS)})")
        for name in ("kind", "path", "values"):
            if name not in entry:
                raise ValueError(f"{at}: missing field {name!r}")
        if not isinstance(entry["kind"], str) or not entry["kind"]:
            raise ValueError(f"{at}.kind must be the records' kind, e.g. 'metric'")
        path = entry["path"]
        if (not isinstance(path, list) or not path
                or not all(isinstance(p, str) and p and ("{" not in p or _FIELD_PART.fullmatch(p))
                           for p in path)):
            raise ValueError(f"{at}.path must be a non-empty list of keys, '{{field}}' or "
                             f"'{{field:path}}', got {path!r}")
        values = entry["values"]
        if (not isinstance(values, list) or not values
                or not all(isinstance(v, str) and _VALUE_NAME.fullmatch(v) for v in values)):
            raise ValueError(f"{at}.values must be a non-empty list of field names "
                             f"(or 'field.*' for a mapping), got {values!r}")
        units = entry.get("units", {})
        if not isinstance(units, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in units.items()):
            raise ValueError(f"{at}.units must map a value field to its unit, got {units!r}")
        if set(units) - set(values):
            raise ValueError(f"{at}.units names {sorted(set(units) - set(values))[0]!r}, "
                             "which is not in values")
        better = entry.get("better", "")
        if better not in ("", *BETTER):
            raise ValueError(f"{at}.better must be 'higher' or 'lower', got {better!r}")
        rules.append(MetricRule(kind=entry["kind"], path=tuple(path), values=tuple(values),
                                units=tuple(units.items()), better=better))
    return tuple(rules)
