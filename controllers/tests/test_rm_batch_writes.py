"""The resource manager sends a tick's writes in UpdateJobStatuses batches.

Driven as production runs it: the real `ResourceManager`, the real gRPC client and in-process
API server, the Kubernetes backend on the loopback fake API server through the real
`kubernetes` client.
"""
from __future__ import annotations

import inspect
import logging

import grpc
import pytest

from controllers.cluster_backends.loading import load_backends
from controllers.contract import FalconAPI
from controllers.grpc_client import GrpcFalconAPI
from controllers.management.commands.runcontroller import API_WRITES
from controllers.resource_manager import ResourceManager
from core.grpc.errors import ApiUnavailable
from experiments.services import exp_abort
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    INTERNAL_TOKEN,
    channel_to,
    falcon_api,
    grpc_server,
)
from jobs.models import Job

from controllers.tests.fake_k8s import fake_kube, kubeconfig  # noqa: F401  (fixtures)
from controllers.tests.test_exp_controller import CountingInterceptor
from controllers.tests.test_k8s_cases import IMAGE, NS, k8s_clusters  # noqa: F401
from controllers.tests.test_k8s_failure_kinds import UNSCHEDULABLE, fresh
from controllers.tests.test_k8s_cases import real_pod_status

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def counted_api(grpc_server):
    """A `GrpcFalconAPI` whose RPCs are counted by method name (`.counter.calls`)."""
    counter = CountingInterceptor()
    channel = grpc.intercept_channel(channel_to(grpc_server), counter)
    api = GrpcFalconAPI(f"127.0.0.1:{grpc_server.port}", INTERNAL_TOKEN, channel=channel)
    api.counter = counter
    yield api
    channel.close()


@pytest.fixture
def backends(k8s_clusters):
    built = load_backends(["k8s-a"])
    yield built
    for backend in built.values():
        backend.close()


def test_a_tick_writes_its_jobs_in_one_call_per_batch(counted_api, backends, monkeypatch):
    """Five new jobs are submitted and recorded with batches of two: three UpdateJobStatuses
    calls, no UpdateJobStatus, each job with its cluster job name."""
    monkeypatch.setattr("controllers.resource_manager.WRITE_BATCH", 2)
    exps = [make_exp(name=f"b{i}", cluster_name="k8s-a", image=IMAGE) for i in range(5)]
    stats = ResourceManager(counted_api, backends, orphan_grace=0).tick()
    calls = counted_api.counter.calls
    assert calls["UpdateJobStatuses"] == 3 and "UpdateJobStatus" not in calls, calls
    assert stats.submitted == 5 and stats.updated == 5 and stats.failed == 0
    for exp in exps:
        job = Job.objects.get(experiment=exp)
        assert (job.status, job.reason) == ("Pending", "Submitted") and job.cluster_job_name


def test_a_refused_item_is_logged_with_its_ids_and_the_others_are_recorded(
        falcon_api, backends, caplog):
    """A job aborted between the tick's read and its write: its item is refused (a lost
    race), logged with its ids, and the other jobs' writes of the same batch apply."""
    raced = make_exp(name="raced", cluster_name="k8s-a", image=IMAGE)
    other = make_exp(name="other", cluster_name="k8s-a", image=IMAGE)

    class AbortFirst:
        """The gRPC client, with the experiment aborted just before the batch is sent."""

        def __getattr__(self, name):
            return getattr(falcon_api, name)

        def update_job_statuses(self, updates):
            exp_abort(exp_id=raced.pk, actor=raced.creator)
            return falcon_api.update_job_statuses(updates)

    with caplog.at_level(logging.WARNING, logger="falcon.controllers.resources"):
        stats = ResourceManager(AbortFirst(), backends, orphan_grace=0).tick()
    assert stats.failed == 1 and stats.updated == 1
    assert Job.objects.get(experiment=other).cluster_job_name
    raced_job = Job.objects.get(experiment=raced)
    assert raced_job.status == "Aborting" and not raced_job.cluster_job_name
    (line,) = [r for r in caplog.records if "Aborting" in r.getMessage()]
    assert (line.exp_id, line.job_id) == (raced.pk, raced_job.pk)
    # The next tick reads it again: its cluster job is deleted and it ends Aborted.
    ResourceManager(falcon_api, backends, orphan_grace=0).tick()
    assert fresh(raced_job).status == "Aborted"


