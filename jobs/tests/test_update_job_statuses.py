"""UpdateJobStatuses: many guarded job transitions in one call, one result per item."""
from __future__ import annotations

import grpc
import pytest

from accounts.tests.factories import UserFactory
from controllers.contract import JobStatusUpdate
from core.errors import InvalidTransition, NotFound, TransitionRace, ValidationFailed
from core.history import exp_events
from core.statemachine import MAX_STATUS_BATCH
from experiments.services import exp_abort
from experiments.tests.factories import make_exp
from falcon_proto.falcon.v1 import job_pb2
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    falcon_api,
    grpc_channel,
    grpc_server,
    stubs,
)
from jobs.models import Job
from jobs.services import JobStatusChange, job_update_statuses

pytestmark = pytest.mark.django_db(transaction=True)


def jobs_of(*exps) -> list[Job]:
    return [Job.objects.get(experiment=exp) for exp in exps]


def test_each_item_is_a_guarded_transition_with_its_own_result():
    user = UserFactory()
    a, b, c = jobs_of(*(make_exp(creator=user, name=n) for n in ("a", "b", "c")))
    exp_abort(exp_id=b.experiment_id, actor=user)  # b is Aborting
    out = job_update_statuses([
        JobStatusChange(a.pk, "Running", reason="Started", message="1/1 pods ready",
                        cluster_job_name="falcon-a"),
        JobStatusChange(b.pk, "Running"),                      # Aborting: refused
        JobStatusChange(c.pk, "Running", expected="Running"),  # read Running, is Pending
        JobStatusChange(999999, "Running"),
        JobStatusChange(c.pk, "Pending", message="ImagePullBackOff"),  # refreshed in place
    ])
    assert [(o.pk, o.changed, type(o.error), o.status) for o in out] == [
        (a.pk, True, type(None), "Running"), (b.pk, False, InvalidTransition, "Aborting"),
        (c.pk, False, TransitionRace, "Pending"), (999999, False, NotFound, ""),
        (c.pk, False, type(None), "Pending")]
    a, b, c = (Job.objects.get(pk=j.pk) for j in (a, b, c))
    assert (a.status, a.reason, a.message, a.cluster_job_name) == (
        "Running", "Started", "1/1 pods ready", "falcon-a")
    assert a.started_at is not None
    assert b.status == "Aborting" and (c.status, c.message) == ("Pending", "ImagePullBackOff")
    assert "Aborting" in out[1].error.message


def test_items_with_the_same_values_share_an_update_and_each_is_in_the_history():
    user = UserFactory()
    exps = [make_exp(creator=user, name=f"e{i}") for i in range(3)]
    jobs = jobs_of(*exps)
    job_update_statuses([JobStatusChange(j.pk, "Running", reason="Started", message="running")
                         for j in jobs]
                        + [JobStatusChange(jobs[0].pk, "Failed", reason="BackoffLimitExceeded",
                                           message="exit code 3")])
    assert [(e.entity_type, e.from_status, e.to_status, e.reason)
            for e in exp_events(exp_id=exps[0].pk) if e.entity_type == "job"] == [
        ("job", "Pending", "Running", "Started"),
        ("job", "Running", "Failed", "BackoffLimitExceeded")]
    for exp, job in zip(exps[1:], jobs[1:]):
        assert [(e.from_status, e.to_status) for e in exp_events(exp_id=exp.pk)
                if e.entity_type == "job"] == [("Pending", "Running")]
        assert Job.objects.get(pk=job.pk).status == "Running"


def test_text_is_cut_to_its_column_as_a_single_transition_cuts_it():
    (job,) = jobs_of(make_exp(name="long"))
    job_update_statuses([JobStatusChange(job.pk, "Running", reason="R" * 400,
                                         cluster_job_name="n" * 400)])
    job = Job.objects.get(pk=job.pk)
    assert len(job.reason) == 255 and job.reason.endswith("]")
    assert len(job.cluster_job_name) <= Job._meta.get_field("cluster_job_name").max_length


def test_too_many_items_or_an_unknown_status_are_refused_before_any_applies():
    (job,) = jobs_of(make_exp(name="x"))
    with pytest.raises(ValidationFailed, match=str(MAX_STATUS_BATCH)):
        job_update_statuses([JobStatusChange(job.pk, "Running")] * (MAX_STATUS_BATCH + 1))
    with pytest.raises(ValidationFailed) as info:
        job_update_statuses([JobStatusChange(job.pk, "Running"),
                             JobStatusChange(job.pk, "Sleeping")])
    assert "items.status" in info.value.errors
    assert Job.objects.get(pk=job.pk).status == "Pending"


def test_an_unknown_status_is_invalid_argument_over_grpc(stubs):
    request = job_pb2.UpdateJobStatusesReq(items=[
        job_pb2.UpdateJobStatusReq(id=1, status="Sleeping")])
    with pytest.raises(grpc.RpcError) as info:
        stubs.jobs.UpdateJobStatuses(request, timeout=10, metadata=stubs.md)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Sleeping" in info.value.details()


def test_over_grpc_the_client_chunks_and_rebuilds_each_error(falcon_api, monkeypatch):
    import controllers.grpc_client as grpc_client

    monkeypatch.setattr(grpc_client, "BATCH_SIZE", 2)
    user = UserFactory()
    exps = [make_exp(creator=user, name=f"e{i}") for i in range(3)]
    jobs = jobs_of(*exps)
    exp_abort(exp_id=exps[1].pk, actor=user)
    results = falcon_api.update_job_statuses(
        [JobStatusUpdate(j.pk, "Running", message="m", cluster_job_name=f"c{j.pk}")
         for j in jobs])
    assert [(r.id, r.changed, type(r.error)) for r in results] == [
        (jobs[0].pk, True, type(None)), (jobs[1].pk, False, InvalidTransition),
        (jobs[2].pk, True, type(None))]
    assert Job.objects.get(pk=jobs[2].pk).cluster_job_name == f"c{jobs[2].pk}"
