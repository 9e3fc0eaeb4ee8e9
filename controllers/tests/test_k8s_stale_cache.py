"""A watch cache that trails the cluster never makes Falcon fail, delete or re-run healthy work.

The Jobs watch of the Kubernetes backend can lag behind the API server: a stream left silent
(a loaded API server, a dropped connection), a 410 Gone whose re-LIST keeps failing, the
re-LIST of 10,000 Jobs. A Job missing from such a cache is not missing from the cluster. Each
test drives the real `ResourceManager` through the in-process gRPC API server against the
loopback fake API server (real `kubernetes` client, list-then-watch caches), lags the Jobs
watch, creates an experiment meanwhile, and checks that its Job is never failed
`ClusterJobMissing` nor deleted, and that the job runs normally once the watch catches up
(docs/cluster-behaviours.md, CB-24).
"""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import falcon_api, grpc_server  # noqa: F401  (fixtures)
from jobs.models import Job

from controllers.tests.fake_k8s import fake_kube, kubeconfig  # noqa: F401  (fixtures)
from controllers.tests.test_k8s_cases import (  # noqa: F401  (fixtures)
    IMAGE,
    NS,
    k8s_clusters,
)
from controllers.tests.test_k8s_failure_kinds import fresh, rm, rm_clock, run_all  # noqa: F401
from core.testing import wait_until as poll_until

pytestmark = pytest.mark.django_db(transaction=True)

# How long a tick waits for its cache to catch up before it reads it as it is (the default is
# 1 s; shorter here so that every lagging tick of these tests is quick).
SYNC_WAIT = 0.2


def _relist(name, query) -> bool:
    """A watch cache's re-LIST of Jobs: not a WATCH, not the tick's one-item probe, not a GET."""
    return name is None and query.get("watch") not in ("true", "1") and query.get("limit") != "1"


def wait_until(check, what: str, timeout: float = 60.0) -> None:
    """Wait (with a deadline, not a fixed sleep) until `check()` is true."""
    poll_until(check, timeout=timeout, what=what)


def create_during_lag(mgr, fake, *, ticks: int = 3) -> Job:
    """Create an experiment while the Jobs cache lags; the manager submits it and ticks on.

    Returns the Falcon job, checked to be Pending with its Job never deleted nor failed.
    """
    exp = make_exp(name="lagging", cluster_name="k8s-a", image=IMAGE)
    job = Job.objects.get(experiment=exp)
    mgr.tick()
    job = fresh(job)
    assert job.status == "Pending" and job.cluster_job_name, (job.reason, job.message)
    assert fake.get("jobs", NS, job.cluster_job_name) is not None
    cache = mgr.backends["k8s-a"]._job_cache
    for _ in range(ticks):
        stats = mgr.tick()
        assert stats.errors == [], stats.errors
        job = fresh(job)
        assert job.cluster_job_name not in cache.items()  # the cache still lags
        assert (job.status, job.reason) != ("Failed", "ClusterJobMissing"), job.message
        assert job.status == "Pending", (job.status, job.reason, job.message)
    assert fake.count("DELETE", "jobs") == 0
    assert fake.get("jobs", NS, job.cluster_job_name) is not None
    assert fake.count("POST", "jobs") == 1  # never submitted twice either
    return job


