"""Measure one resource-manager tick against the fake Kubernetes API with 1,000 and 10,000 jobs.

Run from the repository root:  .venv/bin/python bench/resources.py [--jobs 1000 10000]

For each size N the fake API (controllers/tests/fake_k8s.py, loopback HTTP) holds N Falcon Jobs'
`batch/v1` Jobs, the real `kubernetes` client reads them through `KubernetesBackend`, and the
real `ResourceManager` reconciles them. Two situations per size, each in two modes (`watch`:
the list-then-watch caches, a cluster's default; `list`: `watch: false`, paged LISTs every
tick), each ticked twice (the first tick fills the caches, the next is every later tick):

- "steady": every Job running with all pods ready and already recorded as Running: the tick
  only reads and writes nothing;
- "pending": every Job pending with its Pods waiting (ImagePullBackOff): the tick also reads
  the Pods and the first tick records a message per job.

The fake API server runs in a process of its own (`--fake-in-process` puts it back in this
one): a real API server is another machine, and in this process the fake's own work (sorting,
copying and encoding 20,000 objects per LIST page) competed with the resource manager for the
interpreter and was counted in its tick. By default the API server side of Falcon is an
in-memory `FalconAPI`, so the figures are the cluster side of a tick: wall time, CPU time of
this process, Kubernetes API requests, API-server writes and write calls (UpdateJobStatuses,
1,000 items each). With `--grpc` it is the real gRPC API server, in this process, on a fresh
SQLite database (or `DATABASE_URL`) holding the same jobs: the tick then includes the API
server's reads and guarded writes (its CPU is counted with this process's); with
`--server-process` the server runs in a process of its own and is measured apart, so this
process's figures are the resource manager's alone. With `--grpc` the fake's process also
seeds the database, so the process measured never holds the benchmark's `JobView`s (a
resource manager never holds more than a page of them). The collector's thresholds are the
controllers' (`controllers.runner.GC_THRESHOLDS`, as `runcontroller` sets them) unless
`--default-gc`; `--list-page-size` sets the cluster's `list_page_size`.
This is a measurement, not a test: timings depend on the machine, so no test asserts them.
"""
from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "falcon_site.settings")
if "--grpc" in sys.argv[1:] and "FALCON_BENCH_DIR" not in os.environ:
    # Before Django is set up: the API server gets a database of its own, never the dev one;
    # the processes this one starts (the fake's, which seeds it) inherit the same.
    _TMP = Path(tempfile.mkdtemp(prefix="falcon-bench-"))
    os.environ["FALCON_BENCH_DIR"] = str(_TMP)
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{_TMP / 'bench.sqlite3'}")
    os.environ["FALCON_VAR_DIR"] = str(_TMP)
    os.environ["FALCON_LOG_LEVEL"] = "ERROR"

import django  # noqa: E402

django.setup()

from bench.server_process import figures_of, reset_peak  # noqa: E402

from controllers.contract import ItemResult, JobView, ListFilter  # noqa: E402
from controllers.cluster_backends.kubernetes import (  # noqa: E402
    POD_PENDING, KubernetesBackend, KubernetesClusterConfig,
)
from controllers.kubeclient import KubeConnection  # noqa: E402
from controllers.resource_manager import ResourceManager  # noqa: E402
from controllers.runner import tune_gc  # noqa: E402
from controllers.tests.fake_k8s import FakeKube  # noqa: E402
from core.domain.statuses import ExpStatus, JobStatus  # noqa: E402
from core.domain.taskspec import TaskSpec  # noqa: E402

NS = "falcon-jobs"
CLUSTER = "k8s-bench"


