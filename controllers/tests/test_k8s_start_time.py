"""A Falcon job's start is its Kubernetes Job's `status.startTime` (cluster-behaviours.md#cb-25).

Driven like test_k8s_known_outcomes.py: the real `ResourceManager` (and exp controller) over the
in-process gRPC API server, the Kubernetes backend talking to the loopback fake API server
through the real `kubernetes` client, in both read modes (watch caches and LISTs). The rows'
creation is moved an hour back so a `startTime` (whole seconds, as Kubernetes writes it) can lie
between it and the server's now without waiting.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.utils import timezone as dj_timezone

from controllers.exp_controller import ExpController
from experiments.models import Experiment
from falcon_site.grpc.testing import falcon_api, grpc_server  # noqa: F401  (fixtures)
from jobs.models import Job

from controllers.tests.fake_k8s import fake_kube, kubeconfig  # noqa: F401  (fixtures)
from controllers.tests.test_k8s_cases import (  # noqa: F401  (fixtures)
    NS,
    k8s_clusters,
    real_pod_status,
)
from controllers.tests.test_k8s_known_outcomes import (  # noqa: F401  (fixtures)
    READY,
    clock,
    fresh,
    rm,
    submit,
)

pytestmark = pytest.mark.django_db(transaction=True)

COMPLETE = {"type": "Complete", "status": "True"}
FAILED = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
          "message": "Job has reached the specified backoff limit"}


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def created_an_hour_ago(job: Job) -> datetime:
    """Move the job and its experiment's creation an hour back; return the job's."""
    created = dj_timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk=job.pk).update(created_at=created)
    Experiment.objects.filter(pk=job.experiment_id).update(created_at=created)
    return created


def whole_seconds(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "list"])
def test_a_job_that_completed_between_two_ticks_starts_at_its_start_time(rm, fake_kube,
                                                                        falcon_api, watch):
    mgr = rm(watch=watch)
    job = submit(mgr, name="blink")
    start = whole_seconds(created_an_hour_ago(job) + timedelta(minutes=10))
    fake_kube.set_job_status(NS, job.cluster_job_name, {
        "startTime": rfc3339(start), "succeeded": 1, "conditions": [COMPLETE]})
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.started_at) == ("Succeeded", start)
    assert job.started_at <= job.finished_at
    ExpController(falcon_api, has_files=lambda url: True).tick()
    exp = Experiment.objects.get(pk=job.experiment_id)
    assert (exp.status, exp.started_at) == ("Succeeded", start)


def test_a_running_job_starts_at_its_start_time_not_at_the_tick_that_saw_it(rm, fake_kube,
                                                                             falcon_api):
    mgr = rm()
    job = submit(mgr, name="steady")
    start = whole_seconds(created_an_hour_ago(job) + timedelta(minutes=5))
    fake_kube.put_pod(NS, job.cluster_job_name, 0, real_pod_status(
        {"phase": "Running", "conditions": [READY]}))
    fake_kube.set_job_status(NS, job.cluster_job_name, {
        "startTime": rfc3339(start), "active": 1, "ready": 1})
    mgr.tick()
    assert (fresh(job).status, fresh(job).started_at) == ("Running", start)
    ExpController(falcon_api, has_files=lambda url: True).tick()
    exp = Experiment.objects.get(pk=job.experiment_id)
    assert (exp.status, exp.started_at) == ("Running", start)
    # The first start wins: a later startTime (a Job re-created by hand) changes nothing.
    fake_kube.set_job_status(NS, job.cluster_job_name, {
        "startTime": rfc3339(start + timedelta(minutes=1)), "failed": 1, "conditions": [FAILED]})
    mgr.tick()
    assert (fresh(job).status, fresh(job).started_at) == ("Failed", start)


def test_a_start_time_in_the_future_is_recorded_as_the_servers_now(rm, fake_kube, caplog):
    mgr = rm()
    job = submit(mgr, name="skewed")
    before = dj_timezone.now()
    fake_kube.set_job_status(NS, job.cluster_job_name, {
        "startTime": "2999-01-01T00:00:00Z", "succeeded": 1, "conditions": [COMPLETE]})
    mgr.tick()
    job = fresh(job)
    assert job.status == "Succeeded"
    assert before <= job.started_at <= job.finished_at  # never after it ended
    assert "after the API server's now" in caplog.text


def test_a_start_time_before_the_job_existed_is_recorded_as_its_creation(rm, fake_kube):
    mgr = rm()
    job = submit(mgr, name="early")
    fake_kube.set_job_status(NS, job.cluster_job_name, {
        "startTime": "2001-01-01T00:00:00Z", "succeeded": 1, "conditions": [COMPLETE]})
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.started_at) == ("Succeeded", job.created_at)


def test_a_job_without_a_start_time_has_none_when_it_ends_unseen(rm, fake_kube):
    """No `startTime` (the Job never ran a Pod): no start is made up for a terminal job."""
    mgr = rm()
    job = submit(mgr, name="never")
    fake_kube.set_job_status(NS, job.cluster_job_name, {"failed": 1, "conditions": [FAILED]})
    mgr.tick()
    job = fresh(job)
    assert (job.status, job.started_at) == ("Failed", None)
