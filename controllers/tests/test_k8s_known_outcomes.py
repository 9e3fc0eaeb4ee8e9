"""The resource manager concludes only what it observed on a Kubernetes cluster.

Driven like test_k8s_failure_kinds.py: the real `ResourceManager` over the in-process gRPC API
server, its Kubernetes backend built from the clusters file and talking to the loopback fake
API server through the real `kubernetes` client. Deadlines are measured on an injected clock,
never by sleeping. Rules: docs/cluster-behaviours.md (CB-10, CB-19, CB-21).
"""
from __future__ import annotations

import pytest

from controllers.cluster_backends.kubernetes import FINALIZER, PodEnd, failure_details, pod_end
from controllers.cluster_backends.loading import load_backends
from controllers.kubeclient import Raw
from controllers.resource_manager import ResourceManager
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
NOT_READY = {"type": "Ready", "status": "False", "reason": "PodCompleted"}
# FALCON_PROGRESS_DEADLINE_SECONDS' default (runcontroller, docs/limits.md).
DEFAULT_PROGRESS_DEADLINE = 600.0
KUBELET_EVICTION = ("The node was low on resource: memory. Threshold quantity: 100Mi, "
                    "available: 88Mi. Container main was using 7Gi, request is 1Gi.")


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def rm(falcon_api, k8s_clusters, clock):
    """Build a `ResourceManager` on `k8s-a` with the default settings unless told otherwise
    (a new one is a restarted manager: new backend, new caches, no memory)."""
    built = []

    def build(*, watch: bool = True, **options):
        k8s_clusters(watch=watch)
        backends = load_backends(["k8s-a"])
        built.extend(backends.values())
        options.setdefault("progress_deadline", DEFAULT_PROGRESS_DEADLINE)
        return ResourceManager(falcon_api, backends, clock=clock, **options)

    yield build
    for backend in built:
        backend.close()


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def submit(mgr, *, replica: int = 1, name: str = "known") -> Job:
    exp = make_exp(name=name, cluster_name="k8s-a", image=IMAGE, replica=replica)
    mgr.tick()
    job = Job.objects.get(experiment=exp)
    assert job.status == "Pending" and job.cluster_job_name, (job.reason, job.message)
    return job


def hold_terminating(fake, pod: str, status: dict) -> None:
    """Make Pod `pod` Terminating (held by another finalizer, as on a lost node) with
    `status`."""
    fake.set_finalizers("pods", NS, pod, ["example.com/hold"])
    fake.set_pod_status(NS, pod, real_pod_status(status))
    with fake.lock:
        fake.delete("pods", NS, pod, None)


# -- item: a replica lost before the job ever ran -------------------------------------------------

LOST_BEFORE_RUNNING = {
    # Kubernetes still counts B ready beside `terminating` (the Job controller's view).
    "terminating-count": ({"phase": "Running", "conditions": [READY, {
        "type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
        "message": "PodGC: node no longer exists"}]},
        {"active": 1, "ready": 1, "terminating": 1}, "node lost"),
    # B not ready and no `terminating` count: only its deletionTimestamp says it is going.
    "not-ready-no-count": ({"phase": "Running", "conditions": [NOT_READY]},
                           {"active": 2, "ready": 1}, "deleted"),
}


@pytest.mark.parametrize("shape", sorted(LOST_BEFORE_RUNNING))
def test_a_replica_lost_before_the_job_ran_fails_at_the_progress_deadline(rm, fake_kube, clock,
                                                                         shape):
    pod_status, job_status, word = LOST_BEFORE_RUNNING[shape]
    mgr = rm()  # default settings: no pending timeout
    job = submit(mgr, replica=2)
    fake_kube.put_pod(NS, job.cluster_job_name, 0, real_pod_status(
        {"phase": "Running", "conditions": [READY]}))
    lost = fake_kube.put_pod(NS, job.cluster_job_name, 1, real_pod_status(
        {"phase": "Running", "conditions": [READY]}))
    hold_terminating(fake_kube, lost, pod_status)
    fake_kube.set_job_status(NS, job.cluster_job_name, job_status)
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Pending", "ReplicaLost"), job.message
    assert lost in job.message and word in job.message, job.message
    clock.advance(DEFAULT_PROGRESS_DEADLINE - 1)
    mgr.tick()
    assert fresh(job).status == "Pending", fresh(job).message
    clock.advance(2)
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Failed", "ReplicaLost"), job.message
    assert "progress deadline" in job.message and lost in job.message and word in job.message


