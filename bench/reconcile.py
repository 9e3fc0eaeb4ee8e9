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

With `--server-process` the server runs in a process of its own (`bench/server_process.py`)
and the database is seeded by another child, so the figures are the controller's alone and the
server's beside them: its CPU seconds in the tick, its RSS before the tick, its peak during it
and its RSS after it (what it keeps). `--terminal N` adds N Succeeded experiments (each with
its 2 jobs and artifact) that no tick reads, so the cost can be compared at the same number of
open jobs in a larger database.

    .venv/bin/python bench/reconcile.py [--sizes 1000 10000] [--server-process] [--terminal N]
"""
from __future__ import annotations

import argparse
import collections
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.server_process import figures_of, reset_peak  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--server-process", action="store_true",
                        help="run the gRPC server (and the seeding) in processes of their own")
    parser.add_argument("--terminal", type=int, default=0,
                        help="also seed this many Succeeded experiments (2 jobs each)")
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)  # the seeding child
    args = parser.parse_args()
    if args.seed is not None:
        _setup(os.environ["FALCON_VAR_DIR"])
        _seed(args.seed, args.terminal)
        return
    tmp = Path(tempfile.mkdtemp(prefix="falcon-bench-"))
    _setup(tmp)
    import grpc
    from django.conf import settings

    from controllers.exp_controller import ExpController
    from controllers.grpc_client import GrpcFalconAPI
    from falcon_site.grpc.server import CHANNEL_OPTIONS, build_server
    from falcon_site.grpc.testing import channel_to

    from bench.server_process import ServerProcess

    calls: collections.Counter = collections.Counter()

    class Counter(grpc.UnaryUnaryClientInterceptor):
        def intercept_unary_unary(self, continuation, details, request):
            calls[details.method.rsplit("/", 1)[-1]] += 1
            return continuation(details, request)

    print(f"database: {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}, "
          f"server {'in a process of its own' if args.server_process else 'in this process'}"
          f", {args.terminal} terminal experiments besides")
    print(f"{'jobs':>7} {'tick':>7} {'seconds':>8} {'cpu s':>6} {'rss MiB':>7} {'peak MiB':>8} "
          + (f"{'srv cpu':>7} {'srv rss':>7} {'srv peak':>8} {'srv after':>9} {'anon':>5} "
             f"{'file':>5} "
             if args.server_process else "")
          + f"{'calls':>6}  calls by method")
    for size in args.sizes:
        if args.server_process:
            subprocess.run([sys.executable, __file__, "--seed", str(size), "--terminal",
                            str(args.terminal)], check=True, env=os.environ)
            server = ServerProcess(workers=4)
            channel = grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS)
        else:
            _seed(size, args.terminal)
            server = build_server("127.0.0.1:0", max_workers=4)
            server.start()
            channel = channel_to(server)
        api = GrpcFalconAPI("unused", settings.FALCON_INTERNAL_TOKEN, timeout=120,
                            channel=grpc.intercept_channel(channel, Counter()))
        controller = ExpController(api, has_files=lambda url: True)
        gc.collect()
        try:
            for label in ("first", "steady", "steady"):
                calls.clear()
                reset_peak()
                before = figures_of()
                if args.server_process:
                    server.reset_peak()
                    srv_before = server.figures()
                started = time.perf_counter()
                stats = controller.tick()
                elapsed = time.perf_counter() - started
                after = figures_of()
                assert stats.failed == 0, stats.errors
                by_method = ", ".join(f"{m} {n}" for m, n in sorted(calls.items()))
                srv = ""
                if args.server_process:
                    s = server.figures()
                    srv = (f"{s.cpu_s - srv_before.cpu_s:>7.2f} {srv_before.rss_mib:>7.0f} "
                           f"{s.peak_mib:>8.0f} {s.rss_mib:>9.0f} {s.anon_mib:>5.0f} "
                           f"{s.file_mib:>5.0f} ")
                print(f"{size:>7} {label:>7} {elapsed:>8.2f} {after.cpu_s - before.cpu_s:>6.2f} "
                      f"{before.rss_mib:>7.0f} {after.peak_mib:>8.0f} {srv}"
                      f"{sum(calls.values()):>6}  {by_method}", flush=True)
        finally:
            api.close()
            if args.server_process:
                server.close()
            else:
                server.stop(grace=0)


def _setup(tmp) -> None:
    """Django on the benchmark's database (a fresh SQLite file in `tmp`, or DATABASE_URL)."""
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{Path(tmp) / 'bench.sqlite3'}")
    os.environ["FALCON_VAR_DIR"] = str(tmp)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "falcon_site.settings")
    os.environ["FALCON_LOG_LEVEL"] = "ERROR"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _seed(size: int, terminal: int) -> None:
    """Replace every experiment by `size // 2` Created experiments of 2 Running jobs each (and
    `terminal` Succeeded experiments of 2 Succeeded jobs), each with an artifact; in chunks of
    10,000 experiments, so that seeding a million holds a chunk at a time."""
    from accounts.models import User
    from artifacts.models import Artifact
    from core.domain.statuses import ExpStatus, JobStatus
    from experiments.models import Experiment
    from jobs.models import Job

    Experiment.objects.all().delete()
    user, _ = User.objects.get_or_create(user_id="bench", defaults={"email": "b@example.com"})
    spec = {"command": "true", "replica": 1, "envs": {}}
    todo = [(ExpStatus.SUCCEEDED, JobStatus.SUCCEEDED, terminal),
            (ExpStatus.CREATED, JobStatus.RUNNING, size // 2)]
    done = 0
    for exp_status, job_status, count in todo:
        for first in range(0, count, 10000):
            exps = Experiment.objects.bulk_create(
                Experiment(name=f"bench-{done + i}", creator=user, cluster_name="local",
                           exp_type="benchmark", role_to_task_spec={"a": spec, "b": spec},
                           status=exp_status, config="x: 1\n",
                           artifact_path=f"file:///tmp/bench/{done + i}")
                for i in range(min(10000, count - first)))
            names = [e.name for e in exps]
            exps = list(Experiment.objects.filter(name__in=names).order_by("id"))
            Job.objects.bulk_create(
                Job(experiment=e, cluster_name="local", exp_type="benchmark", role=role,
                    task_spec=spec, status=job_status) for e in exps for role in ("a", "b"))
            Artifact.objects.bulk_create(
                Artifact(experiment=e, path=e.artifact_path, artifact_type="benchmark")
                for e in exps)
            done += len(exps)


if __name__ == "__main__":
    main()
