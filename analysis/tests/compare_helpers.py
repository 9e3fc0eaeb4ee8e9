"""Experiments with real analyses for the compare tests: benchmark rows written as JSONL, the
real bench-summary plugin run over them, its result stored where the analysis' `result_path`
says, and the record moved pending -> running -> succeeded through its service."""
from __future__ import annotations

import json
from pathlib import Path

from analysis.models import AnalysisRecord
from analysis.outputs import results_url
from analysis.services import analysis_record_create, analysis_record_update
from analysis.tests.factories import finish_exp
from artifacts.store import local_path
from experiments.services import exp_create
from experiments.tests.factories import task_spec
from plugins import bench_summary

BENCH_CONFIG = "model: llama-8b\ndtype: bfloat16\nbatch: 32\n"


def bench_rows(gflops: list[float], latency_ms: list[float] | None = None) -> list[dict]:
    """Benchmark result rows as a benchmark script writes them: one per step."""
    latency_ms = latency_ms or [10.0] * len(gflops)
    return [{"step": i, "results": [{"gflops": g, "latency_ms": lat}]}
            for i, (g, lat) in enumerate(zip(gflops, latency_ms))]


def make_bench_exp(user, *, name: str = "bench", config: str = BENCH_CONFIG,
                   cloned_from: int | None = None, labels: dict | None = None):
    """A Succeeded benchmark experiment (CreateExp, then its state machines)."""
    exp = exp_create(creator=user, name=name, cluster_name="local", exp_type="benchmark",
                     role_to_task_spec={"main": task_spec(command="python bench.py")},
                     config=config, labels=labels, cloned_from=cloned_from)
    return finish_exp(exp)


def succeed(record: AnalysisRecord) -> AnalysisRecord:
    """pending -> running -> succeeded, as the analyzer controller reports it."""
    analysis_record_update(record.analysis_id, {"status": "running"})
    fresh, _ = analysis_record_update(record.analysis_id, {"status": "succeeded"})
    return fresh


def run_bench_summary(exp, rows: list[dict], *, work: Path, result_root: str,
                      lines: list[str] | None = None) -> AnalysisRecord:
    """Analyse `exp` with the real bench-summary plugin over `rows` (JSONL), or over raw
    `lines` when given; returns the succeeded record."""
    record = analysis_record_create(exp_id=exp.pk, analysis_type="online",
                                    plugin_name="bench-summary", creator_email=exp.creator.email,
                                    result_root=result_root)
    inputs = work / f"input-{record.analysis_id}"
    inputs.mkdir(parents=True)
    text = "\n".join(lines) if lines is not None else "\n".join(json.dumps(r) for r in rows)
    (inputs / "results.jsonl").write_text(text + "\n", encoding="utf-8")
    out = local_path(results_url(record))
    out.parent.mkdir(parents=True, exist_ok=True)
    code = bench_summary.main(["--input", str(inputs), "--output", str(out)])
    assert code == 0, f"bench-summary exited {code}"
    return succeed(record)


def write_results(exp, records: list[dict], *, result_root: str, name: str = "mine"
                  ) -> AnalysisRecord:
    """A succeeded command analysis whose results file holds `records` (a user's own JSONL)."""
    record = analysis_record_create(exp_id=exp.pk, analysis_type="online", command="python x.py",
                                    name=name, creator_email=exp.creator.email,
                                    result_root=result_root)
    out = local_path(results_url(record))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return succeed(record)