def test_a_timed_out_cluster_job_is_deleted_only_once_the_timeout_is_recorded(
        falcon_api, backends, fake_kube):
    """When the write of a pending timeout does not reach the API server, the cluster job is
    kept: a later tick records PendingTimeout and deletes it, never ClusterJobMissing."""
    exp = make_exp(name="slow", cluster_name="k8s-a", image=IMAGE)
    now = [1000.0]  # the manager's clock: the timeout passes when the test says, not under load
    manager = ResourceManager(falcon_api, backends, pending_timeout=0.2, orphan_grace=0,
                              clock=lambda: now[0])
    manager.tick()
    job = Job.objects.get(experiment=exp)
    fake_kube.put_pod(NS, job.cluster_job_name, 0, real_pod_status(
        {"phase": "Pending", "conditions": [UNSCHEDULABLE]}))
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 1, "ready": 0})
    manager.tick()
    assert fresh(job).status == "Pending"
    now[0] += 0.3

    class Down:
        """The API server unreachable for writes."""

        def __getattr__(self, name):
            return getattr(falcon_api, name)

        def update_job_statuses(self, updates):
            raise ApiUnavailable("the API server is down")

    manager.api = Down()
    stats = manager.tick()
    assert stats.failed == 1 and fresh(job).status == "Pending"
    assert fake_kube.get("jobs", NS, job.cluster_job_name) is not None  # not deleted

    manager.api = falcon_api
    manager.tick()
    job = fresh(job)
    assert (job.status, job.reason) == ("Failed", "PendingTimeout"), job.message
    manager.tick()
    assert fake_kube.list("jobs", NS) == []
    assert fresh(job).reason == "PendingTimeout"


def test_every_write_of_the_api_client_is_fenced_by_the_lease():
    """A write method missing from API_WRITES would let a replica that lost its Lease write."""
    methods = {name for name, _ in inspect.getmembers(FalconAPI, inspect.isfunction)
               if not name.startswith("_")}
    reads = {name for name in methods if name.startswith(("list_", "get_"))}
    assert methods - reads == set(API_WRITES)