def runs_to_the_end(mgr, fake, job: Job) -> None:
    """Once the cache caught up, the job goes Running then Succeeded as usual."""
    run_all(fake, job, 1)
    wait_until(lambda: (mgr.tick(), fresh(job).status)[1] == "Running", "Running")
    fake.set_job_status(NS, job.cluster_job_name, {
        "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    wait_until(lambda: (mgr.tick(), fresh(job).status)[1] == "Succeeded", "Succeeded")
    assert fake.count("DELETE", "jobs") == 0


def test_a_silent_watch_never_makes_a_fresh_job_missing(rm, fake_kube, k8s_clusters):
    k8s_clusters(cache_sync_wait=SYNC_WAIT)
    mgr = rm()
    mgr.tick()  # the caches are filled, the watches open
    release = fake_kube.stall_watches("jobs")
    try:
        job = create_during_lag(mgr, fake_kube)
    finally:
        release.set()
    runs_to_the_end(mgr, fake_kube, job)


def test_a_410_whose_relist_keeps_failing_never_makes_a_fresh_job_missing(rm, fake_kube,
                                                                          k8s_clusters):
    k8s_clusters(cache_sync_wait=SYNC_WAIT)
    mgr = rm()
    mgr.tick()
    failing = fake_kube.inject("GET", "jobs", status=500, times=10**6, where=_relist)
    fake_kube.expire_watches()  # 410 Gone: the cache must list again, and that fails
    wait_until(lambda: failing.times < 10**6, "the failing re-LIST")
    try:
        job = create_during_lag(mgr, fake_kube)
    finally:
        failing.times = 0
    runs_to_the_end(mgr, fake_kube, job)


def delete_by_hand(fake, name: str) -> None:
    """Delete Job `name` outside Falcon, finalizer and all (`kubectl patch` then delete)."""
    fake.set_finalizers("jobs", NS, name, [])
    with fake.lock:
        fake.delete("jobs", NS, name, "Background")


def test_a_job_deleted_while_the_watch_lags_is_missing_once_the_cache_caught_up(
        rm, fake_kube, k8s_clusters):
    """A Job this manager created stays known while the cache lags; its deletion is
    concluded from a cache that has caught up with it, never before."""
    k8s_clusters(cache_sync_wait=SYNC_WAIT)
    mgr = rm()
    mgr.tick()
    release = fake_kube.stall_watches("jobs")
    try:
        job = create_during_lag(mgr, fake_kube, ticks=1)
        delete_by_hand(fake_kube, job.cluster_job_name)
        mgr.tick()
        assert fresh(job).status == "Pending"
    finally:
        release.set()
    wait_until(lambda: (mgr.tick(), fresh(job).status)[1] == "Failed", "the missing Job")
    assert fresh(job).reason == "ClusterJobMissing", fresh(job).message


def test_a_lagging_cache_reads_jobs_it_lacks_directly(rm, fake_kube, k8s_clusters):
    """Jobs another replica created (a Lease handover) while this manager's watch is silent:
    read from the API server, the one that exists is Pending and the one deleted since is
    missing, in the first tick, without waiting for the watch."""
    k8s_clusters(cache_sync_wait=SYNC_WAIT)
    mgr = rm()
    mgr.tick()
    release = fake_kube.stall_watches("jobs")
    try:
        kept, lost = (Job.objects.get(experiment=make_exp(
            name=name, cluster_name="k8s-a", image=IMAGE)) for name in ("kept", "lost"))
        other = rm()
        other.tick()  # the other replica submits both and records their names
        kept, lost = fresh(kept), fresh(lost)
        assert kept.cluster_job_name and lost.cluster_job_name
        delete_by_hand(fake_kube, lost.cluster_job_name)
        fake_kube.reset_requests()
        mgr.tick()
        assert (fresh(kept).status, fresh(kept).reason) == ("Pending", "PodsStarting"), \
            fresh(kept).message
        assert (fresh(lost).status, fresh(lost).reason) == ("Failed", "ClusterJobMissing")
        reads = sorted(r.name for r in fake_kube.requests if r.method == "GET" and r.name)
        assert kept.cluster_job_name in reads and lost.cluster_job_name in reads
        assert fake_kube.get("jobs", NS, kept.cluster_job_name) is not None
    finally:
        release.set()


def test_a_watch_lagging_behind_a_relist_of_10000_jobs_never_makes_a_fresh_job_missing(
        rm, fake_kube, k8s_clusters):
    """Under load: 10,000 Falcon Jobs in the cluster, a 410 Gone, and a re-LIST that takes
    as long as the test holds it; an experiment created meanwhile runs normally."""
    k8s_clusters(cache_sync_wait=SYNC_WAIT)
    template = {"apiVersion": "batch/v1", "kind": "Job",
                "spec": {"completions": 1, "template": {"spec": {"containers": [
                    {"name": "main", "image": "busybox"}]}}},
                "status": {"succeeded": 1, "conditions": [{"type": "Complete",
                                                           "status": "True"}]}}
    fake_kube.bulk_put("jobs", NS, [
        {**template, "metadata": {"name": f"falcon-load-{i}", "labels": {
            "app.kubernetes.io/managed-by": "falcon", "falcon.io/job-id": str(10**6 + i)}}}
        for i in range(10_000)])
    # Jobs of other (older) Falcon jobs: spared by the orphan grace, they only weigh.
    mgr = rm(orphan_grace=3600)
    mgr.tick()
    cache = mgr.backends["k8s-a"]._job_cache
    assert len(cache.items()) == 10_000
    relisted = cache.relists
    done = threading.Event()
    slow = fake_kube.inject("GET", "jobs", hold=done, hold_timeout=120, where=_relist)
    fake_kube.expire_watches()
    wait_until(lambda: slow.times == 0, "the re-LIST of 10,000 Jobs to start")
    try:
        job = create_during_lag(mgr, fake_kube)
        assert cache.relists == relisted  # the re-LIST is still in flight
    finally:
        done.set()
    wait_until(lambda: cache.relists > relisted, "the re-LIST to finish")
    runs_to_the_end(mgr, fake_kube, job)
    assert len(fake_kube.list("jobs", NS)) == 10_001


def stray_job(fake, name: str, job_id: int, *, age: float = 0.0, status=None) -> None:
    """Store a Falcon-labelled Job of a Falcon job this manager does not know (another
    replica's create), `age` seconds old by the API server's `creationTimestamp`."""
    labels = {"app.kubernetes.io/managed-by": "falcon", "falcon.io/job-id": str(job_id)}
    fake.put_object("jobs", NS, {
        "metadata": {"name": name, "labels": labels},
        "spec": {"completions": 1, "template": {"metadata": {"labels": labels}, "spec": {
            "containers": [{"name": "main", "image": "busybox"}]}}},
        "status": status or {}})
    if age:
        stamp = datetime.now(timezone.utc) - timedelta(seconds=age)
        with fake.lock:
            fake.objects[("jobs", NS, name)]["metadata"]["creationTimestamp"] = \
                stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        fake.bump("jobs", NS, name)


def test_the_orphan_grace_counts_from_the_servers_creation_time_not_first_sight(
        rm, fake_kube, k8s_clusters):
    """Jobs of Falcon jobs this manager does not know, seen late through a lagging watch:
    one created just now is spared by the grace, one the server created 60 s ago is removed
    at first sight."""
    k8s_clusters(cache_sync_wait=SYNC_WAIT)
    mgr = rm(orphan_grace=30)
    mgr.tick()
    release = fake_kube.stall_watches("jobs")
    try:
        stray_job(fake_kube, "falcon-999998-young-main", 999998)
        stray_job(fake_kube, "falcon-999999-old-main", 999999, age=60)
        mgr.tick()
        assert fake_kube.count("DELETE", "jobs") == 0
    finally:
        release.set()
    cache = mgr.backends["k8s-a"]._job_cache
    wait_until(lambda: len(cache.items()) == 2, "the watch to catch up")
    mgr.tick()
    assert [j["metadata"]["name"] for j in fake_kube.list("jobs", NS)] == [
        "falcon-999998-young-main"]


def test_the_pods_of_a_finished_job_are_kept_while_the_jobs_watch_lags(rm, fake_kube,
                                                                       k8s_clusters):
    """The Pods cache is current, the Jobs cache is not: the sweep must not take the Pods of
    a finished Job it has not seen for orphans (their exit codes stay until its TTL)."""
    k8s_clusters(cache_sync_wait=SYNC_WAIT)
    mgr = rm()
    mgr.tick()
    release = fake_kube.stall_watches("jobs")
    try:
        name = "falcon-999997-done-main"
        stray_job(fake_kube, name, 999997, status={
            "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
        pods = fake_kube.spawn_pods(NS, name, status={"phase": "Succeeded"})
        pod_cache = mgr.backends["k8s-a"]._pod_cache
        wait_until(lambda: set(pods) <= set(pod_cache.items()), "the Pods cache")
        mgr.tick()
        assert fake_kube.count("DELETE", "pods") == 0
        assert [p["metadata"]["name"] for p in fake_kube.list("pods", NS)] == pods
    finally:
        release.set()
