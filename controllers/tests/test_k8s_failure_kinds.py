"""Ways a Kubernetes cluster can make Falcon lose or misreport an outcome, end to end.

Each test drives the real `ResourceManager` (and, where the experiment matters, the real
`ExpController`) through the in-process gRPC API server; the Kubernetes backend is built from
the clusters file and talks to the loopback fake API server through the real `kubernetes`
client, with its list-then-watch caches. The rules are in docs/cluster-behaviours.md.
"""
from __future__ import annotations

import logging
import threading

import pytest

from clusters.config import ClusterConfigError, parse_clusters
from controllers.cluster_backends.base import BackendError
from controllers.cluster_backends.kubernetes import (
    FINALIZER,
    KubernetesBackend,
    KubernetesClusterConfig,
)
from controllers.cluster_backends.loading import load_backends
from controllers.exp_controller import ExpController
from controllers.kubeclient import KubeConnection
from controllers.leader import ElectionConfig
from controllers.resource_manager import ResourceManager
from core.testing import wait_until as poll_until
from experiments.models import Experiment
from experiments.services import exp_abort
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import falcon_api, grpc_server  # noqa: F401  (fixtures)
from jobs.models import Job

from controllers.tests.fake_k8s import fake_kube, kubeconfig  # noqa: F401  (fixtures)
from controllers.tests.test_k8s_cases import (  # noqa: F401  (fixtures)
    IMAGE,
    NS,
    k8s_clusters,
    real_pod_status,
)

pytestmark = pytest.mark.django_db(transaction=True)

READY = {"type": "Ready", "status": "True"}
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient google.com/tpu."}


class FakeClock:
    """The resource manager's monotonic clock: its timeouts pass when the test says so."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def rm_clock():
    return FakeClock()


@pytest.fixture
def rm(falcon_api, k8s_clusters, rm_clock):
    """Build a `ResourceManager` on cluster `k8s-a`, on `rm_clock`; its backends are closed
    after the test."""
    built = []

    def build(**options):
        backends = load_backends(["k8s-a"])
        built.extend(backends.values())
        options.setdefault("orphan_grace", 0)
        options.setdefault("clock", rm_clock)
        return ResourceManager(falcon_api, backends, **options)

    yield build
    for backend in built:
        backend.close()


def fresh(obj):
    return type(obj).objects.get(pk=obj.pk)


def submit(mgr, *, replica: int = 1, roles=("main",), name: str = "case") -> list[Job]:
    exp = make_exp(name=name, cluster_name="k8s-a", image=IMAGE, replica=replica, roles=roles)
    mgr.tick()
    jobs = list(Job.objects.filter(experiment=exp).order_by("id"))
    assert all(j.status == "Pending" and j.cluster_job_name for j in jobs), \
        [(j.reason, j.message) for j in jobs]
    return jobs


def run_all(fake, job: Job, replica: int) -> list[str]:
    names = [fake.put_pod(NS, job.cluster_job_name, i, real_pod_status(
        {"phase": "Running", "conditions": [READY]})) for i in range(replica)]
    fake.set_job_status(NS, job.cluster_job_name, {"active": replica, "ready": replica})
    return names


def hold_terminating(fake, pod: str, status: dict) -> None:
    """Make Pod `pod` Terminating, held by another controller's finalizer, with `status`."""
    fake.set_finalizers("pods", NS, pod, ["example.com/hold"])
    fake.set_pod_status(NS, pod, real_pod_status(status))
    with fake.lock:
        fake.delete("pods", NS, pod, None)


# -- an experiment is running only when every role runs -------------------------------------------

def test_three_roles_two_ready_one_unschedulable_keep_the_experiment_created(rm, fake_kube,
                                                                            falcon_api):
    mgr = rm()
    ps, worker, evaluator = submit(mgr, roles=("ps", "worker", "eval"))
    run_all(fake_kube, ps, 1)
    run_all(fake_kube, worker, 1)
    fake_kube.put_pod(NS, evaluator.cluster_job_name, 0, real_pod_status(
        {"phase": "Pending", "conditions": [UNSCHEDULABLE]}))
    fake_kube.set_job_status(NS, evaluator.cluster_job_name, {"active": 1, "ready": 0})
    mgr.tick()
    assert [fresh(j).status for j in (ps, worker, evaluator)] == ["Running", "Running",
                                                                   "Pending"]
    ExpController(falcon_api, has_files=lambda url: True).tick()
    exp = Experiment.objects.get(pk=ps.experiment_id)
    assert (exp.status, exp.message) == ("Created", "1 Pending, 2 Running")