class MemoryAPI:
    """The FalconAPI calls the resource manager makes, in memory."""

    def __init__(self, jobs: list[JobView]):
        self.jobs = {j.id: j for j in jobs}
        self.writes = 0
        self.write_calls = 0

    def update_job_statuses(self, updates):
        self.write_calls += 1
        results = []
        for u in updates:
            self.update_job_status(job_id=u.job_id, status=u.status, reason=u.reason,
                                   message=u.message, cluster_job_name=u.cluster_job_name)
            results.append(ItemResult(id=u.job_id, changed=True))
        return results

    def list_jobs(self, flt: ListFilter) -> list[JobView]:
        return [j for j in self.jobs.values() if j.status in flt.statuses]

    def update_job_status(self, *, job_id, status, reason=None, message=None,
                          cluster_job_name=None) -> JobView:
        self.writes += 1
        job = self.jobs[job_id]
        self.jobs[job_id] = replace(job, status=status, reason=reason or job.reason,
                                    message=message or job.message,
                                    cluster_job_name=cluster_job_name or job.cluster_job_name)
        return self.jobs[job_id]


class GrpcAPI:
    """The real gRPC API server (in this process) over a database holding `views`' jobs
    (None: a database the fake's process seeded).

    Attributes:
        writes: job write items sent; write_calls: UpdateJobStatus(es) calls;
        calls: every RPC by method name.
    """

    def __init__(self, views: list[JobView] | None, *, server_process: bool = False):
        import collections

        import grpc
        from django.conf import settings

        from controllers.grpc_client import GrpcFalconAPI
        from falcon_site.grpc.server import CHANNEL_OPTIONS, build_server
        from falcon_site.grpc.testing import channel_to

        self.server_process = None
        if views is None:
            # The fake's process seeded the database (`FakeProcess(seed=True)`) and made the
            # local state's files: read the internal token from them.
            from falcon_site.startup import prepare_local_state

            prepare_local_state()
        elif server_process:
            # Seeding builds every row in memory: in a child, so this process holds none of it.
            ctx = multiprocessing.get_context("spawn")
            seeder = ctx.Process(target=_seed, args=(views,))
            seeder.start()
            seeder.join()
            if seeder.exitcode != 0:
                raise RuntimeError(f"seeding failed (exit {seeder.exitcode})")
        else:
            _seed(views)
        self.calls: collections.Counter = collections.Counter()
        calls = self.calls

        class Count(grpc.UnaryUnaryClientInterceptor):
            def intercept_unary_unary(self, continuation, details, request):
                calls[details.method.rsplit("/", 1)[-1]] += 1
                return continuation(details, request)

        if server_process:
            from bench.server_process import ServerProcess

            self.server = None
            self.server_process = ServerProcess(workers=4)
            channel = grpc.insecure_channel(self.server_process.target, options=CHANNEL_OPTIONS)
        else:
            self.server = build_server("127.0.0.1:0", max_workers=4)
            self.server.start()
            channel = channel_to(self.server)
        self.client = GrpcFalconAPI("unused", settings.FALCON_INTERNAL_TOKEN, timeout=120,
                                    channel=grpc.intercept_channel(channel, Count()))
        self.writes = 0

    @property
    def write_calls(self) -> int:
        return self.calls["UpdateJobStatuses"] + self.calls["UpdateJobStatus"]

    def list_job_states(self, flt):
        return self.client.list_job_states(flt)

    def list_job_state_pages(self, flt):
        return self.client.list_job_state_pages(flt)

    def update_job_statuses(self, updates):
        self.writes += len(updates)
        return self.client.update_job_statuses(updates)

    def close(self) -> None:
        self.client.close()
        if self.server_process is not None:
            self.server_process.close()
        else:
            self.server.stop(grace=0)


