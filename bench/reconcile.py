"""Benchmark: one exp-controller tick with 1,000 and 10,000 non-terminal jobs.

Runs the real gRPC server in-process on a fresh SQLite database (or `DATABASE_URL`), fills it
with experiments of 2 Running jobs each, and times `ExpController.tick()` through the real
`GrpcFalconAPI`, counting gRPC calls with a client interceptor. Two ticks per size:
- "first": every experiment moves Created -> Running: the transitions go in UpdateExpStatuses
  calls of 1,000 items (each item a guarded transition on the server);
- "steady": nothing changed since, so the tick only reads.
The read is ListExpStates: one call per 5,000 experiments, each with its jobs and artifact.
Targets for 10,000 jobs: a first tick under 2 s, a steady tick under 2 s (the controller
interval); read calls = ceil(experiments / 5000), write calls = ceil(changes / 1000).
Besides wall seconds it prints the CPU seconds of the process (client and server together:
they share it), which another program's load on the machine changes less, and the process's
RSS before the tick and its peak during the tick (client and server together; the peak is
reset before each tick; the RSS before it includes what seeding, which builds every row in
memory, left in the heap, so the tick's own memory is the difference).

    .venv/bin/python bench/reconcile.py [--sizes 1000 10000]
"""
from __future__ import annotations

import argparse
import collections
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="falcon-bench-"))
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{tmp / 'bench.sqlite3'}")
    os.environ["FALCON_VAR_DIR"] = str(tmp)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "falcon_site.settings")
    os.environ["FALCON_LOG_LEVEL"] = "ERROR"
    import django

    django.setup()
    import grpc
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from accounts.models import User
    from artifacts.models import Artifact
    from controllers.exp_controller import ExpController
    from controllers.grpc_client import GrpcFalconAPI
    from core.domain.statuses import JobStatus
    from experiments.models import Experiment
    from falcon_site.grpc.server import build_server
    from falcon_site.grpc.testing import channel_to
    from jobs.models import Job

    calls: collections.Counter = collections.Counter()

    class Counter(grpc.UnaryUnaryClientInterceptor):
        def intercept_unary_unary(self, continuation, details, request):
            calls[details.method.rsplit("/", 1)[-1]] += 1
            return continuation(details, request)

    server = build_server("127.0.0.1:0", max_workers=4)
    server.start()
    api = GrpcFalconAPI("unused", settings.FALCON_INTERNAL_TOKEN, timeout=60,
                        channel=grpc.intercept_channel(channel_to(server), Counter()))
    controller = ExpController(api, has_files=lambda url: True)
    user, _ = User.objects.get_or_create(user_id="bench", defaults={"email": "b@example.com"})
    spec = {"command": "true", "replica": 1, "envs": {}}
    print(f"database: {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}")
    print(f"{'jobs':>7} {'tick':>7} {'seconds':>8} {'cpu s':>6} {'rss MiB':>7} {'peak MiB':>8} "
          f"{'calls':>6}  "
          "calls by method")
    try:
        for size in args.sizes:
            Experiment.objects.all().delete()
            exps = Experiment.objects.bulk_create(
                Experiment(name=f"bench-{i}", creator=user, cluster_name="local",
                           exp_type="benchmark", role_to_task_spec={"a": spec, "b": spec},
                           config="x: 1\n", artifact_path=f"file:///tmp/bench/{i}")
                for i in range(size // 2))
            exps = list(Experiment.objects.order_by("id"))
            Job.objects.bulk_create(
                Job(experiment=e, cluster_name="local", exp_type="benchmark", role=role,
                    task_spec=spec, status=JobStatus.RUNNING) for e in exps for role in ("a", "b"))
            Artifact.objects.bulk_create(
                Artifact(experiment=e, path=e.artifact_path, artifact_type="benchmark")
                for e in exps)
            del exps
            gc.collect()
            for label in ("first", "steady"):
                calls.clear()
                _reset_peak_rss()
                before = _rss_mib("VmRSS:")
                started, cpu = time.perf_counter(), time.process_time()
                stats = controller.tick()
                elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
                assert stats.failed == 0, stats.errors
                by_method = ", ".join(f"{m} {n}" for m, n in sorted(calls.items()))
                print(f"{size:>7} {label:>7} {elapsed:>8.2f} {cpu:>6.2f} {before:>7.0f} "
                      f"{_rss_mib('VmHWM:'):>8.0f} "
                      f"{sum(calls.values()):>6}  "
                      f"{by_method}")
    finally:
        api.close()
        server.stop(grace=0)


def _reset_peak_rss() -> None:
    """Reset the process's peak RSS (Linux: writing 5 to clear_refs resets VmHWM)."""
    Path("/proc/self/clear_refs").write_text("5")


def _rss_mib(field: str) -> float:
    """A field of /proc/self/status in MiB: `VmRSS:` (now) or `VmHWM:` (peak since reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return float("nan")


if __name__ == "__main__":
    main()
