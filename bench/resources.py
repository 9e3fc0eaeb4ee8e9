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

The API server side is an in-memory `FalconAPI` (the gRPC API is measured elsewhere), so the
figures are the cluster side of a tick: wall time, Kubernetes API requests, API-server writes.
This is a measurement, not a test: timings depend on the machine, so no test asserts them.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "falcon_site.settings")

import django  # noqa: E402

django.setup()

from controllers.contract import JobView, ListFilter  # noqa: E402
from controllers.cluster_backends.kubernetes import (  # noqa: E402
    POD_PENDING, KubernetesBackend, KubernetesClusterConfig,
)
from controllers.kubeclient import KubeConnection  # noqa: E402
from controllers.resource_manager import ResourceManager  # noqa: E402
from controllers.tests.fake_k8s import FakeKube  # noqa: E402
from core.statuses import ExpStatus, JobStatus  # noqa: E402

NS = "falcon-jobs"
CLUSTER = "k8s-bench"


class MemoryAPI:
    """The two FalconAPI calls the resource manager makes, in memory."""

    def __init__(self, jobs: list[JobView]):
        self.jobs = {j.id: j for j in jobs}
        self.writes = 0

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


def populate(fake: FakeKube, backend: KubernetesBackend, n: int, *, pending: bool):
    views = []
    for i in range(1, n + 1):
        view = JobView(id=i, exp_id=i, exp_name=f"bench-{i}", exp_status=ExpStatus.RUNNING,
                       role="main", cluster_name=CLUSTER, exp_type="benchmark",
                       task_spec={"command": "sleep 1", "replica": 1, "image": "busybox:1",
                                  "envs": {}}, artifact_path=f"gs://b/{i}", config="",
                       status=JobStatus.PENDING if pending else JobStatus.RUNNING)
        name = backend.cluster_job_name(view)
        job = backend.api.sanitize_for_serialization(backend.build_job(view, name))
        job["status"] = ({"active": 1, "ready": 0} if pending else {"active": 1, "ready": 1})
        fake.put_object("jobs", NS, job)
        if pending:
            fake.put_pod(NS, name, 0, {"phase": POD_PENDING, "containerStatuses": [{
                "name": "main", "image": "busybox:1", "imageID": "", "ready": False,
                "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff",
                                                         "message": "Back-off pulling"}}}]})
        views.append(replace(view, cluster_job_name=name,
                             message="" if pending else "1/1 pods ready",
                             reason="" if pending else "AllReplicasReady"))
    return views


def measure(n: int, *, pending: bool, watch: bool) -> dict:
    """Tick twice over `n` jobs; return the figures of both ticks.

    The first tick fills the caches (with `watch`: one paged LIST of Jobs and one of Pods,
    then a WATCH each) and, for pending jobs, records each job's reason; the second is the
    tick every interval runs from then on.
    """
    fake = FakeKube().serve()
    backend = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            conn = KubeConnection(kubeconfig=str(fake.kubeconfig(Path(tmp) / "kubeconfig")),
                                  request_timeout=30, call_deadline=30)
            backend = KubernetesBackend(CLUSTER, KubernetesClusterConfig(
                namespace=NS, connection=conn, watch=watch))
            views = populate(fake, backend, n, pending=pending)
            api = MemoryAPI(views)
            manager = ResourceManager(api, {CLUSTER: backend})
            out = {"jobs": n, "tick": "pending" if pending else "steady",
                   "mode": "watch" if watch else "list"}
            for label in ("first", "next"):
                fake.reset_requests()
                calls_before, writes_before = backend.caller.calls, api.writes
                started = time.perf_counter()
                stats = manager.tick()
                wall = time.perf_counter() - started
                assert not stats.errors, stats.errors[:3]
                assert stats.deleted == 0
                out[label] = {"wall_s": wall, "calls": backend.caller.calls - calls_before,
                              "job_lists": fake.count("GET", "jobs"),
                              "pod_lists": fake.count("GET", "pods"),
                              "api_writes": api.writes - writes_before}
            return out
    finally:
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
    args = parser.parse_args()
    print("first = the tick that fills the caches (and records pending reasons); next = every "
          "tick after it.\nk8s calls = requests this client sent in the tick (WATCH requests "
          "opened included).")
    print(f"{'jobs':>6} {'tick':>8} {'mode':>6} {'first s':>8} {'calls':>6} "
          f"{'next s':>7} {'calls':>6} {'Job GETs':>9} {'Pod GETs':>9} {'API writes':>11}")
    for n in args.jobs:
        for pending in (False, True):
            for mode in args.modes:
                r = measure(n, pending=pending, watch=mode == "watch")
                first, nxt = r["first"], r["next"]
                print(f"{r['jobs']:>6} {r['tick']:>8} {r['mode']:>6} {first['wall_s']:>8.2f} "
                      f"{first['calls']:>6} {nxt['wall_s']:>7.2f} {nxt['calls']:>6} "
                      f"{nxt['job_lists']:>9} {nxt['pod_lists']:>9} "
                      f"{first['api_writes'] + nxt['api_writes']:>11}", flush=True)


if __name__ == "__main__":
    main()
