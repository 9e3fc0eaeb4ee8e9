"""UpdateJobStatuses: many guarded job transitions in one call, one result per item."""
from __future__ import annotations

import grpc
import pytest

from accounts.tests.factories import UserFactory
from controllers.contract import JobStatusUpdate
from core.errors import InvalidTransition, NotFound, TransitionRace, ValidationFailed
from core.domain.history import exp_events
from core.domain.statemachine import MAX_STATUS_BATCH
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
from core.domain.statemachine import StatusChange
from jobs.services import job_update_statuses

pytestmark = pytest.mark.django_db(transaction=True)


def jobs_of(*exps) -> list[Job]:
    return [Job.objects.get(experiment=exp) for exp in exps]


def test_each_item_is_a_guarded_transition_with_its_own_result():
    user = UserFactory()
    a, b, c = jobs_of(*(make_exp(creator=user, name=n) for n in ("a", "b", "c")))
    exp_abort(exp_id=b.experiment_id, actor=user)  # b is Aborting
    out = job_update_statuses([
        StatusChange(a.pk, "Running", reason="Started", message="1/1 pods ready",
                     extra=(("cluster_job_name", "falcon-a"),)),
        StatusChange(b.pk, "Running"),                      # Aborting: refused
        StatusChange(c.pk, "Running", expected="Running"),  # read Running, is Pending
        StatusChange(999999, "Running"),
        StatusChange(c.pk, "Pending", message="ImagePullBackOff"),  # refreshed in place
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
    job_update_statuses([StatusChange(j.pk, "Running", reason="Started", message="running")
                         for j in jobs]
                        + [StatusChange(jobs[0].pk, "Failed", reason="BackoffLimitExceeded",
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
    job_update_statuses([StatusChange(job.pk, "Running", reason="R" * 400,
                                      extra=(("cluster_job_name", "n" * 400),))])
    job = Job.objects.get(pk=job.pk)
    assert len(job.reason) == 255 and job.reason.endswith("]")
    assert len(job.cluster_job_name) <= Job._meta.get_field("cluster_job_name").max_length


def test_too_many_items_or_an_unknown_status_are_refused_before_any_applies():
    (job,) = jobs_of(make_exp(name="x"))
    with pytest.raises(ValidationFailed, match=str(MAX_STATUS_BATCH)):
        job_update_statuses([StatusChange(job.pk, "Running")] * (MAX_STATUS_BATCH + 1))
    with pytest.raises(ValidationFailed) as info:
        job_update_statuses([StatusChange(job.pk, "Running"),
                             StatusChange(job.pk, "Sleeping")])
    assert "items.status" in info.value.errors
    assert Job.objects.get(pk=job.pk).status == "Pending"


def test_an_item_may_set_only_the_cluster_job_name_with_its_status():
    """`extra` is for the columns a transition records with it, never any column (a status
    set by `extra` would skip the state machine)."""
    from experiments.services import exp_update_statuses

    exp = make_exp(name="extra")
    (job,) = jobs_of(exp)
    with pytest.raises(ValidationFailed) as info:
        job_update_statuses([StatusChange(job.pk, "Running", extra=(("status", "Succeeded"),))])
    assert "items.extra" in info.value.errors
    with pytest.raises(ValidationFailed):
        exp_update_statuses([StatusChange(exp.pk, "Running",
                                          extra=(("cluster_job_name", "x"),))])
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


# -- what a batch carries: its size in bytes, text protobuf cannot encode, which item is bad --

def test_the_client_bounds_text_as_the_server_does():
    """The client cuts text before sending with the server's own numbers, so a write is never
    refused for its size and what is stored is what the server would store."""
    import controllers.grpc_client as grpc_client
    from core.domain.statemachine import MAX_STATUS_MESSAGE_BYTES

    assert grpc_client.MESSAGE_MAX_BYTES == MAX_STATUS_MESSAGE_BYTES
    for column in ("reason", "cluster_job_name"):
        assert grpc_client.TEXT_MAX_CHARS == Job._meta.get_field(column).max_length


def test_a_batch_of_long_messages_is_sent_in_calls_that_fit(falcon_api):
    """300 messages of 60 KB (failed Pods' output tails) pass gRPC's 16 MiB in one request:
    the client splits by bytes as well as by items, and every write is recorded."""
    user = UserFactory()
    jobs = jobs_of(*(make_exp(creator=user, name=f"l{i}") for i in range(300)))
    results = falcon_api.update_job_statuses(
        [JobStatusUpdate(j.pk, "Failed", reason="BackoffLimitExceeded",
                         message=f"{j.pk}:" + "x" * 60_000) for j in jobs])
    assert [r.error for r in results] == [None] * 300
    assert Job.objects.filter(status="Failed").count() == 300


def test_a_message_beyond_grpc_limits_is_cut_as_the_server_cuts_it(falcon_api):
    (job,) = jobs_of(make_exp(name="huge"))
    message = "é" * (10 * 1024 * 1024)  # 20 MiB of UTF-8
    falcon_api.update_job_status(job_id=job.pk, status="Running", message=message)
    [result] = falcon_api.update_job_statuses([JobStatusUpdate(job.pk, "Running",
                                                               message=message + "!")])
    assert result.error is None
    from core.domain.statemachine import MAX_STATUS_MESSAGE_BYTES

    stored = Job.objects.get(pk=job.pk).message
    assert len(stored.encode()) <= MAX_STATUS_MESSAGE_BYTES and "[truncated" in stored


def test_text_protobuf_cannot_encode_is_replaced_not_a_failed_batch(falcon_api):
    """A lone surrogate (not UTF-8) would make protobuf refuse the whole request."""
    user = UserFactory()
    a, b = jobs_of(*(make_exp(creator=user, name=n) for n in ("s1", "s2")))
    results = falcon_api.update_job_statuses([
        JobStatusUpdate(a.pk, "Running", message="bad \udc80 byte"),
        JobStatusUpdate(b.pk, "Running", message="fine")])
    assert [r.error for r in results] == [None, None]
    assert Job.objects.get(pk=a.pk).message == "bad ? byte"


@pytest.mark.parametrize("item,field", [
    (job_pb2.UpdateJobStatusReq(id=0, status="Running"), "items[1].id"),
    (job_pb2.UpdateJobStatusReq(id=5, status="Sleeping"), "items[1].status"),
    (job_pb2.UpdateJobStatusReq(id=5, status="Running", expected="x"), "items[1].expected"),
])
def test_a_malformed_item_is_named_by_its_index(stubs, item, field):
    request = job_pb2.UpdateJobStatusesReq(items=[
        job_pb2.UpdateJobStatusReq(id=1, status="Running"), item])
    with pytest.raises(grpc.RpcError) as info:
        stubs.jobs.UpdateJobStatuses(request, timeout=10, metadata=stubs.md)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in info.value.details()


def test_too_many_items_are_refused_before_any_is_read(stubs):
    """Even malformed, 1,001 items are refused for their number: the count comes first."""
    request = job_pb2.UpdateJobStatusesReq(
        items=[job_pb2.UpdateJobStatusReq(id=0, status="")] * (MAX_STATUS_BATCH + 1))
    with pytest.raises(grpc.RpcError) as info:
        stubs.jobs.UpdateJobStatuses(request, timeout=10, metadata=stubs.md)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {MAX_STATUS_BATCH} items" in info.value.details()
