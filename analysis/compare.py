"""CompareExps: the config differences of experiments and what they did to their analyses' metrics.

One document (docs/compare.md) answers `GET /api/v1/exps/compare`, `falcon exp compare -o json`
and the compare page: the experiments with their jobs, the key-path differences of
`experiments.diff` (the logic of `exp diff`, up to `MAX_EXPERIMENTS` here), and per plugin the
analysis used for each experiment and each comparable metric (`plugins.metrics`) side by side
with its change against the baseline, plus the gate's verdict when conditions are given
(`plugins.gate`).

Which analysis stands for an experiment: its newest succeeded analysis of that plugin (by
`created_at`, then id). Only a succeeded analysis has a complete results file; a newer one
supersedes an older (a re-run after a plugin fix, or with other inputs).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from core.errors import NotFound, ValidationFailed
from core.domain.statuses import AnalysisStatus
from experiments.diff import diff_experiments, duration_seconds
from experiments.selectors import exp_diff_rows
from jobs.models import Job
from plugins.catalog import Plugin, load_catalog
from plugins.gate import MAX_CONDITIONS, Condition, changes, condition_problem, \
    parse_condition, path_matches
from plugins.metrics import Extracted, MetricRule, extract

from .models import AnalysisRecord
from .outputs import read_results

MIN_EXPERIMENTS = 2
MAX_EXPERIMENTS = 20
MAX_FILTERS = 20  # plugins or metric patterns in one request
MAX_PATTERN_CHARS = 500
COMMAND_SECTION = "command/"  # the section of a user's command analyses: command/<name>


@lru_cache(maxsize=4)
def _catalog(path: str, mtime: float) -> dict[str, Plugin]:
    return load_catalog(path)


def metric_rules() -> dict[str, tuple[MetricRule, ...]]:
    """Each catalog plugin's metric rules (`FALCON_PLUGIN_CATALOG`, read again when it
    changes); {} when the catalog cannot be read, so every plugin takes the generic rule."""
    path = str(settings.FALCON_PLUGIN_CATALOG)
    try:
        catalog = _catalog(path, Path(path).stat().st_mtime)
    except (OSError, ValueError):
        return {}
    return {name: plugin.metrics for name, plugin in catalog.items()}


def section_of(record: AnalysisRecord) -> str:
    """The plugin section an analysis belongs to: its plugin, or `command/<name>`."""
    return record.plugin_name or f"{COMMAND_SECTION}{record.name}"


def _conditions(fail_on: Sequence[str]) -> list[Condition]:
    if len(fail_on) > MAX_CONDITIONS:
        raise ValidationFailed({"fail_on": [f"give at most {MAX_CONDITIONS} conditions; got "
                                            f"{len(fail_on)}."]})
    # Each sentence quotes its condition (the blank one aside, which has nothing to quote).
    problems = [p for text in fail_on if (p := condition_problem(text))]
    if problems:
        raise ValidationFailed({"fail_on": problems})
    return [parse_condition(text) for text in fail_on]


def _check_filters(name: str, values: Sequence[str]) -> list[str]:
    if len(values) > MAX_FILTERS:
        raise ValidationFailed({name: [f"give at most {MAX_FILTERS}; got {len(values)}."]})
    bad = [v for v in values if not isinstance(v, str) or not v.strip(" \t\n\r\f\v")
           or "\x00" in v or len(v) > MAX_PATTERN_CHARS]
    if bad:
        raise ValidationFailed({name: [f"each must be 1 to {MAX_PATTERN_CHARS} characters, not "
                                       "blank and without NUL."]})
    return list(values)


def _order(exp_ids: Sequence[int], baseline: int | None) -> list[int]:
    ids = list(exp_ids)
    if baseline is None:
        return ids
    if baseline not in ids:
        raise ValidationFailed({"baseline": [f"experiment {baseline} is not among the ids "
                                             f"compared ({', '.join(map(str, ids))}); give one "
                                             "of them, or leave it out for the first."]})
    return [baseline] + [i for i in ids if i != baseline]


def _experiments(rows: Sequence[Mapping[str, Any]], now) -> list[dict[str, Any]]:
    ids = [row["id"] for row in rows]
    jobs: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
    for job in (Job.objects.filter(experiment_id__in=ids).order_by("experiment_id", "role")
                .values("experiment_id", "role", "status", "started_at", "finished_at")):
        jobs[job["experiment_id"]].append({"role": job["role"], "status": job["status"],
                                           "duration_seconds": duration_seconds(job, now)})
    return [{"id": row["id"], "name": row["name"], "status": row["status"],
             "labels": dict(row["labels"] or {}), "created_at": row["created_at"],
             "started_at": row["started_at"], "finished_at": row["finished_at"],
             "duration_seconds": duration_seconds(row, now), "jobs": jobs[row["id"]]}
            for row in rows]


def _chosen_analyses(ids: Sequence[int], sections: Sequence[str] | None
                     ) -> dict[str, dict[int, AnalysisRecord]]:
    """The newest succeeded analysis per (section, experiment): one query on the
    (experiment, created_at, analysis_id) index."""
    chosen: dict[str, dict[int, AnalysisRecord]] = {}
    records = (AnalysisRecord.objects.filter(experiment_id__in=ids,
                                             status=AnalysisStatus.SUCCEEDED)
               .only("analysis_id", "name", "experiment_id", "plugin_name", "result_path",
                     "status", "created_at")
               .order_by("experiment_id", "-created_at", "-analysis_id"))
    for record in records:
        section = section_of(record)
        if sections is not None and section not in sections:
            continue
        chosen.setdefault(section, {}).setdefault(record.experiment_id, record)
    return chosen


def _extracted(record: AnalysisRecord, rules: tuple[MetricRule, ...]) -> tuple[Extracted, str]:
    """The metrics of one analysis and a note ('' when its results were read whole)."""
    try:
        results = read_results(record, strict=False)  # numbers and names only: orjson
    except NotFound as exc:
        return Extracted(), exc.message
    out = extract(results["records"], rules)
    note = "its results file is over the read limit: metrics past it are missing" \
        if results["truncated"] else ""
    if out.truncated:
        note = note or "it has more metrics than a compare reads: the rest are missing"
    if results["unparsable"] and not note:
        # Said, not hidden: a metric of a skipped line shows as missing, and the user's next
        # question is why (`falcon analysis results` lists each such line).
        first = results["unparsable"][0]
        note = (f"{len(results['unparsable'])} line(s) of its results file are not JSON "
                f"objects and were skipped (line {first['line']}: {first['error'][:120]})")
    return out, note


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _cell(value: float | None, present: bool, base: float | None) -> dict[str, Any]:
    if not present:
        return {"state": "missing", "value": None, "change": None, "change_percent": None}
    if value is None:
        return {"state": "nan", "value": None, "change": None, "change_percent": None}
    cell: dict[str, Any] = {"state": "number", "value": value, "change": None,
                            "change_percent": None}
    if base is not None:
        change, percent = changes(base, value)
        cell.update(change=_finite(change), change_percent=_finite(percent))
    return cell


def _section(name: str, ids: Sequence[int], chosen: Mapping[int, AnalysisRecord],
             rules: tuple[MetricRule, ...], patterns: Sequence[str]
             ) -> tuple[dict[str, Any], list[Extracted]]:
    analyses, extracted = [], []
    for exp_id in ids:
        record = chosen.get(exp_id)
        if record is None:
            analyses.append({"experiment": exp_id, "analysis_id": None, "state": "missing",
                             "note": f"no succeeded {name} analysis"})
            extracted.append(Extracted())
            continue
        out, note = _extracted(record, rules)
        analyses.append({"experiment": exp_id, "analysis_id": record.analysis_id,
                         "state": "used" if out.values or not note else "unreadable",
                         "note": note})
        extracted.append(out)
    paths: dict[str, None] = {}
    for out in extracted:
        paths.update(dict.fromkeys(out.values))
    metrics = []
    for path in paths:
        if patterns and not any(path_matches(p, path) for p in patterns):
            continue
        first = next(out for out in extracted if path in out.values)
        base = extracted[0].values.get(path)
        metrics.append({"path": path, "unit": first.units[path], "better": first.better[path],
                        "values": [_cell(out.values.get(path), path in out.values, base)
                                   for out in extracted]})
    return ({"plugin": name, "analyses": analyses, "metrics": metrics,
             "duplicates": sum(out.duplicates for out in extracted)}, extracted)


def _gate(conditions: Sequence[Condition], ids: Sequence[int],
          extracted: Mapping[str, list[Extracted]]) -> dict[str, Any]:
    """Evaluate each condition on every metric it matches, for every experiment but the
    baseline. A number that meets it fails the gate; so does a missing or NaN value where the
    baseline has a number (a run that lost its metric is no pass); a metric the baseline lacks
    is not compared. A condition that matches no metric at all fails too: it is a typo or a
    plugin that stopped writing the metric."""
    results = []
    for condition in conditions:
        outs = extracted.get(condition.plugin, [])
        base_values = outs[0].values if outs else {}
        matched = [p for p in dict.fromkeys(k for out in outs for k in out.values)
                   if path_matches(condition.pattern, p)]
        failures = []
        for path in matched:
            base = base_values.get(path)
            if base is None:
                continue
            for exp_id, out in zip(ids[1:], outs[1:]):
                value = out.values.get(path)
                if value is None:
                    failures.append({"experiment": exp_id, "path": path, "baseline": base,
                                     "value": None,
                                     "why": "missing" if path not in out.values else "nan"})
                    continue
                change, percent = changes(base, value)
                if condition.holds(change, percent):
                    failures.append({"experiment": exp_id, "path": path, "baseline": base,
                                     "value": value, "change": _finite(change),
                                     "change_percent": _finite(percent), "why": "condition"})
        results.append({"condition": condition.text, "plugin": condition.plugin,
                        "pattern": condition.pattern, "op": condition.op,
                        "threshold": condition.threshold, "relative": condition.relative,
                        "matched": len(matched), "failures": failures,
                        "failed": bool(failures) or not matched})
    return {"failed": any(r["failed"] for r in results), "conditions": results}


def exp_compare(*, exp_ids: Sequence[int], baseline: int | None = None,
                plugins: Sequence[str] = (), metrics: Sequence[str] = (),
                fail_on: Sequence[str] = ()) -> dict[str, Any]:
    """CompareExps: the compare document of 2 to `MAX_EXPERIMENTS` experiments (docs/compare.md).

    Args:
        exp_ids: distinct experiment ids, in the order to show.
        baseline: the experiment the changes are measured against, one of `exp_ids` (default
            the first); the document lists it first.
        plugins: only these plugin sections (`bench-summary`, `command/<name>`); empty: all.
        metrics: only the metric paths matching one of these patterns (`plugins.gate`); empty:
            all. The gate sees every metric whatever the filters.
        fail_on: gate conditions (`plugins.gate`), at most `MAX_CONDITIONS`.

    Raises:
        ValidationFailed: keyed `ids` (count, repeats), `baseline`, `plugin`, `metric` or
            `fail_on`, each naming the fix.
        NotFound: an id names no experiment, as reading it answers.
    """
    conditions = _conditions(list(fail_on))
    plugins = _check_filters("plugin", list(plugins))
    patterns = _check_filters("metric", list(metrics))
    if baseline is not None and baseline not in exp_ids:
        _order(exp_ids, baseline)  # raises, before any read
    rows = exp_diff_rows(exp_ids=exp_ids, max_experiments=MAX_EXPERIMENTS)
    order = _order([row["id"] for row in rows], baseline)
    by_id = {row["id"]: row for row in rows}
    rows = [by_id[i] for i in order]
    now = timezone.now()
    diff = diff_experiments(rows, now=now, max_experiments=MAX_EXPERIMENTS)
    wanted = set(plugins) | {c.plugin for c in conditions} if plugins else None
    chosen = _chosen_analyses(order, sorted(wanted) if wanted is not None else None)
    rules = metric_rules()
    sections, extracted = [], {}
    for name in sorted(chosen, key=lambda n: (n.startswith(COMMAND_SECTION), n)):
        section, outs = _section(name, order, chosen[name], rules.get(name, ()), patterns)
        extracted[name] = outs
        if not plugins or name in plugins:
            sections.append(section)
    document = {"baseline": order[0], "experiments": _experiments(rows, now),
                "config_format": diff["config_format"], "differences": diff["differences"],
                "config_text_diffs": diff["config_text_diffs"], "plugins": sections,
                "filters": {"plugin": plugins, "metric": patterns},
                "gate": _gate(conditions, order, extracted) if conditions else None}
    return document
