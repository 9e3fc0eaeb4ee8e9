"""Compare experiments by key path (`falcon exp diff`, `GET /api/v1/exps/diff`).

Pure Python and Django-free: the HTTP view hands it plain dicts and returns what it answers.

Everything is compared as a tree, not as text lines: mappings by key (so reordered or inserted
keys only show the keys that differ), lists by position, and a value whose type differs between
experiments (`1` and `"1"`, a number and a mapping) is one row at its path. The configs are
parsed as YAML by the YAML 1.2 core schema (`core.limits.boundedyaml`, the reader of the tasks file
too): `010` is ten, `on` a string, `0755` the integer 755. Scalars compare by value, and a NaN
equals a NaN; where two scalars are equal but written differently (`3.10` and `3.1`, `0x10` and
`16`, `True` and `true`) the path is a difference all the same, and every row whose spellings
differ carries them in `written` (docs/decisions.md#dec-diff). When a config does not parse to a
mapping or a list, the configs are compared as text instead and a unified diff (difflib) of each
against the first is returned.

A row's path joins keys with `.` and list positions with `[i]`; a key that holds a `.`, `[`,
a space or a quote, or that is not a string, is written as `["key"]` (JSON string) or `[1]`.
"""
from __future__ import annotations

import datetime as dt
import difflib
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from core.limits.boundedyaml import MAX_DEPTH as MAX_CONFIG_DEPTH
from core.limits.boundedyaml import MAX_NODES as MAX_CONFIG_NODES
from plugins.metrics import key_path  # one spelling of paths for configs and metrics

MIN_EXPERIMENTS = 2
MAX_EXPERIMENTS = 10
# The experiment fields compared besides the config and the task specs, in the order shown.
FIELDS = ("name", "cluster_name", "exp_type", "priority", "labels", "status", "reason",
          "cloned_from", "duration_seconds")


class _Absent:
    """The value of a path an experiment does not have."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()


def _plain(value: Any) -> Any:
    """Make a parsed YAML value JSON-ready: dates become ISO 8601 text, set keys text."""
    if isinstance(value, Mapping):
        return {(k if isinstance(k, (str, int, float, bool)) or k is None else str(k)): _plain(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value


def _equal(a: Any, b: Any) -> bool:
    """Equal with the same type (1, 1.0, True differ); a NaN equals a NaN (the same config)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _same(values: Sequence[Any]) -> bool:
    """True when all values are present and equal (`_equal`)."""
    first = values[0]
    return all(v is not ABSENT for v in values) and all(_equal(v, first) for v in values[1:])


def _kind(value: Any) -> str:
    if value is ABSENT:
        return "absent"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return "scalar"


def compare_trees(path: str, values: Sequence[Any], rows: list[dict[str, Any]], *,
                  include_equal: bool, written: Sequence[Any] | None = None) -> None:
    """Append a row per leaf path where `values` (one per experiment) differ.

    Mappings are walked by key (keys in the order of their first appearance), lists by position;
    where the experiments' values are not all mappings or all lists (absent ones aside) the
    path is one row holding each whole value.

    Args:
        path: the path of `values` ('' for the root).
        values: one value per experiment; `ABSENT` where it has none.
        rows: the output: `{"path", "values", "absent", "equal"}` dicts, `values` with None
            where absent and `absent` the positions that have no value; a row whose scalars
            were written differently also has `written` (each one's text, None where absent
            or not a scalar).
        include_equal: add the rows whose values are all equal too.
        written: one per experiment, shaped as its value, each scalar's text as written
            (`core.limits.boundedyaml.load_with_text`); None when unknown. Equal values written
            differently are a difference.
    """
    written = list(written) if written is not None else [None] * len(values)
    kinds = {_kind(v) for v in values} - {"absent"}
    if kinds == {"mapping"}:
        keys: list[Any] = []
        for value in values:
            if value is not ABSENT:
                keys.extend(k for k in value if k not in keys)
        for key in keys:
            compare_trees(key_path(path, key),
                          [ABSENT if v is ABSENT else v.get(key, ABSENT) for v in values],
                          rows, include_equal=include_equal,
                          written=[w.get(key) if isinstance(w, dict) else None
                                   for w in written])
        return
    if kinds == {"list"}:
        longest = max(len(v) for v in values if v is not ABSENT)
        for index in range(longest):
            compare_trees(key_path(path, index),
                          [v[index] if v is not ABSENT and index < len(v) else ABSENT
                           for v in values], rows, include_equal=include_equal,
                          written=[w[index] if isinstance(w, list) and index < len(w) else None
                                   for w in written])
        return
    texts = [w if isinstance(w, str) and v is not ABSENT else None
             for v, w in zip(values, written)]
    spelled = {t for t in texts if t is not None}
    equal = _same(values) and len(spelled) <= 1
    if equal and not include_equal:
        return
    row = {"path": path,
           "values": [None if v is ABSENT else v for v in values],
           "absent": [i for i, v in enumerate(values) if v is ABSENT],
           "equal": equal}
    if len(spelled) > 1:
        row["written"] = texts
    rows.append(row)


