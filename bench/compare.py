"""Measure CompareExps (`GET /api/v1/exps/compare`): 10 experiments with 3 analyses each, one client.

Run from the repository root:

    .venv/bin/python bench/compare.py [--n 100000] [--mariadb [URL]] [--exps 10] [--requests 50]

What it does, in order:

1. makes a FRESH database (an SQLite file in a temporary folder, or with `--mariadb` a uniquely
   named MariaDB database, dropped at the end), runs `manage.py prepare` and `migrate`, and
   inserts N experiments with bulk inserts (`bench/api.py`'s `seed`: one job and one artifact
   each, configs of about 1 KiB);
2. picks `--exps` of them spread over the table, and gives each three succeeded analyses
   (bulk-inserted records) whose results are the real plugins' output: bench-summary over a
   JSONL of 200 steps (its figures differing per experiment), trace-summary over the JAX
   profile fixture and hlo-stats over the JAX HLO fixture (`plugins/tests/fixtures`), each
   run once as a process and its result file copied into every analysis' store folder;
3. starts the API under gunicorn (one sync worker, `falcon_site.wsgi`) and sends the compare
   of those experiments, with a gate condition, from ONE client, one request after the other:
   `--warmup` requests, then `--requests` measured ones;
4. prints the document's size (metrics, cells, bytes), the p50/p95/max latency in
   milliseconds, the first request's (before the worker has the configs parsed:
   `experiments.diff` keeps parsed configs by their text) and whether p50 meets the target
   (300 ms, issue 27).

A measurement, not a test: timings depend on the machine, so no test asserts them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import (GUNICORN, PYTHON, USERS, Database, free_port, percentile,  # noqa: E402
                       run_manage, seed, wait_ready)

FIXTURES = ROOT / "plugins" / "tests" / "fixtures" / "jax-mlp-cpu"
TARGET_MS = 300.0
PLUGINS = ("bench-summary", "trace-summary", "hlo-stats")


def plugin_results(tmp: Path, count: int) -> dict[str, list[Path]]:
    """Run each plugin as a process: bench-summary once per experiment (its figures differ),
    trace-summary and hlo-stats once; return the result files per plugin."""
    out: dict[str, list[Path]] = {name: [] for name in PLUGINS}
    bin_dir = ROOT / "plugins" / "bin"
    env = {**os.environ, "PATH": f"{Path(PYTHON).parent}{os.pathsep}{os.environ['PATH']}"}

    def run(name: str, source: Path, result: Path) -> None:
        subprocess.run([str(bin_dir / name), "--input", str(source), "--output", str(result)],
                       check=True, env=env, stderr=subprocess.DEVNULL)

    for i in range(count):
        rows = tmp / f"bench-{i}"
        rows.mkdir()
        with open(rows / "results.jsonl", "w") as f:
            for step in range(200):
                f.write(json.dumps({"step": step, "results": [
                    {"gflops": 100.0 - i + step % 7, "latency_ms": 10.0 + i * 0.1},
                    {"gflops": 50.0 - i, "latency_ms": 20.0}]}) + "\n")
        result = tmp / f"bench-{i}.jsonl"
        run("bench-summary", rows, result)
        out["bench-summary"].append(result)
    run("trace-summary", FIXTURES / "profile", tmp / "trace.jsonl")
    run("hlo-stats", FIXTURES / "hlo", tmp / "hlo.jsonl")
    out["trace-summary"] = [tmp / "trace.jsonl"] * count
    out["hlo-stats"] = [tmp / "hlo.jsonl"] * count
    return out


def add_analyses(exp_ids: list[int], results: dict[str, list[Path]], root: str) -> None:
    """Insert three succeeded analyses per experiment (bulk) and put their result files where
    their `result_path` says."""
    from django.utils import timezone

    from analysis.models import AnalysisRecord, new_analysis_id
    from analysis.outputs import results_url
    from analysis.services import result_path_for
    from artifacts.models import Artifact
    from artifacts.store import local_path
    from experiments.models import Experiment

    exps = Experiment.objects.in_bulk(exp_ids)
    artifacts = {a.experiment_id: a.pk for a in Artifact.objects.filter(experiment_id__in=exp_ids)}
    now = timezone.now()
    records = []
    for index, exp_id in enumerate(exp_ids):
        for plugin in PLUGINS:
            analysis_id = new_analysis_id()
            record = AnalysisRecord(
                analysis_id=analysis_id, name=plugin, experiment_id=exp_id,
                artifact_id=artifacts[exp_id], creator_id=exps[exp_id].creator_id,
                analysis_type="offline", plugin_name=plugin, status="succeeded",
                result_path=result_path_for(result_root=root, exp_id=exp_id,
                                            analysis_id=analysis_id),
                started_at=now, finished_at=now, dedupe_key=f"{artifacts[exp_id]}/{plugin}")
            records.append(record)
            target = local_path(results_url(record))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(results[plugin][index], target)
    AnalysisRecord.objects.bulk_create(records)


def main() -> None:
    """Parse the arguments, seed, start the server, measure, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="experiments to insert")
    parser.add_argument("--mariadb", nargs="?", const="mysql://root@127.0.0.1:3306",
                        default=None, help="use a fresh database on this MariaDB server")
    parser.add_argument("--exps", type=int, default=10, help="experiments compared (2 to 20)")
    parser.add_argument("--requests", type=int, default=50, help="measured requests")
    parser.add_argument("--warmup", type=int, default=5, help="requests before measuring")
    args = parser.parse_args()
    if not 2 <= args.exps <= 20 or args.exps > args.n:
        parser.error(f"--exps must be from 2 to 20 and at most --n; got {args.exps}")
    if args.requests < 1 or args.warmup < 0:
        parser.error("--requests must be at least 1 and --warmup at least 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="falcon-bench-compare-"))
    db = Database(tmp, args.mariadb)
    root = (tmp / "store").as_uri()
    env = {**os.environ, "FALCON_VAR_DIR": str(tmp), "DATABASE_URL": db.url,
           "FALCON_AUTH_MODE": "local", "DJANGO_SETTINGS_MODULE": "falcon_site.settings",
           "FALCON_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT),
           "FALCON_ARTIFACT_ROOT": root, "FALCON_ANALYSIS_ROOT": root}
    server = None
    try:
        db.create()
        run_manage(env, "prepare")
        run_manage(env, "migrate")
        os.environ.update(env)
        t0 = time.monotonic()
        emails = seed(args.n)
        print(f"# {'MariaDB' if args.mariadb else 'SQLite'}: {args.n} experiments inserted in "
              f"{time.monotonic() - t0:.1f} s", flush=True)
        from experiments.models import Experiment

        all_ids = list(Experiment.objects.order_by("id").values_list("id", flat=True))
        step = len(all_ids) // args.exps
        exp_ids = [all_ids[i * step] for i in range(args.exps)]
        t0 = time.monotonic()
        add_analyses(exp_ids, plugin_results(tmp, args.exps), root)
        print(f"# {args.exps} experiments x {len(PLUGINS)} analyses (real plugin results) "
              f"added in {time.monotonic() - t0:.1f} s", flush=True)
        from django.db import connection
        connection.close()
        from accounts.issuer import local_issuer
        token = local_issuer().issue(emails[USERS[0]], ttl_seconds=3600).token

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = tmp / "gunicorn.log"
        with open(log, "w") as log_file:
            server = subprocess.Popen([GUNICORN, "falcon_site.wsgi", "--bind",
                                       f"127.0.0.1:{port}", "--workers", "1", "--timeout", "60"],
                                      cwd=ROOT, env=env, stdout=log_file,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        wait_ready(base, server, log)
        params = [("ids", ",".join(map(str, exp_ids))),
                  ("fail_on", "bench-summary:results.gflops.mean < -5%")]
        times: list[float] = []
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"},
                          timeout=60) as client:
            for i in range(args.warmup + args.requests):
                t0 = time.perf_counter()
                resp = client.get("/api/v1/exps/compare", params=params)
                elapsed = time.perf_counter() - t0
                resp.raise_for_status()
                if i == 0:
                    first = elapsed
                if i >= args.warmup:
                    times.append(elapsed)
        doc = resp.json()
        metrics = sum(len(s["metrics"]) for s in doc["plugins"])
        print(f"# document: {len(doc['experiments'])} experiments, {len(doc['plugins'])} "
              f"plugins, {metrics} metrics, {metrics * len(doc['experiments'])} cells, "
              f"{len(doc['differences'])} differences, {len(resp.content):,} bytes; "
              f"gate failed: {doc['gate']['failed']}", flush=True)
        p50 = percentile(times, 50)
        print(f"{'operation':<28} {'requests':>8} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
        print(f"{'compare ' + str(args.exps) + ' x 3 analyses':<28} {len(times):>8} {p50:>8.1f} "
              f"{percentile(times, 95):>8.1f} {max(times) * 1000:>8.1f}")
        print(f"# the first request (configs not yet parsed by this worker): "
              f"{first * 1000:.1f} ms")
        print(f"# target p50 < {TARGET_MS:.0f} ms: {'met' if p50 < TARGET_MS else 'NOT met'} "
              f"({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        db.drop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
