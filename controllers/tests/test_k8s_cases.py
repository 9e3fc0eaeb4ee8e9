"""The 13 cases of fixtures/k8s-job-status.yaml and docs/cluster-behaviours.md, end to end.

Each test creates an experiment through CreateExp on a `kubernetes` cluster of the clusters file,
runs the real `ResourceManager` against the in-process gRPC API server, and its Kubernetes
backend (built from the clusters file) talks to the loopback fake API through the real client.
The case file's Job status and Pods are installed in the fake as the Job controller and kubelet
would, and the Falcon Job's status and message are read from the database.
"""
from __future__ import annotations

import copy
import threading
from pathlib import Path

import pytest
import yaml

from controllers.contract import ListFilter
from controllers.cluster_backends.loading import load_backends
from controllers.resource_manager import ResourceManager
from experiments.services import exp_abort, exp_update_status
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import falcon_api, grpc_server  # noqa: F401  (fixtures)
from jobs.models import Job

from controllers.tests.fake_k8s import fake_kube, kubeconfig  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

# The project's own Kubernetes status cases: a Job status and Pods as a real API server returns
# them, and the Falcon status each must map to (docs/cluster-behaviours.md). Edit them here.
CASES_FILE = Path(__file__).resolve().parent / "fixtures" / "k8s-job-status.yaml"
CASES = {c["id"]: c for c in yaml.safe_load(CASES_FILE.read_text())["cases"]}
NS = "falcon-jobs"
IMAGE = "gcr.io/acme/sglang_jax:no-such-tag"


def test_the_case_file_has_the_thirteen_cases():
    assert len(CASES) == 13


@pytest.fixture
def k8s_clusters(settings, kubeconfig, tmp_path):
    """A clusters file with `k8s-a` (kubernetes, on the fake) besides `local`."""
    def write(**k8s_options):
        path = tmp_path / "clusters-k8s.yaml"
        # A tick waits for its caches to reach the API server's resourceVersion at most
        # `cache_sync_wait`; it returns as soon as they do. The product's 1 s can pass on a
        # loaded machine before a watch event arrives, and a tick would then act on a cache
        # a step behind what the test wrote: these tests are about decisions on what was
        # observed, so they wait for the event (test_k8s_stale_cache.py covers lagging caches).
        entry = {"backend": "kubernetes", "namespace": NS, "kubeconfig": str(kubeconfig),
                 "backoff_initial": 0.01, "backoff_max": 0.05, "request_timeout": 5,
                 "cache_sync_wait": 60}
        entry.update(k8s_options)
        path.write_text(yaml.safe_dump({"clusters": {
            "local": {"backend": "local", "state_dir": str(tmp_path / "local")},
            "k8s-a": entry}}))
        settings.FALCON_CLUSTERS_FILE = str(path)
        return path

    write()
    return write