def test_a_pending_job_waiting_for_its_pods_is_not_held_to_the_progress_deadline(rm, fake_kube,
                                                                                clock):
    """Only a lost replica starts the deadline: Pods still being scheduled never do."""
    mgr = rm()
    job = submit(mgr, replica=2)
    fake_kube.put_pod(NS, job.cluster_job_name, 0, real_pod_status(
        {"phase": "Running", "conditions": [READY]}))
    fake_kube.put_pod(NS, job.cluster_job_name, 1, real_pod_status({
        "phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient cpu."}]}))
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 2, "ready": 1})
    mgr.tick()
    clock.advance(DEFAULT_PROGRESS_DEADLINE * 10)
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Pending", "Unschedulable"), job.message


# -- item: the outcome finalizer never outlives the outcome ---------------------------------------

def complete_and_delete(fake, name: str) -> None:
    """The Job completes and the TTL controller (or a hand delete) deletes it: Falcon's
    finalizer keeps it, Terminating."""
    fake.set_job_status(NS, name, {"succeeded": 1, "conditions": [
        {"type": "Complete", "status": "True"}]})
    assert fake.expire_finished(NS) == [name]
    assert fake.get("jobs", NS, name)["metadata"]["deletionTimestamp"]


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "list"])
def test_a_recorded_outcome_releases_the_finalizer_within_one_tick_after_a_restart(
        rm, fake_kube, watch):
    first = rm(watch=watch)  # the default orphan grace (30 s): the Job is younger than it
    job = submit(first)
    name = job.cluster_job_name
    complete_and_delete(fake_kube, name)
    # The first manager records the outcome, then dies before its release lands.
    fake_kube.inject("PATCH", "jobs", status=409, reason="Conflict", times=10)
    first.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Succeeded", "Completed"), job.message
    assert fake_kube.get("jobs", NS, name)["metadata"]["finalizers"] == [FINALIZER]
    first.backends["k8s-a"].close()
    with fake_kube.lock:
        fake_kube.faults.clear()
    # A new manager (its Jobs seen only through its first LIST) releases it in one tick.
    second = rm(watch=watch)
    second.tick()
    assert fake_kube.get("jobs", NS, name) is None
    assert fresh(job).status == "Succeeded"
    assert fake_kube.count("POST", "jobs") == 1


def test_the_tick_that_records_an_outcome_releases_its_finalizer(rm, fake_kube):
    mgr = rm()  # the default orphan grace: the Job is younger than it
    job = submit(mgr)
    complete_and_delete(fake_kube, job.cluster_job_name)
    mgr.tick()
    assert (fresh(job).status, fresh(job).reason) == ("Succeeded", "Completed")
    assert fake_kube.get("jobs", NS, job.cluster_job_name) is None
    patches = fake_kube.count("PATCH", "jobs")
    mgr.tick()  # nothing left to release: no call
    assert fake_kube.count("PATCH", "jobs") == patches


def test_an_open_jobs_finalizer_is_kept(rm, fake_kube):
    """A Job whose Falcon job is still open keeps the finalizer, however long it runs."""
    mgr = rm()
    job = submit(mgr)
    fake_kube.put_pod(NS, job.cluster_job_name, 0, real_pod_status(
        {"phase": "Running", "conditions": [READY]}))
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 1, "ready": 1})
    mgr.tick()
    assert fresh(job).status == "Running"
    rm().tick()  # a restarted manager too
    assert fake_kube.get("jobs", NS, job.cluster_job_name)["metadata"]["finalizers"] == \
        [FINALIZER]