# -- Terminating pods never run; a running job that lost a replica fails after a deadline ----------

@pytest.mark.parametrize("cause,status,word", [
    ("evicted", {"phase": "Running", "reason": "Evicted", "conditions": [READY],
                 "message": "The node was low on resource: memory."}, "evicted"),
    ("preempted", {"phase": "Running", "conditions": [READY, {
        "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
        "message": "preempted by a higher priority pod"}]}, "preempted"),
    ("node-lost", {"phase": "Running", "conditions": [READY, {
        "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint"}]}, "disrupted"),
])
def test_a_running_job_that_lost_a_replica_fails_after_the_progress_deadline(
        rm, fake_kube, cause, status, word, rm_clock):
    mgr = rm(progress_deadline=0.5)
    (job,) = submit(mgr, replica=2)
    pods = run_all(fake_kube, job, 2)
    mgr.tick()
    assert fresh(job).status == "Running"
    # Replica 1 is ended by the cluster and stays Terminating; the Job controller still counts
    # it ready (Kubernetes reports `terminating` beside `ready`).
    hold_terminating(fake_kube, pods[1], status)
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 2, "ready": 2,
                                                        "terminating": 1})
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Running", "ReplicaLost"), job.message
    assert pods[1] in job.message and word in job.message and "1/2 pods ready" in job.message
    rm_clock.advance(0.6)
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Failed", "ReplicaLost"), job.message
    assert "progress deadline" in job.message and pods[1] in job.message and word in job.message


def test_a_terminating_pod_never_counts_as_running(rm, fake_kube):
    mgr = rm()
    (job,) = submit(mgr, replica=2)
    pods = run_all(fake_kube, job, 2)
    hold_terminating(fake_kube, pods[0], {"phase": "Running", "conditions": [READY]})
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 2, "ready": 2,
                                                        "terminating": 1})
    mgr.tick()
    job = fresh(job)
    assert job.status == "Pending" and "1/2 pods ready" in job.message, job.message


# -- a pending timeout fails at once; cleanup continues until nothing is left ----------------------

def test_pending_timeout_fails_at_once_while_a_pod_is_held_terminating(rm, fake_kube,
                                                                      falcon_api, caplog,
                                                                      rm_clock):
    mgr = rm(pending_timeout=0.3)
    (job,) = submit(mgr)
    pod = fake_kube.put_pod(NS, job.cluster_job_name, 0, real_pod_status(
        {"phase": "Pending", "conditions": [UNSCHEDULABLE]}))
    fake_kube.set_finalizers("pods", NS, pod, ["example.com/hold"])
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 1, "ready": 0})
    mgr.tick()
    rm_clock.advance(0.4)
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Failed", "PendingTimeout"), job.message
    assert "being deleted" in job.message and "Unschedulable" in job.message
    ExpController(falcon_api, has_files=lambda url: True).tick()
    assert Experiment.objects.get(pk=job.experiment_id).status == "Failed"
    # The Pod is still held: the cleanup goes on in later ticks, never re-creating anything.
    assert fake_kube.get("pods", NS, pod)["metadata"]["deletionTimestamp"]
    mgr.tick()
    assert fake_kube.get("pods", NS, pod) is not None
    with caplog.at_level(logging.INFO, logger="falcon.controllers.resources"):
        fake_kube.set_finalizers("pods", NS, pod, [])
        mgr.tick()
        mgr.tick()
    assert fake_kube.list("jobs", NS) == [] and fake_kube.list("pods", NS) == []
    assert any("nothing of it is left" in r.getMessage() for r in caplog.records)
    assert fresh(job).reason == "PendingTimeout"
    assert fake_kube.count("POST", "jobs") == 1


