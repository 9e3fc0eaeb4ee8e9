"""The transition history over a real in-process gRPC server: the controller is the actor."""
from __future__ import annotations

import grpc
import pytest

from core.grpc.channel import auth_metadata
from experiments.tests.factories import make_exp
from falcon_proto.falcon.v1 import experiment_pb2, history_pb2, history_pb2_grpc
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    INTERNAL_TOKEN, grpc_channel, grpc_server, stubs,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_list_exp_events_names_the_controller_and_returns_the_request_id(stubs, grpc_channel):
    exp = make_exp()
    req = experiment_pb2.UpdateExpStatusReq(id=exp.pk, status="Running", reason="JobRunning",
                                            message="1 of 1 jobs running")
    _, call = stubs.exps.UpdateExpStatus.with_call(
        req, metadata=(*stubs.md, ("x-request-id", "tick-42")), timeout=10)
    assert ("x-request-id", "tick-42") in call.trailing_metadata()

    history = history_pb2_grpc.HistoryServiceStub(grpc_channel)
    resp, call = history.ListExpEvents.with_call(
        history_pb2.ListExpEventsReq(exp_id=exp.pk), metadata=stubs.md, timeout=10)
    request_id = dict(call.trailing_metadata())["x-request-id"]
    assert len(request_id) == 32  # none sent: a new one
    assert resp.exp_id == exp.pk
    [event] = resp.events
    assert (event.entity_type, event.entity_id, event.from_status, event.to_status,
            event.reason, event.message, event.actor) == (
        "experiment", str(exp.pk), "Created", "Running", "JobRunning", "1 of 1 jobs running",
        "internal service")
    assert event.at.ToDatetime().microsecond == exp.__class__.objects.get().started_at.microsecond

    from core.observability.metrics import GRPC_CALLS

    not_found = GRPC_CALLS.labels("/falcon.v1.HistoryService/ListExpEvents", "NOT_FOUND")
    before = not_found._value.get()
    with pytest.raises(grpc.RpcError) as err:
        history.ListExpEvents(history_pb2.ListExpEventsReq(exp_id=exp.pk + 1000),
                              metadata=(*stubs.md, ("x-request-id", "nf-1")), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert ("x-request-id", "nf-1") in err.value.trailing_metadata()
    assert not_found._value.get() == before + 1  # counted by method and code (core.observability.metrics)


def test_the_actor_names_the_calling_controller(stubs):
    exp = make_exp()
    stubs.exps.UpdateExpStatus(
        experiment_pb2.UpdateExpStatusReq(id=exp.pk, status="Running"),
        metadata=(*stubs.md, ("x-falcon-client", "exp")), timeout=10)
    stubs.exps.UpdateExpStatus(
        experiment_pb2.UpdateExpStatusReq(id=exp.pk, status="Failed"),
        metadata=(*stubs.md, ("x-falcon-client", "Not A Name!")), timeout=10)
    from core.domain.history import exp_events

    assert [e.actor for e in exp_events(exp_id=exp.pk)] == [
        "internal service (exp)", "internal service"]


def test_a_user_may_read_events(grpc_channel, token_for, settings):
    from accounts.tests.factories import UserFactory
    from accounts.issuer import local_subject

    alice = UserFactory(user_id=local_subject("alice@example.com"), email="alice@example.com")
    exp = make_exp(creator=alice)
    history = history_pb2_grpc.HistoryServiceStub(grpc_channel)
    resp = history.ListExpEvents(history_pb2.ListExpEventsReq(exp_id=exp.pk),
                                 metadata=auth_metadata(token_for("alice@example.com")),
                                 timeout=10)
    assert list(resp.events) == []


def test_list_exp_events_of_a_deleted_experiment(stubs, grpc_channel):
    from accounts.tests.factories import UserFactory
    from experiments.services import exp_delete

    exp = make_exp()
    stubs.exps.UpdateExpStatus(experiment_pb2.UpdateExpStatusReq(id=exp.pk, status="Running"),
                               metadata=stubs.md, timeout=10)
    stubs.exps.UpdateExpStatus(experiment_pb2.UpdateExpStatusReq(id=exp.pk, status="Failed"),
                               metadata=stubs.md, timeout=10)
    exp_delete(exp_id=exp.pk, actor=UserFactory(is_staff=True))
    history = history_pb2_grpc.HistoryServiceStub(grpc_channel)
    resp = history.ListExpEvents(history_pb2.ListExpEventsReq(exp_id=exp.pk),
                                 metadata=stubs.md, timeout=10)
    assert [(e.from_status, e.to_status) for e in resp.events] == [
        ("Created", "Running"), ("Running", "Failed")]
