"""Pods' logs kept in the artifact store by the resource manager: when a Kubernetes Job
finishes and before an aborted one is deleted. The real `kubernetes` client against the
loopback fake API server, the real gRPC API and database, the local artifact store; the
API server then serves the logs with no cluster access."""
from __future__ import annotations

import pytest

from artifacts.store import job_log_url, store_for
from controllers.cluster_backends import k8s_logs
from controllers.cluster_backends.base import BackendError
from controllers.resource_manager import ResourceManager
from controllers.tests.fake_k8s import fake_kube, kubeconfig  # noqa: F401
from controllers.tests.test_k8s_backend import NS, job_view, make_backend
from experiments.files import exp_log_chunk
from experiments.models import Experiment
from experiments.services import exp_abort
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import falcon_api, grpc_server  # noqa: F401  (fixtures)
from jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

TERMINATED = {"phase": "Succeeded", "containerStatuses": [{
    "name": "main", "ready": False, "restartCount": 0, "image": "busybox", "imageID": "",
    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}
RUNNING = {"phase": "Running", "containerStatuses": [{
    "name": "main", "ready": True, "restartCount": 0, "image": "busybox", "imageID": "",
    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
UNSCHEDULED = {"phase": "Pending"}


@pytest.fixture(autouse=True)
def _forget_kept():
    k8s_logs._kept.clear()
    k8s_logs._failures.clear()


def tick_until(manager, job, status, tries=50):
    for _ in range(tries):
        manager.tick()
        row = Job.objects.get(pk=job.pk)
        if row.status == status:
            return row
    raise AssertionError(f"job {job.pk} never became {status}")


def test_a_finished_jobs_pod_logs_reach_the_store_and_outlive_the_pods(falcon_api, fake_kube,
                                                                       kubeconfig):
    exp = make_exp(name="k8s-logs", cluster_name="a", replica=2, image="busybox")
    job = exp.jobs.get()
    backend = make_backend(kubeconfig)
    manager = ResourceManager(falcon_api, {"a": backend})
    job = tick_until(manager, job, "Pending")
    name = job.cluster_job_name
    pods = fake_kube.spawn_pods(NS, name, statuses=[TERMINATED, TERMINATED])
    fake_kube.pod_logs[pods[0]] = b"replica zero\nsaid this\n"
    fake_kube.pod_logs[pods[1]] = b"replica one\n"
    fake_kube.set_job_status(NS, name, {"succeeded": 2, "conditions": [
        {"type": "Complete", "status": "True"}]})
    tick_until(manager, job, "Succeeded")

    for index, text in ((0, b"replica zero\nsaid this\n"), (1, b"replica one\n")):
        url = job_log_url(job.artifact_path, "main", index)
        assert store_for(url).read_range(url) == text
    backend.delete(job_view(job.pk, exp_id=exp.pk, exp_name=exp.name))  # the Pods go
    fake_kube.reap()
    assert not fake_kube.list("pods", NS)
    chunk = exp_log_chunk(exp=Experiment.objects.get(pk=exp.pk), replica=1)
    assert (chunk.data, chunk.source, chunk.complete) == (b"replica one\n", "store", True)


def test_an_aborted_jobs_output_is_kept_before_its_pods_are_deleted(falcon_api, fake_kube,
                                                                    kubeconfig):
    exp = make_exp(name="k8s-abort", cluster_name="a", replica=2, image="busybox")
    job = exp.jobs.get()
    manager = ResourceManager(falcon_api, {"a": make_backend(kubeconfig)})
    job = tick_until(manager, job, "Pending")
    pods = fake_kube.spawn_pods(NS, job.cluster_job_name, statuses=[RUNNING, UNSCHEDULED])
    fake_kube.pod_logs[pods[0]] = b"step 1\nstep 2\n"
    exp_abort(exp_id=exp.pk, actor=exp.creator)
    tick_until(manager, job, "Aborted")

    url = job_log_url(job.artifact_path, "main", 0)
    assert store_for(url).read_range(url) == b"step 1\nstep 2\n"
    never_started = job_log_url(job.artifact_path, "main", 1)
    assert store_for(never_started).size_of(never_started) is None
    log_reads = [r for r in fake_kube.requests if r.resource == "pods/log"]
    assert [r.name for r in log_reads] == [pods[0]]  # once, not on every aborting tick


def test_a_store_that_refuses_is_retried_then_given_up(fake_kube, kubeconfig, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a folder should be")
    backend = make_backend(kubeconfig)
    view = job_view(11, exp_id=5)
    view = type(view)(**{**view.__dict__, "artifact_path": (blocker / "exp" / "main").as_uri()})
    backend.submit(view)
    pods = fake_kube.spawn_pods(NS, backend.name_of(view), statuses=[TERMINATED])
    fake_kube.pod_logs[pods[0]] = b"x\n"
    for attempt in (1, 2):
        with pytest.raises(BackendError, match=f"attempt {attempt} of 3"):
            k8s_logs.keep_logs(backend, view)
    k8s_logs.keep_logs(backend, view)  # the third failure gives up: the job goes on
    k8s_logs.keep_logs(backend, view)  # and is not tried again
    assert sum(r.resource == "pods/log" for r in fake_kube.requests) == 3


def test_the_runtimes_line_times_are_kept_beside_the_log(falcon_api, fake_kube, kubeconfig):
    """The Pod log is read with `timestamps=true`: the store keeps the log as written and the
    container runtime's time of each line in its times file (`exp logs --timestamps`)."""
    exp = make_exp(name="k8s-times", cluster_name="a", image="busybox")
    job = exp.jobs.get()
    manager = ResourceManager(falcon_api, {"a": make_backend(kubeconfig)})
    job = tick_until(manager, job, "Pending")
    (pod,) = fake_kube.spawn_pods(NS, job.cluster_job_name, statuses=[TERMINATED])
    fake_kube.pod_logs[pod] = b"first\nsecond line\nlast without newline"
    fake_kube.pod_log_times[pod] = ["2026-01-01T00:00:00.5Z", "2026-01-01T00:00:01Z",
                                    "2026-01-01T00:00:02.123456789Z"]
    fake_kube.set_job_status(NS, job.cluster_job_name, {"succeeded": 1, "conditions": [
        {"type": "Complete", "status": "True"}]})
    tick_until(manager, job, "Succeeded")

    url = job_log_url(job.artifact_path, "main", 0)
    assert store_for(url).read_range(url) == b"first\nsecond line\nlast without newline"
    assert any(r.resource == "pods/log" and r.query.get("timestamps") == "true"
               for r in fake_kube.requests)
    chunk = exp_log_chunk(exp=Experiment.objects.get(pk=exp.pk), timestamps=True)
    assert chunk.data == (b"2026-01-01T00:00:00.500000000Z first\n"
                          b"2026-01-01T00:00:01.000000000Z second line\n"
                          b"2026-01-01T00:00:02.123456789Z last without newline")
    assert chunk.has_times and chunk.next_offset == len(b"first\nsecond line\nlast without newline")