def test_an_unchanged_job_is_not_mapped_again_and_a_changed_pod_is_seen(
        falcon_api, backends, fake_kube, monkeypatch):
    """A pending Job's state is kept while neither it nor its Pods change (the same
    resourceVersions); a change to a Pod alone is mapped again on the next tick."""
    import controllers.cluster_backends.kubernetes as kubernetes

    exp = make_exp(name="memo", cluster_name="k8s-a", image=IMAGE)
    manager = ResourceManager(falcon_api, backends, orphan_grace=0)
    manager.tick()
    job = Job.objects.get(experiment=exp)
    pod = fake_kube.put_pod(NS, job.cluster_job_name, 0, real_pod_status(
        {"phase": "Pending", "conditions": [UNSCHEDULABLE]}))
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 1, "ready": 0})
    manager.tick()
    assert "Insufficient google.com/tpu" in fresh(job).message

    mapped = []
    real = kubernetes.job_state
    monkeypatch.setattr(kubernetes.backend, "job_state",
                        lambda name, *a, **k: mapped.append(name) or real(name, *a, **k))
    manager.tick()
    assert mapped == []  # nothing changed: the last state is reused
    fake_kube.set_pod_status(NS, pod, real_pod_status({"phase": "Pending", "containerStatuses": [{
        "name": "main", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0,
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling"}}}]}))
    manager.tick()
    assert mapped == [job.cluster_job_name]
    assert "ImagePullBackOff" in fresh(job).message


def test_a_tick_reads_its_jobs_page_by_page_and_writes_each_page_before_the_next(
        counted_api, backends, fake_kube, monkeypatch):
    """With pages of 2 jobs, five new jobs are read in 3 ListJobStates calls, and each page's
    jobs are submitted and recorded (one UpdateJobStatuses each) before the next page is read:
    the manager holds one page of the open jobs at a time. The decisions are those of one
    page: every job submitted once and recorded with its cluster job name; the next tick,
    paged the same way, maps nothing again that did not change and creates nothing."""
    import controllers.cluster_backends.kubernetes as kubernetes

    monkeypatch.setattr("controllers.grpc_client.STATES_PAGE_SIZE", 2)
    exps = [make_exp(name=f"p{i}", cluster_name="k8s-a", image=IMAGE) for i in range(5)]
    manager = ResourceManager(counted_api, backends, orphan_grace=0)
    stats = manager.tick()
    order = counted_api.counter.order
    assert order == ["ListJobStates", "UpdateJobStatuses"] * 3, order
    assert stats.jobs == 5 and stats.submitted == 5 and stats.updated == 5
    assert stats.failed == 0 and stats.deleted == 0, stats.errors
    for exp in exps:
        job = Job.objects.get(experiment=exp)
        assert (job.status, job.reason) == ("Pending", "Submitted") and job.cluster_job_name
    assert fake_kube.count("POST", "jobs") == 5

    mapped = []
    real = kubernetes.job_state
    monkeypatch.setattr(kubernetes.backend, "job_state",
                        lambda name, *a, **k: mapped.append(name) or real(name, *a, **k))
    manager.tick()  # maps the 5 Jobs (new objects since the last tick)
    mapped.clear()
    order.clear()
    stats = manager.tick()
    assert mapped == [], mapped  # every page's states were kept for this tick, not the last's
    assert order == ["ListJobStates"] * 3, order
    assert stats.jobs == 5 and stats.failed == 0 and fake_kube.count("POST", "jobs") == 5


def test_a_backend_that_observes_the_whole_cluster_gets_every_page_at_once(
        counted_api, monkeypatch):
    """A backend with `observes_whole_cluster` (the local backend's admission) is observed
    once with every open job of its cluster, after the last page is read."""
    from controllers.cluster_backends.base import SubmitResult

    class Whole:
        observes_whole_cluster = True

        def __init__(self):
            self.observed = []

        def cluster_job_name(self, job):
            return f"whole-{job.id}"

        def observe(self, jobs):
            self.observed.append(sorted(j.id for j in jobs))
            return {}  # none exists yet: every job is submitted

        def submit(self, job):
            return SubmitResult(cluster_job_name=f"whole-{job.id}", created=True)

    monkeypatch.setattr("controllers.grpc_client.STATES_PAGE_SIZE", 2)
    exps = [make_exp(name=f"w{i}", cluster_name="local") for i in range(5)]
    backend = Whole()
    stats = ResourceManager(counted_api, {"local": backend}, orphan_grace=0).tick()
    ids = sorted(Job.objects.filter(experiment__in=exps).values_list("id", flat=True))
    assert backend.observed == [ids]
    assert counted_api.counter.order == ["ListJobStates"] * 3 + ["UpdateJobStatuses"]
    assert stats.jobs == 5 and stats.updated == 5 and stats.failed == 0, stats.errors


def test_a_submitted_job_gets_no_task_spec_but_its_pull_message_names_its_image(
        falcon_api, backends, fake_kube, monkeypatch):
    """A submit reads the job's task spec and config; once its cluster job name is recorded,
    ListJobStates sends neither, and what a tick reads of the spec, the image a waiting Pod's
    message names, comes with every job."""
    from core.domain.taskspec import EMPTY

    exp = make_exp(name="img", cluster_name="k8s-a", image=IMAGE, config="k: v\n")
    backend = backends["k8s-a"]
    seen = []
    real_submit, real_observe = backend.submit, backend.observe
    monkeypatch.setattr(backend, "submit", lambda job: seen.append(("submit", job))
                        or real_submit(job))
    monkeypatch.setattr(backend, "observe", lambda jobs: seen.extend(
        ("observe", j) for j in jobs) or real_observe(jobs))
    manager = ResourceManager(falcon_api, backends, orphan_grace=0)
    manager.tick()
    (submitted,) = [job for what, job in seen if what == "submit"]
    assert submitted.task_spec.image == IMAGE and submitted.config == "k: v\n"
    job = Job.objects.get(experiment=exp)
    fake_kube.put_pod(NS, job.cluster_job_name, 0, real_pod_status({
        "phase": "Pending", "containerStatuses": [{
            "name": "main", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff",
                                  "message": "Back-off pulling"}}}]}))
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 1, "ready": 0})
    seen.clear()
    manager.tick()
    (observed,) = [job for what, job in seen if what == "observe"]
    assert observed.task_spec is EMPTY and observed.config == ""
    assert observed.image == IMAGE
    message = fresh(job).message
    assert "ImagePullBackOff: Back-off pulling" in message and f"(image {IMAGE})" in message