def parse_config(text: str) -> tuple[bool, Any, Any]:
    """Return `(True, tree, written)` when `text` is YAML holding a mapping or a list, else
    `(False, text, None)`.

    An empty (or comment-only) config is `(True, {}, {})`. Read by `core.limits.boundedyaml` (the
    YAML 1.2 core schema under the one rule for users' YAML); `written` is each scalar's text
    as written, shaped as `tree`. Text that is not YAML is `(False, text, None)`.

    Raises:
        core.limits.boundedyaml.YamlLimitError: an anchor or alias, deeper than `MAX_CONFIG_DEPTH`,
            more than `MAX_CONFIG_NODES` values.
    """
    from core.limits.boundedyaml import YamlLimitError, load_with_text

    try:
        tree, written = load_with_text(text)
    except YamlLimitError as exc:
        if exc.limit != "syntax":
            raise  # an alias, too deep or too many values: refused, not compared as text
        return False, text, None
    if tree is None:
        return True, {}, {}
    if isinstance(tree, (Mapping, list)) and not _holds_surrogate(tree):
        return True, _plain(tree), _plain(written)
    return False, text, None


def _holds_surrogate(value: Any) -> bool:
    """Whether a key or string of `value` holds a lone UTF-16 surrogate: YAML's `"\\ud800"`
    escape makes one, which no JSON answer can encode (the diff and compare answered 500).
    Such a config is compared as the text it is written in, which is plain ASCII."""
    from core.limits.jsoninput import has_surrogate

    if isinstance(value, str):
        return has_surrogate(value)
    if isinstance(value, Mapping):
        return any(_holds_surrogate(k) or _holds_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_surrogate(v) for v in value)
    return False


# Parsed configs, by their text: reading YAML with the bounded reader costs about 1 ms per
# 100 values, and the same experiments are compared again and again (a compare page
# reloaded, a baseline gated against each new run). Keyed by the text, so a hit is always
# right; only configs up to 16 KiB are kept, so the cache holds at most a few MiB. The trees
# are shared between calls: nothing here or in the callers changes them.
CACHED_CONFIG_CHARS = 16 * 1024


@functools.lru_cache(maxsize=256)
def _parse_config_cached(text: str) -> tuple[bool, Any, Any]:
    return parse_config(text)


def _parse_config_of(exp: Mapping[str, Any]) -> tuple[bool, Any, Any]:
    """`parse_config` of one experiment's config; a config the bounded reader refuses (an
    alias, too deep, too many values: `core.limits.boundedyaml`) fails the whole diff, naming it.

    Raises:
        ValidationFailed: keyed `config`, naming the experiment, the limit and its number.
    """
    from core.limits.boundedyaml import YamlLimitError
    from core.errors import ValidationFailed

    text = exp.get("config") or ""
    try:
        if len(text) <= CACHED_CONFIG_CHARS:
            return _parse_config_cached(text)
        return parse_config(text)
    except YamlLimitError as exc:
        raise ValidationFailed({"config": [
            f"the config of experiment {exp['id']} cannot be compared: {exc}; the diff reads "
            "configs without YAML anchors or aliases, at most "
            f"{MAX_CONFIG_DEPTH} levels deep and {MAX_CONFIG_NODES:,} values"]}) from None