class FakeClock:
    """The resource manager's monotonic clock: its pending timeout passes when the test says."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def manager_clock():
    return FakeClock()


@pytest.fixture
def manager(falcon_api, k8s_clusters, manager_clock):
    def build(pending_timeout=None, **k8s_options):
        if k8s_options:
            k8s_clusters(**k8s_options)
        return ResourceManager(falcon_api, load_backends(["k8s-a"]),
                               pending_timeout=pending_timeout, clock=manager_clock)

    return build


def real_pod_status(status: dict) -> dict:
    """Add the fields a kubelet always reports that the case file leaves out for brevity.

    core/v1 ContainerStatus requires `name`, `image`, `imageID`, `ready`, `restartCount`.
    """
    status = copy.deepcopy(status)
    for cs in status.get("containerStatuses") or []:
        cs.setdefault("image", IMAGE)
        cs.setdefault("imageID", "")
        cs.setdefault("ready", False)
        cs.setdefault("restartCount", 0)
    return status


def submitted(manager, *, replica: int, name: str = "case") -> Job:
    exp = make_exp(name=name, cluster_name="k8s-a", image=IMAGE, replica=replica)
    manager.tick()
    job = Job.objects.get(experiment=exp)
    assert job.status == "Pending" and job.cluster_job_name, (job.reason, job.message)
    return job


def install(fake, job: Job, case: dict, status: dict | None = None) -> None:
    for index, pod in enumerate(case.get("pods") or []):
        fake.put_pod(NS, job.cluster_job_name, index, real_pod_status(pod))
    fake.set_job_status(NS, job.cluster_job_name,
                        case["job_status"] if status is None else status)


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


SNAPSHOT_CASES = [cid for cid, c in CASES.items() if "job_status" in c]


@pytest.mark.parametrize("case_id", SNAPSHOT_CASES)
def test_case_maps_to_the_expected_falcon_status(case_id, manager, fake_kube):
    case = CASES[case_id]
    mgr = manager()
    job = submitted(mgr, replica=case["replica"])
    job_spec = fake_kube.get("jobs", NS, job.cluster_job_name)["spec"]
    # cluster-behaviours.md#cb-9: every replica is a completion.
    assert job_spec["completions"] == job_spec["parallelism"] == case["replica"]
    install(fake_kube, job, case)
    mgr.tick()
    job = fresh(job)
    expect = case["expect"]
    assert job.status == expect["status"], (job.reason, job.message)
    for word in expect.get("message_has", []):
        assert str(word) in job.message, job.message


def test_case_retried_then_complete_is_never_failed_before_it_succeeds(manager, fake_kube):
    case = CASES["retried-then-complete"]
    mgr = manager(backoff_limit=case["backoff_limit"])
    job = submitted(mgr, replica=case["replica"])
    assert fake_kube.get("jobs", NS, job.cluster_job_name)["spec"]["backoffLimit"] == 2
    seen = []
    for status in case["sequence"]:
        fake_kube.set_job_status(NS, job.cluster_job_name, status)
        mgr.tick()
        seen.append(fresh(job).status)
    assert seen[0] in ("Pending", "Running") and seen[1] == "Succeeded"


def test_case_job_deleted_behind_falcon_fails_within_one_tick(manager, fake_kube):
    case = CASES["job-deleted-behind-falcon"]
    mgr = manager()
    job = submitted(mgr, replica=case["replica"])
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 1, "ready": 1})
    mgr.tick()
    assert fresh(job).status == case["falcon_status_before"]
    with fake_kube.lock:
        del fake_kube.objects[("jobs", NS, job.cluster_job_name)]
    mgr.tick()  # one tick (cluster-behaviours.md#cb-12)
    job = fresh(job)
    assert job.status == case["expect"]["status"]
    assert all(w in job.message for w in case["expect"]["message_has"]), job.message
    mgr.tick()
    assert fake_kube.count("POST", "jobs") == 1  # no silent re-creation
    assert fake_kube.list("jobs", NS) == []


def test_case_abort_of_a_job_already_gone_is_aborted(manager, fake_kube):
    case = CASES["abort-job-already-gone"]
    mgr = manager()
    job = submitted(mgr, replica=case["replica"])
    with fake_kube.lock:
        del fake_kube.objects[("jobs", NS, job.cluster_job_name)]
    exp_abort(exp_id=job.experiment_id, actor=job.experiment.creator)
    assert fresh(job).status == case["falcon_status_before"]
    mgr.tick()
    assert fresh(job).status == case["expect"]["status"]
    assert fake_kube.count("DELETE", "jobs") == 1


# -- cluster-behaviours.md through the resource manager -------------------------------------------

def test_active_pending_pods_are_not_running(manager, fake_kube):
    mgr = manager()
    job = submitted(mgr, replica=2)
    install(fake_kube, job, CASES["pending-unschedulable"])
    mgr.tick()
    job = fresh(job)
    assert job.status == "Pending" and job.reason == "Unschedulable"
    assert "Insufficient google.com/tpu" in job.message and "0/2 pods ready" in job.message


def test_image_pull_backoff_names_the_image_and_the_pending_timeout_fails_it(manager,
                                                                           fake_kube,
                                                                           manager_clock):
    mgr = manager(pending_timeout=0.3)
    job = submitted(mgr, replica=1)
    install(fake_kube, job, CASES["image-pull-backoff"])
    mgr.tick()
    job = fresh(job)
    assert job.status == "Pending" and job.reason == "ImagePullBackOff"
    assert "no-such-tag" in job.message
    manager_clock.advance(0.4)
    mgr.tick()
    job = fresh(job)
    assert job.status == "Failed" and job.reason == "PendingTimeout"
    assert "ImagePullBackOff" in job.message
    # The stuck Job is deleted with its Pods, so it cannot start later for a Failed job.
    assert fake_kube.list("jobs", NS) == [] and fake_kube.list("pods", NS) == []


def test_a_terminal_status_never_changes_afterwards(manager, fake_kube):
    mgr = manager()
    job = submitted(mgr, replica=1)
    install(fake_kube, job, CASES["complete"], status=CASES["complete"]["job_status"])
    mgr.tick()
    assert fresh(job).status == "Succeeded"
    fake_kube.set_job_status(NS, job.cluster_job_name, CASES["deadline-exceeded"]["job_status"])
    mgr.tick()
    assert fresh(job).status == "Succeeded"


def test_abort_waits_until_no_pod_is_left(manager, fake_kube):
    fake_kube.linger_pods = True
    mgr = manager()
    job = submitted(mgr, replica=2)
    fake_kube.spawn_pods(NS, job.cluster_job_name, statuses=[
        real_pod_status(CASES["image-pull-backoff"]["pods"][0]),
        real_pod_status(CASES["pending-unschedulable"]["pods"][0])])
    exp_abort(exp_id=job.experiment_id, actor=job.experiment.creator)
    mgr.tick()
    assert fresh(job).status == "Aborting"
    assert all(p["metadata"].get("deletionTimestamp") for p in fake_kube.list("pods", NS))
    mgr.tick()
    assert fresh(job).status == "Aborting"
    fake_kube.reap()
    mgr.tick()
    assert fresh(job).status == "Aborted"
    assert fake_kube.list("pods", NS) == [] and fake_kube.list("jobs", NS) == []


def test_abort_of_a_finished_experiment_is_a_clean_409(manager, fake_kube, auth_api):
    mgr = manager()
    res = auth_api.post("/api/v1/exps", {
        "name": "done", "cluster_name": "k8s-a", "exp_type": "profiling",
        "role_to_task_spec": {"main": {"command": "true", "image": IMAGE}}}, format="json")
    assert res.status_code == 201, res.content
    exp_id = res.json()["id"]
    mgr.tick()
    job = Job.objects.get(experiment_id=exp_id)
    fake_kube.set_job_status(NS, job.cluster_job_name, CASES["complete"]["job_status"])
    mgr.tick()
    assert fresh(job).status == "Succeeded"
    exp_update_status(exp_id=exp_id, status="Running")  # what the exp controller does
    exp_update_status(exp_id=exp_id, status="Succeeded")
    res = auth_api.post(f"/api/v1/exps/{exp_id}/abort")
    assert res.status_code == 409, res.content
    assert fake_kube.count("DELETE") == 0


def test_a_cluster_that_stalls_fails_one_tick_and_the_next_tick_runs(manager, fake_kube):
    mgr = manager(request_timeout=0.2, retries=1)
    job = submitted(mgr, replica=1)
    fake_kube.inject("GET", "jobs", hold=threading.Event(), times=2)  # answered at close
    stats = mgr.tick()
    assert stats.failed == 1 and "k8s-a" in stats.errors[0]
    assert fresh(job).status == "Pending"
    fake_kube.set_job_status(NS, job.cluster_job_name, {"active": 1, "ready": 1})
    mgr.tick()
    assert fresh(job).status == "Running"


def test_a_restarted_manager_adopts_the_running_job(manager, fake_kube, falcon_api):
    mgr = manager()
    exp = make_exp(name="adopt", cluster_name="k8s-a", image=IMAGE)
    job = Job.objects.get(experiment=exp)
    backend = load_backends(["k8s-a"])["k8s-a"]
    # The previous manager created the cluster Job and died before recording its name.
    view = falcon_api.list_jobs(ListFilter(ids=(job.pk,)))[0]
    backend.submit(view)
    fake_kube.set_job_status(NS, backend.cluster_job_name(view), {"active": 1, "ready": 1})
    mgr.tick()
    job = fresh(job)
    assert job.status == "Running" and job.cluster_job_name == backend.cluster_job_name(view)
    # The manager submits again before recording the name (to finish what the dead one left
    # undone): the create answers 409 and the existing Job is adopted, never duplicated.
    assert len(fake_kube.list("jobs", NS)) == 1 and fake_kube.count("POST", "jobs") == 2
    mgr.tick()
    assert fake_kube.count("POST", "jobs") == 2  # the name is recorded: no more submits


def test_a_job_the_api_server_refuses_fails_with_its_message_and_is_not_retried(manager,
                                                                             fake_kube):
    mgr = manager()
    exp = make_exp(name="noimage", cluster_name="k8s-a", image=IMAGE)
    job = Job.objects.get(experiment=exp)
    # A spec CreateExp would refuse today (say, accepted before a rule existed): the API
    # server is the last judge and answers 422 Invalid.
    Job.objects.filter(pk=job.pk).update(task_spec={**job.task_spec, "image": ""})
    stats = mgr.tick()
    job = fresh(job)
    assert job.status == "Failed" and job.reason == "ClusterRejected", (job.reason, job.message)
    assert "spec.template.spec.containers[0].image: Required value" in job.message
    assert stats.failed == 1 and fake_kube.count("POST", "jobs") == 1
    mgr.tick()
    assert fake_kube.count("POST", "jobs") == 1 and fresh(job).status == "Failed"


def test_a_rejected_service_fails_the_job_and_deletes_the_job_it_made(manager, fake_kube):
    mgr = manager()
    exp = make_exp(name="rbac", cluster_name="k8s-a", image=IMAGE, device_type="tpu-v5p",
                   device_count=8, device_topo="2x2x2")
    job = Job.objects.get(experiment=exp)
    fake_kube.inject("POST", "services", status=422, reason="Invalid", times=1)
    mgr.tick()
    job = fresh(job)
    assert job.status == "Failed" and job.reason == "ClusterRejected"
    assert "422" in job.message and "injected 422" in job.message
    # A Failed job is never observed again: the Job must not be left to run unwatched.
    assert fake_kube.list("jobs", NS) == []


BACKOFF_FAILED = {"failed": 1, "conditions": [
    {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
     "message": "Job has reached the specified backoff limit"},
    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
     "message": "Job has reached the specified backoff limit"}]}


@pytest.mark.parametrize("pod,words", [
    # Node-pressure eviction by the kubelet: phase Failed, status.reason Evicted.
    ({"phase": "Failed", "reason": "Evicted",
      "message": "The node was low on resource: memory. Threshold quantity: 100Mi.",
      "containerStatuses": [{"name": "main", "state": {"terminated": {
          "exitCode": 137, "reason": "Error"}}}]},
     ["evicted (Evicted)", "The node was low on resource: memory", "exit code 137"]),
    # Preemption by the scheduler: the DisruptionTarget condition says who ended the Pod.
    ({"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
         "message": "Preempted in order to admit critical pod"}],
      "containerStatuses": [{"name": "main", "state": {"terminated": {
          "exitCode": 137, "reason": "Error"}}}]},
     ["preempted (PreemptionByScheduler)", "Preempted in order to admit critical pod"]),
])
def test_an_evicted_or_preempted_pod_is_named_in_the_failed_message(manager, fake_kube, pod,
                                                                     words):
    mgr = manager()
    job = submitted(mgr, replica=1)
    fake_kube.put_pod(NS, job.cluster_job_name, 0, real_pod_status(pod))
    fake_kube.set_job_status(NS, job.cluster_job_name, BACKOFF_FAILED)
    mgr.tick()
    job = fresh(job)
    assert job.status == "Failed" and job.reason == "BackoffLimitExceeded"
    for word in words:
        assert word in job.message, job.message


def test_a_suspended_job_is_pending_suspended_and_never_timed_out(manager, fake_kube,
                                                                  manager_clock):
    mgr = manager(pending_timeout=0.3)
    job = submitted(mgr, replica=1)
    name = job.cluster_job_name

    def suspend(on: bool):
        # What Kueue (or `kubectl patch --type=merge -p '{"spec":{"suspend":true}}'`) and the
        # Job controller then do: spec.suspend, and the Suspended condition.
        with fake_kube.lock:
            fake_kube.objects[("jobs", NS, name)]["spec"]["suspend"] = on
        fake_kube.set_job_status(NS, name, {"conditions": [
            {"type": "Suspended", "status": "True" if on else "False",
             "reason": "JobSuspended" if on else "JobResumed",
             "message": "Job suspended" if on else "Job resumed"}]})

    suspend(True)
    mgr.tick()
    job = fresh(job)
    assert job.status == "Pending" and job.reason == "Suspended", (job.reason, job.message)
    assert "suspended" in job.message
    manager_clock.advance(0.4)  # longer than the pending timeout
    mgr.tick()
    job = fresh(job)
    assert job.status == "Pending" and job.reason == "Suspended", (job.reason, job.message)
    assert fake_kube.get("jobs", NS, name) is not None and fake_kube.count("DELETE") == 0
    # Resumed: the clock starts now, not at submit, so it is not failed on the spot ...
    suspend(False)
    mgr.tick()
    assert fresh(job).status == "Pending" and fake_kube.count("DELETE") == 0
    # ... but a resumed job that then cannot start is timed out as usual.
    manager_clock.advance(0.4)
    mgr.tick()
    assert fresh(job).reason == "PendingTimeout"


def test_a_service_whose_create_failed_is_made_when_the_job_is_adopted(manager, fake_kube):
    mgr = manager()
    exp = make_exp(name="slice", cluster_name="k8s-a", image=IMAGE, device_type="tpu-v5p",
                   device_count=8, device_topo="2x2x2")
    job = Job.objects.get(experiment=exp)
    # The Job is created, then every attempt at its headless Service fails (the retries of
    # one call run out): the tick fails after the Job exists, as a crash between them would.
    fake_kube.inject("POST", "services", status=503, reason="ServiceUnavailable", times=4)
    stats = mgr.tick()
    assert stats.failed == 1 and fresh(job).cluster_job_name == ""
    name = fake_kube.list("jobs", NS)[0]["metadata"]["name"]
    assert fake_kube.get("services", NS, name) is None
    mgr.tick()  # observes the Job with no recorded name: submits again, adopting it
    svc = fake_kube.get("services", NS, name)
    assert svc is not None and svc["spec"]["clusterIP"] == "None"
    assert svc["metadata"]["ownerReferences"][0]["uid"] == \
        fake_kube.get("jobs", NS, name)["metadata"]["uid"]
    job = fresh(job)
    assert job.cluster_job_name == name and job.status == "Pending"
    assert len(fake_kube.list("jobs", NS)) == 1


def test_a_forbidden_create_is_retried_and_said_in_the_message(manager, fake_kube):
    """403 is a full ResourceQuota or an RBAC rule: it clears or an operator fixes it; the job
    waits with the refusal in its message instead of failing."""
    mgr = manager()
    exp = make_exp(name="quota", cluster_name="k8s-a", image=IMAGE)
    job = Job.objects.get(experiment=exp)
    fake_kube.inject("POST", "jobs", status=403, reason="Forbidden", times=1)
    mgr.tick()
    job = fresh(job)
    assert job.status == "Pending" and job.reason == "ClusterError"
    assert "403" in job.message
    mgr.tick()  # the quota cleared: the next tick creates the Job
    assert fresh(job).cluster_job_name and len(fake_kube.list("jobs", NS)) == 1