def test_a_slow_delete_after_a_timeout_never_becomes_cluster_job_missing(rm, fake_kube,
                                                                         rm_clock):
    fake_kube.linger_pods = True  # deleted Pods stay Terminating until reaped
    mgr = rm(pending_timeout=0.2)
    (job,) = submit(mgr, replica=2)
    fake_kube.spawn_pods(NS, job.cluster_job_name, status={
        "phase": "Pending", "conditions": [UNSCHEDULABLE]})
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 2, "ready": 0})
    mgr.tick()
    rm_clock.advance(0.3)
    mgr.tick()
    assert (fresh(job).status, fresh(job).reason) == ("Failed", "PendingTimeout")
    for _ in range(3):
        mgr.tick()
        fake_kube.reap()
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Failed", "PendingTimeout"), job.message
    assert fake_kube.list("jobs", NS) == [] and fake_kube.list("pods", NS) == []


# -- no outcome is lost when Kubernetes removes a finished Job --------------------------------------

def test_a_job_removed_by_its_ttl_before_it_was_read_keeps_its_outcome(rm, fake_kube):
    mgr = rm()
    (job,) = submit(mgr, replica=1)
    assert fake_kube.get("jobs", NS, job.cluster_job_name)["metadata"]["finalizers"] == \
        [FINALIZER]
    fake_kube.set_job_status(NS, job.cluster_job_name, {
        "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    # The TTL controller (TTL 0, or the resource manager was down longer than the TTL) deletes
    # the finished Job before the resource manager read it: the finalizer holds it.
    assert fake_kube.expire_finished(NS) == [job.cluster_job_name]
    assert fake_kube.get("jobs", NS, job.cluster_job_name)["metadata"]["deletionTimestamp"]
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Succeeded", "Completed"), job.message
    # The outcome is recorded: the finalizer is released and Kubernetes removes the Job.
    mgr.tick()
    assert fake_kube.list("jobs", NS) == []
    assert fresh(job).status == "Succeeded"


def test_a_job_deleted_by_hand_before_it_finished_is_failed_saying_so(rm, fake_kube):
    mgr = rm()
    (job,) = submit(mgr, replica=1)
    run_all(fake_kube, job, 1)
    mgr.tick()
    with fake_kube.lock:
        fake_kube.delete("jobs", NS, job.cluster_job_name, "Background")
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Failed", "ClusterJobDeleted"), job.message
    mgr.tick()
    assert fake_kube.list("jobs", NS) == []


@pytest.mark.parametrize("ttl", [0, 60, 299])
def test_the_clusters_file_refuses_an_unsafe_ttl(ttl):
    text = (f"clusters:\n  k:\n    backend: kubernetes\n    namespace: n\n"
            f"    ttl_seconds_after_finished: {ttl}\n")
    with pytest.raises(ClusterConfigError, match="ttl_seconds_after_finished.*>= 300"):
        parse_clusters(text)
    parse_clusters(text.replace(f": {ttl}\n", ": 300\n"))


# -- orphans are found and removed each tick ------------------------------------------------------

def test_a_job_created_after_its_experiment_was_aborted_is_removed(rm, fake_kube, caplog):
    """A leader that lost its Lease while its create was in flight: the new leader aborted
    the experiment, then the old create lands. The sweep deletes it within one tick."""
    mgr = rm()
    (job,) = submit(mgr)
    exp_abort(exp_id=job.experiment_id, actor=job.experiment.creator)
    mgr.tick()
    assert fresh(job).status == "Aborted"
    assert fake_kube.list("jobs", NS) == []
    # The old leader's create lands now, with its Pod.
    backend = mgr.backends["k8s-a"]
    view = next(iter(falcon_job_views(mgr, job)))
    body = backend.api.sanitize_for_serialization(backend.build_job(view))
    fake_kube.put_object("jobs", NS, body)
    fake_kube.spawn_pods(NS, job.cluster_job_name, status={"phase": "Running"})
    # An unknown Falcon job's Job (its experiment deleted) goes too.
    stray = dict(body, metadata=dict(body["metadata"], name="falcon-999-gone-main", labels={
        **body["metadata"]["labels"], "falcon.io/job-id": "999999"}))
    fake_kube.put_object("jobs", NS, stray)
    # A recent one is spared while its create may race the list of open jobs.
    patient = rm(orphan_grace=60)
    patient.tick()
    assert len(fake_kube.list("jobs", NS)) == 2
    with caplog.at_level(logging.WARNING, logger="falcon.controllers.kubernetes"):
        mgr.tick()
    assert fake_kube.list("jobs", NS) == [] and fake_kube.list("pods", NS) == []
    removed = " ".join(r.getMessage() for r in caplog.records)
    assert job.cluster_job_name in removed and "falcon-999-gone-main" in removed


def test_a_create_held_while_its_leader_lost_the_lease_lands_after_the_abort_and_is_removed(
        fake_kube, k8s_clusters, falcon_api, tmp_path):
    """The race of CB-20 injected, not only its outcome: the leader's Lease renewals fail and
    its Job POST is held by the API server; its call times out well inside the renew
    deadline, a second replica takes the Lease over, the experiment is aborted, and only then
    does the old POST land. The new leader's next tick removes the Job and its Pod, and the
    old leader writes nothing to the cluster once the new one leads (CB-16, CB-18, CB-20).

    The durations are a fifth of the defaults (Lease 3 s, renew deadline 2 s; each call
    0.5 s, one retry), with the defaults' proportions."""
    from dataclasses import replace

    from kubernetes import client as k8s

    from controllers.contract import ListFilter
    from controllers.kubeclient import KubeCaller, api_client
    from controllers.leader import Fenced, LeadershipLost, LeaseElector
    from controllers.management.commands.runcontroller import API_WRITES, BACKEND_WRITES

    election = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.25}
    limits = {"connect_timeout": 0.5, "request_timeout": 0.5, "call_deadline": 0.5,
              "retries": 1, "backoff_initial": 0.05, "backoff_max": 0.1}
    backends = []

    def replica(who: str):
        conn = KubeConnection(kubeconfig=str(fake_kube.kubeconfig(tmp_path / f"kc-{who}",
                                                                  token=who)), **limits)
        elector = LeaseElector(k8s.CoordinationV1Api(api_client(conn)),
                               ElectionConfig(lease_name="falcon-resources-k8s-a",
                                              namespace=NS, identity=who, **election),
                               caller=KubeCaller(replace(conn, retries=0)))
        backend = KubernetesBackend("k8s-a", KubernetesClusterConfig(namespace=NS,
                                                                     connection=conn))
        backends.append(backend)
        manager = ResourceManager(Fenced(falcon_api, elector.fence, API_WRITES),
                                  {"k8s-a": Fenced(backend, elector.fence, BACKEND_WRITES)},
                                  orphan_grace=0)
        return elector, manager

    old_elector, old = replica("old-leader")
    new_elector, new = replica("new-leader")
    release = threading.Event()
    try:
        assert old_elector.try_acquire_or_renew() and old_elector.is_leader()
        assert not new_elector.try_acquire_or_renew()  # held: it starts counting
        exp = make_exp(name="race", cluster_name="k8s-a", image=IMAGE)
        job = Job.objects.get(experiment=exp)
        # From now on the old leader's Lease calls fail and its Job POSTs are held.
        fake_kube.inject("POST", "jobs", token="old-leader", hold=release, times=100)
        fake_kube.inject(None, "leases", token="old-leader", status=503, times=1000)

        stats = old.tick()
        assert fake_kube.count("POST", "jobs") >= 1 and fake_kube.list("jobs", NS) == []
        assert stats.failed == 1 and "create" in " ".join(stats.errors), stats.errors
        # Every attempt timed out: one call ends within its call deadline plus one request
        # timeout (1 s here), so the tick gave up its POST inside the renew deadline, while it
        # still held the Lease, before another replica could act.
        assert limits["call_deadline"] + limits["request_timeout"] < election["renew_deadline"]
        # The tick gave its POSTs up on its own, every one still unanswered (held), after a
        # bounded number of attempts.
        assert not release.is_set()
        assert fake_kube.count("POST", "jobs") <= limits["retries"] + 1
        assert fresh(job).status == "Pending"

        def taken_over() -> bool:
            if new_elector.try_acquire_or_renew():
                return True
            assert not old_elector.try_acquire_or_renew()  # its renewals keep failing
            return False

        poll_until(taken_over, timeout=election["lease_duration"] + 60.0,
                   every=election["retry_period"], what="the second replica to take over")
        taken_over = len(fake_kube.requests)
        assert not old_elector.is_leader()
        with pytest.raises(LeadershipLost):
            old_elector.fence()

        # The user aborts; the new leader finds no Job (the POST is still held) and ends it.
        exp_abort(exp_id=exp.pk, actor=exp.creator)
        new.tick()
        ExpController(falcon_api, has_files=lambda url: True).tick()
        assert fresh(job).status == "Aborted" and fresh(exp).status == "Aborted"
        with pytest.raises(LeadershipLost):
            old.tick()  # the old leader's next write (its sweep) is fenced

        # The held POST lands now, after the abort; the Job controller starts its Pod.
        (view,) = falcon_api.list_jobs(ListFilter(ids=(job.pk,)))
        name = backends[1].cluster_job_name(view)
        release.set()
        poll_until(lambda: fake_kube.get("jobs", NS, name) is not None,
                   what="the held POST to land")
        fake_kube.spawn_pods(NS, name, status={"phase": "Running"})
        assert len(fake_kube.list("pods", NS)) == 1

        # The new leader removes it: ticks until its watch cache has seen the late Job (on a
        # loaded machine the first tick can run before the watch event arrives).
        poll_until(lambda: fake_kube.list("jobs", NS) == [] and fake_kube.list("pods", NS) == [],
                   tick=new.tick, every=0.05, what="the new leader to remove the late Job")
        writes = [(r.method, r.resource, r.name) for r in fake_kube.requests[taken_over:]
                  if r.token == "old-leader" and r.resource != "leases"
                  and r.method in ("POST", "PUT", "PATCH", "DELETE")]
        assert writes == [], writes
    finally:
        release.set()
        for backend in backends:
            backend.close()


def falcon_job_views(mgr, job: Job):
    """The `JobView` of `job` as the resource manager reads it (any status)."""
    from controllers.contract import ListFilter

    return mgr.api.list_jobs(ListFilter(ids=(job.pk,)))


def test_cluster_calls_end_well_inside_the_lease_renew_deadline(kubeconfig, fake_kube):
    """With the default timeouts, a cluster that stops answering fails a call within the
    call deadline plus one request timeout (6 s), well inside the 10 s renew deadline."""
    conn = KubeConnection(kubeconfig=str(kubeconfig))
    backend = KubernetesBackend("k8s-a", KubernetesClusterConfig(namespace=NS, connection=conn,
                                                                 watch=False))
    stall = threading.Event()  # no GET is answered until set (at close)
    fake_kube.inject("GET", "jobs", hold=stall, times=10)
    with pytest.raises(BackendError):
        backend.cluster_jobs()
    # The call gave up on its own (every GET still unanswered), after a bounded number of
    # attempts, and the bound on one call's length is inside the Lease's renew deadline.
    assert not stall.is_set()
    assert 1 <= fake_kube.count("GET", "jobs") <= conn.retries + 1
    default_election = ElectionConfig(lease_name="falcon-resources-k8s-a", namespace=NS,
                                      identity="a")
    assert conn.call_deadline + conn.request_timeout < default_election.renew_deadline


# -- a create refused for ever falls under the pending timeout -----------------------------------

def test_a_create_refused_for_ever_fails_at_the_pending_timeout_with_the_refusal(rm,
                                                                                fake_kube,
                                                                                rm_clock):
    fake_kube.inject("POST", "jobs", status=403, reason="Forbidden", times=100)
    mgr = rm(pending_timeout=0.3)
    exp = make_exp(name="quota", cluster_name="k8s-a", image=IMAGE)
    job = Job.objects.get(experiment=exp)
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Pending", "ClusterError") and "403" in job.message
    rm_clock.advance(0.4)
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Failed", "PendingTimeout"), job.message
    assert "last refusal" in job.message and "403" in job.message


def test_a_foreign_job_squatting_on_the_name_fails_at_the_pending_timeout(rm, fake_kube,
                                                                          rm_clock):
    mgr = rm(pending_timeout=0.3)
    exp = make_exp(name="squat", cluster_name="k8s-a", image=IMAGE)
    job = Job.objects.get(experiment=exp)
    name = mgr.backends["k8s-a"].cluster_job_name(falcon_job_views(mgr, job)[0])
    fake_kube.put_object("jobs", NS, {"metadata": {"name": name, "labels": {"app": "other"}},
                                      "spec": {"template": {"spec": {"containers": [
                                          {"name": "x", "image": "busybox"}]}}}})
    mgr.tick()
    rm_clock.advance(0.4)
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Failed", "PendingTimeout"), job.message
    assert "last refusal" in job.message and name in job.message
    assert fake_kube.get("jobs", NS, name)["metadata"]["labels"] == {"app": "other"}