def duration_seconds(exp: Mapping[str, Any], now: dt.datetime) -> float | None:
    """Seconds from `started_at` to `finished_at` (or `now` while running); None if not started."""
    started = exp.get("started_at")
    if started is None:
        return None
    finished = exp.get("finished_at") or now
    return round((finished - started).total_seconds(), 3)


def diff_experiments(exps: Sequence[Mapping[str, Any]], *, now: dt.datetime,
                     include_equal: bool = False,
                     max_experiments: int = MAX_EXPERIMENTS) -> dict[str, Any]:
    """Compare 2 to `max_experiments` experiments by key path.

    Args:
        exps: one dict per experiment, in the order to show: `id`, `name`, `cluster_name`,
            `exp_type`, `priority`, `labels` ({key: value}), `status`, `reason`, `cloned_from`,
            `started_at`, `finished_at` (aware datetimes or None), `role_to_task_spec`
            ({role: TaskSpec}) and `config` (text).
        now: the instant a running experiment's duration is measured to.
        include_equal: also list the paths whose values are all equal (`--all`).
        max_experiments: the most experiments compared at once (`MAX_EXPERIMENTS` for `exp
            diff`; `exp compare` takes more).

    Returns:
        `{"experiments": [{"id", "name"}], "config_format": "yaml" | "text",
        "differences": [{"path", "values", "absent", "equal", ["written"]}], "config_text_diffs":
        [{"id", "diff"}]}`. Paths start with a field name, `tasks.<role>.<field>` or
        `config.<path>`; `config_text_diffs` holds, for text configs, the unified diff of each
        experiment's config against the first one's (empty when they are YAML).

    Raises:
        ValueError: fewer than 2 or more than `max_experiments` experiments.
        core.errors.ValidationFailed: a config the bounded YAML reader refuses (field
            `config`, naming the experiment and the limit).
    """
    if not MIN_EXPERIMENTS <= len(exps) <= max_experiments:
        raise ValueError(f"compare {MIN_EXPERIMENTS} to {max_experiments} experiments; got "
                         f"{len(exps)}.")
    rows: list[dict[str, Any]] = []
    for field in FIELDS:
        if field == "duration_seconds":
            values = [duration_seconds(exp, now) for exp in exps]
        else:
            values = [exp.get(field) for exp in exps]
        if field == "labels":
            values = [dict(v or {}) for v in values]
        compare_trees(field, values, rows, include_equal=include_equal)
    compare_trees("tasks", [exp.get("role_to_task_spec") or {} for exp in exps], rows,
                  include_equal=include_equal)

    parsed = [_parse_config_of(exp) for exp in exps]
    text_diffs: list[dict[str, Any]] = []
    if all(ok for ok, _, _ in parsed):
        config_format = "yaml"
        compare_trees("config", [tree for _, tree, _ in parsed], rows,
                      include_equal=include_equal, written=[w for _, _, w in parsed])
    else:
        config_format = "text"
        texts = [exp.get("config") or "" for exp in exps]
        compare_trees("config", texts, rows, include_equal=include_equal)
        first = texts[0].splitlines(keepends=True)
        for exp, text in zip(exps[1:], texts[1:]):
            diff = "".join(difflib.unified_diff(
                first, text.splitlines(keepends=True), fromfile=f"experiment {exps[0]['id']}",
                tofile=f"experiment {exp['id']}"))
            text_diffs.append({"id": exp["id"], "diff": diff})
    return {"experiments": [{"id": exp["id"], "name": exp.get("name")} for exp in exps],
            "config_format": config_format, "differences": rows,
            "config_text_diffs": text_diffs}