# -- item: an eviction is called an eviction ------------------------------------------------------

def disruption_target(reason: str, message: str = "") -> dict:
    return {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message}


# (status.reason, status.message, DisruptionTarget reason and message) -> what a message says.
POD_ENDS = [
    # Node-pressure eviction by the kubelet (>= 1.26 adds the condition): evicted, and the
    # kubelet's own message.
    ("Evicted", KUBELET_EVICTION, ("TerminationByKubelet", KUBELET_EVICTION),
     PodEnd("evicted", "Evicted", KUBELET_EVICTION)),
    ("Evicted", KUBELET_EVICTION, None, PodEnd("evicted", "Evicted", KUBELET_EVICTION)),
    # An eviction asked through the Eviction API (a drain): evicted too.
    (None, None, ("EvictionByEvictionAPI", "Eviction API: evicting"),
     PodEnd("evicted", "EvictionByEvictionAPI", "Eviction API: evicting")),
    # The kubelet admitting a critical Pod.
    ("Preempting", "Preempted in order to admit critical pod",
     ("TerminationByKubelet", "Pod was preempted by Kubelet to accommodate a critical pod."),
     PodEnd("preempted", "Preempting", "Preempted in order to admit critical pod")),
    # Graceful node shutdown.
    ("Terminated", "Pod was terminated in response to imminent node shutdown.",
     ("TerminationByKubelet", ""),
     PodEnd("stopped by a node shutdown", "Terminated",
            "Pod was terminated in response to imminent node shutdown.")),
    (None, None, ("TerminationByKubelet", "killed"),
     PodEnd("stopped by the kubelet", "TerminationByKubelet", "killed")),
    (None, None, ("PreemptionByScheduler", "Preempted by ns/high"),
     PodEnd("preempted", "PreemptionByScheduler", "Preempted by ns/high")),
    (None, None, ("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"),
     PodEnd("disrupted", "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint")),
    (None, None, ("DeletionByPodGC", "PodGC: node no longer exists"),
     PodEnd("node lost", "DeletionByPodGC", "PodGC: node no longer exists")),
    ("NodeLost", "Node n1 which was running pod x is unresponsive", None,
     PodEnd("node lost", "NodeLost", "Node n1 which was running pod x is unresponsive")),
    (None, None, ("SomethingNew", "m"), PodEnd("disrupted", "SomethingNew", "m")),
    # The task's own ending is nobody else's doing.
    ("Terminated", "exited", None, None),
    (None, None, None, None),
]


@pytest.mark.parametrize("reason,message,condition,expected", POD_ENDS)
def test_pod_end_maps_who_ended_a_pod(reason, message, condition, expected):
    status = {"phase": "Failed", "conditions": [READY]}
    if reason:
        status.update(reason=reason, message=message)
    if condition:
        status["conditions"].append(disruption_target(*condition))
    assert pod_end(Raw({"metadata": {"name": "p"}, "status": status})) == expected


def test_a_kubelet_eviction_is_named_an_eviction_with_the_kubelets_message(rm, fake_kube):
    mgr = rm()
    job = submit(mgr)
    pod = fake_kube.put_pod(NS, job.cluster_job_name, 0, real_pod_status({
        "phase": "Failed", "reason": "Evicted", "message": KUBELET_EVICTION,
        "conditions": [disruption_target("TerminationByKubelet", KUBELET_EVICTION)],
        "containerStatuses": [{"name": "main", "state": {"terminated": {
            "exitCode": 137, "reason": "Error"}}}]}))
    fake_kube.set_job_status(NS, job.cluster_job_name, {"failed": 1, "conditions": [{
        "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit"}]})
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Failed", "BackoffLimitExceeded"), job.message
    assert f"pod {pod} (index 0) evicted (Evicted): {KUBELET_EVICTION}" in job.message
    assert "disrupted" not in job.message and "TerminationByKubelet" not in job.message
    details, exit_code = failure_details([Raw(fake_kube.get("pods", NS, pod))])
    assert details.startswith(f"pod {pod} (index 0) evicted") and exit_code == 137