def _seed(views: list[JobView]) -> None:
    """Migrate the database and replace every experiment by one Running experiment per job of
    `views` (in a process of its own: this one's connections are closed after)."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from accounts.models import User
    from experiments.models import Experiment
    from jobs.models import Job

    call_command("migrate", verbosity=0)
    Experiment.objects.all().delete()
    user, _ = User.objects.get_or_create(user_id="bench", defaults={"email": "b@example.com"})
    spec = views[0].task_spec.to_json()
    for first in range(0, len(views), 10000):
        chunk = views[first:first + 10000]
        Experiment.objects.bulk_create(
            Experiment(id=v.exp_id, name=v.exp_name, creator=user, cluster_name=CLUSTER,
                       exp_type=v.exp_type, role_to_task_spec={v.role: spec},
                       status=ExpStatus.RUNNING, artifact_path=v.artifact_path)
            for v in chunk)
        Job.objects.bulk_create(
            Job(id=v.id, experiment_id=v.exp_id, cluster_name=CLUSTER, exp_type=v.exp_type,
                role=v.role, task_spec=spec, artifact_path=v.artifact_path,
                status=v.status, reason=v.reason,
                message=v.message, cluster_job_name=v.cluster_job_name) for v in chunk)
    connections.close_all()


# An experiment's config as users write them (a model, data and optimizer section): about
# 1 KiB of YAML, injected into every Pod's environment as CUSTOM_CONFIG_KEY.
CONFIG = "".join(f"section_{s}:\n" + "".join(f"  key_{k}: value-{s}-{k}\n" for k in range(8))
                 for s in range(6))
RUNNING_POD = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
               "containerStatuses": [{
                   "name": "main", "image": "busybox:1", "imageID": "", "ready": True,
                   "restartCount": 0,
                   "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
WAITING_POD = {"phase": POD_PENDING, "containerStatuses": [{
    "name": "main", "image": "busybox:1", "imageID": "", "ready": False, "restartCount": 0,
    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling"}}}]}


def populate(fake: FakeKube, backend: KubernetesBackend, n: int, *, pending: bool):
    """Put `n` Falcon Jobs into `fake`, each with its Pod made from the Job's template as the
    Job controller makes it (the containers, their environment with the config): Running and
    ready, or waiting on its image when `pending`."""
    views = []
    for i in range(1, n + 1):
        view = JobView(id=i, exp_id=i, exp_name=f"bench-{i}", exp_status=ExpStatus.RUNNING,
                       role="main", cluster_name=CLUSTER, exp_type="benchmark",
                       task_spec=TaskSpec(command="sleep 1", image="busybox:1"),
                       artifact_path=f"gs://b/{i}", config=CONFIG,
                       status=JobStatus.PENDING if pending else JobStatus.RUNNING)
        name = backend.cluster_job_name(view)
        job = backend.api.sanitize_for_serialization(backend.build_job(view, name))
        job["status"] = ({"active": 1, "ready": 0} if pending else {"active": 1, "ready": 1})
        fake.put_object("jobs", NS, job)
        fake.spawn_pods(NS, name, status=WAITING_POD if pending else RUNNING_POD)
        views.append(replace(view, cluster_job_name=name,
                             message="" if pending else "1/1 pods ready",
                             reason="" if pending else "AllReplicasReady"))
    return views


class FakeProcess:
    """The fake API server in a child process, filled with `n` jobs; driven over a pipe.

    Args:
        n: the number of Falcon jobs (and Kubernetes Jobs).
        pending: every Job pending with a waiting Pod (else all running and ready).
        in_process: run the fake in this process instead (the former way of measuring).
        seed: the fake's process also seeds the API server's database with the jobs
            (`_seed`) and sends no views back: the process measured never holds the
            benchmark's 100,000 `JobView`s (which its heap kept after they were freed), as a
            resource manager never does (its API server holds the jobs).

    Attributes:
        url: the fake's base URL; views: the `JobView` of each job as the API returns it
            (None with `seed`).
    """

    def __init__(self, n: int, *, pending: bool, in_process: bool = False, seed: bool = False):
        self.fake = None
        if in_process:
            self.fake = FakeKube().serve()
            self.url, self.views = self.fake.url, _fill(self.fake, n, pending)
            if seed:
                _seed(self.views)
                self.views = None
            return
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve_fake, args=(child, n, pending, seed),
                                   daemon=True)
        self.process.start()
        self.url, self.views = self.conn.recv()

    def ask(self, *command):
        """Run `FakeKube.<command[0]>(*command[1:])` in the fake; return its answer."""
        if self.fake is not None:
            return getattr(self.fake, command[0])(*command[1:])
        self.conn.send(command)
        return self.conn.recv()

    def close(self) -> None:
        """Stop the fake (and its process)."""
        if self.fake is not None:
            self.fake.close()
            return
        self.conn.send(("close",))
        self.conn.recv()
        self.process.join(10)


def _fill(fake: FakeKube, n: int, pending: bool) -> list[JobView]:
    """Fill `fake` with `n` jobs (`populate`) through a backend of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = KubeConnection(kubeconfig=str(fake.kubeconfig(Path(tmp) / "kubeconfig")))
        backend = KubernetesBackend(CLUSTER, KubernetesClusterConfig(namespace=NS,
                                                                     connection=conn))
        backend.api  # noqa: B018  (read the kubeconfig while the file exists)
        return populate(fake, backend, n, pending=pending)


def _serve_fake(conn, n: int, pending: bool, seed: bool) -> None:
    """The child process: serve a filled fake (and seed the database with its jobs when
    `seed`), answer `FakeProcess.ask` until closed."""
    fake = FakeKube().serve()
    views = _fill(fake, n, pending)
    if seed:
        _seed(views)
        views = None
    conn.send((fake.url, views))
    while True:
        name, *args = conn.recv()
        answer = getattr(fake, name)(*args)
        conn.send(None if name == "close" else answer)
        if name == "close":
            return


def _kubeconfig(url: str, path: Path) -> Path:
    """Write a kubeconfig for the fake at `url` (as `FakeKube.kubeconfig`)."""
    import yaml

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "falcon", "user": {"token": "fake-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "falcon"}}]}))
    return path


def measure(n: int, *, pending: bool, watch: bool, fake_in_process: bool = False,
            grpc_api: bool = False, server_process: bool = False,
            list_page_size: int | None = None, profile: str | None = None) -> dict:
    """Tick twice over `n` jobs; return the figures of both ticks.

    The first tick fills the caches (with `watch`: one paged LIST of Jobs and one of Pods,
    then a WATCH each) and, for pending jobs, records each job's reason; the second is the
    tick every interval runs from then on. With `profile`, the last tick runs under cProfile
    and its statistics are written to that file (its CPU figure then includes the profiler's).
    """
    fake = FakeProcess(n, pending=pending, in_process=fake_in_process, seed=grpc_api)
    backend = api = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            conn = KubeConnection(kubeconfig=str(_kubeconfig(fake.url, Path(tmp) / "kc")),
                                  request_timeout=120, call_deadline=120)
            pages = {} if list_page_size is None else {"list_page_size": list_page_size}
            backend = KubernetesBackend(CLUSTER, KubernetesClusterConfig(
                namespace=NS, connection=conn, watch=watch, **pages))
            if grpc_api:
                api = GrpcAPI(None, server_process=server_process)  # seeded by the fake's
            else:
                api = MemoryAPI(fake.views)
            gc.collect()
            server = api.server_process if grpc_api else None
            manager = ResourceManager(api, {CLUSTER: backend})
            out = {"jobs": n, "tick": "pending" if pending else "steady",
                   "mode": "watch" if watch else "list"}
            for label in ("first", "next", "next2"):
                fake.ask("reset_requests")
                calls_before, writes_before = backend.caller.calls, api.writes
                write_calls_before = api.write_calls
                reset_peak()
                before = figures_of()
                if server is not None:
                    server.reset_peak()
                    srv_before = server.figures()
                profiler = None
                if profile and label == "next2":
                    import cProfile

                    profiler = cProfile.Profile(time.process_time)  # CPU, not wall
                    profiler.enable()
                started, cpu = time.perf_counter(), time.process_time()
                stats = manager.tick()
                wall, cpu = time.perf_counter() - started, time.process_time() - cpu
                if profiler is not None:
                    profiler.disable()
                    profiler.dump_stats(profile)
                after = figures_of()
                assert not stats.errors, stats.errors[:3]
                assert stats.deleted == 0
                if server is not None:
                    srv = server.figures()
                    out[label + "_server"] = {"cpu_s": srv.cpu_s - srv_before.cpu_s,
                                              "rss": srv_before.rss_mib, "peak": srv.peak_mib,
                                              "after": srv.rss_mib, "anon": srv.anon_mib,
                                              "file": srv.file_mib}
                out[label] = {"wall_s": wall, "cpu_s": cpu,
                              "rss": before.rss_mib, "peak": after.peak_mib,
                              "calls": backend.caller.calls - calls_before,
                              "job_lists": fake.ask("count", "GET", "jobs"),
                              "pod_lists": fake.ask("count", "GET", "pods"),
                              "api_writes": api.writes - writes_before,
                              "write_calls": api.write_calls - write_calls_before}
            return out
    finally:
        if isinstance(api, GrpcAPI):
            api.close()
        if backend is not None:
            backend.close()
        fake.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--modes", nargs="+", choices=("watch", "list"),
                        default=["watch", "list"],
                        help="watch: the list-then-watch caches (the default of a cluster); "
                        "list: `watch: false`, one paged LIST per tick")
    parser.add_argument("--fake-in-process", action="store_true",
                        help="run the fake API server in this process (as before: its work "
                        "is then counted in the tick)")
    parser.add_argument("--grpc", action="store_true",
                        help="the real gRPC API server (in this process, a fresh SQLite or "
                        "DATABASE_URL) instead of the in-memory one")
    parser.add_argument("--server-process", action="store_true",
                        help="with --grpc: the gRPC server (and the seeding) in processes of "
                        "their own, so that this process's figures are the resource manager's")
    parser.add_argument("--situations", nargs="+", choices=("steady", "pending"),
                        default=["steady", "pending"])
    parser.add_argument("--list-page-size", type=int, default=None,
                        help="the cluster's `list_page_size` (default: KubernetesClusterConfig's)")
    parser.add_argument("--default-gc", action="store_true",
                        help="keep CPython's collector thresholds (default: the controllers' "
                        "own, as runcontroller sets them: controllers.runner.GC_THRESHOLDS)")
    parser.add_argument("--profile", metavar="FILE", default=None,
                        help="run the last tick of each measure under cProfile and write its "
                        "statistics to FILE (read with `python -m pstats FILE`)")
    args = parser.parse_args()
    if args.server_process and not args.grpc:
        parser.error("--server-process goes with --grpc")
    if not args.default_gc:
        tune_gc()
    print("first = the tick that fills the caches (and records pending reasons); next = every "
          "tick after it (twice).\nk8s calls = requests this client sent in the tick (WATCH "
          "requests opened included); cpu = CPU seconds of this process in the tick; rss = its "
          "RSS before the tick, peak = its highest during it (MiB); srv = the gRPC server's "
          "process (--server-process): CPU in the tick, RSS before, peak, RSS after; API "
          "writes = job updates sent in the tick, write calls = the calls that carried them.")
    srv_head = (f" {'srv cpu':>7} {'srv rss':>7} {'srv peak':>8} {'srv after':>9} {'anon':>5} "
                f"{'file':>5}"
                if args.server_process else "")
    print(f"{'jobs':>6} {'tick':>8} {'mode':>6} {'which':>6} {'wall s':>7} {'cpu':>6} "
          f"{'calls':>6} {'rss':>5} {'peak':>5}{srv_head} {'API writes':>11} "
          f"{'write calls':>12}")
    for n in args.jobs:
        for situation in args.situations:
            for mode in args.modes:
                r = measure(n, pending=situation == "pending", watch=mode == "watch",
                            fake_in_process=args.fake_in_process, grpc_api=args.grpc,
                            server_process=args.server_process,
                            list_page_size=args.list_page_size, profile=args.profile)
                for label in ("first", "next", "next2"):
                    t = r[label]
                    srv = ""
                    if args.server_process:
                        v = r[label + "_server"]
                        srv = (f" {v['cpu_s']:>7.2f} {v['rss']:>7.0f} {v['peak']:>8.0f} "
                               f"{v['after']:>9.0f} {v['anon']:>5.0f} {v['file']:>5.0f}")
                    print(f"{r['jobs']:>6} {r['tick']:>8} {r['mode']:>6} {label:>6} "
                          f"{t['wall_s']:>7.2f} {t['cpu_s']:>6.2f} {t['calls']:>6} "
                          f"{t['rss']:>5.0f} {t['peak']:>5.0f}{srv} {t['api_writes']:>11} "
                          f"{t['write_calls']:>12}", flush=True)


if __name__ == "__main__":
    main()
