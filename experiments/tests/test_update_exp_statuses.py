"""UpdateExpStatuses: many guarded experiment transitions in one call, one result per item."""
from __future__ import annotations

import grpc
import pytest

from accounts.tests.factories import UserFactory
from controllers.contract import ExpStatusUpdate
from core.errors import InvalidTransition, NotFound, TransitionRace, ValidationFailed
from core.domain.statemachine import StatusChange
from experiments.models import Experiment
from experiments.services import (
    MAX_STATUS_BATCH,
    exp_abort,
    exp_update_statuses,
)
from experiments.tests.factories import make_exp
from falcon_proto.falcon.v1 import experiment_pb2
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    falcon_api,
    grpc_channel,
    grpc_server,
    stubs,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_item_is_a_guarded_transition_with_its_own_result():
    user = UserFactory()
    a, b, c = (make_exp(creator=user, name=n) for n in ("a", "b", "c"))
    exp_abort(exp_id=b.pk, actor=user)
    out = exp_update_statuses([
        StatusChange(a.pk, "Running", message="1 Running"),
        StatusChange(b.pk, "Running"),                       # Aborting: refused
        StatusChange(c.pk, "Running", expected="Running"),   # read Running, is Created
        StatusChange(999999, "Running"),
        StatusChange(a.pk, "Running", message="again"),      # already there: refreshed
    ])
    assert [(o.pk, o.changed, type(o.error)) for o in out] == [
        (a.pk, True, type(None)), (b.pk, False, InvalidTransition),
        (c.pk, False, TransitionRace), (999999, False, NotFound), (a.pk, False, type(None))]
    a, b, c = (Experiment.objects.get(pk=e.pk) for e in (a, b, c))
    assert (a.status, a.message) == ("Running", "again") and a.started_at is not None
    assert b.status == "Aborting" and c.status == "Created"
    assert "Aborting" in out[1].error.message and out[1].status == "Aborting"


def test_too_many_items_are_refused_naming_the_limit():
    with pytest.raises(ValidationFailed, match=str(MAX_STATUS_BATCH)):
        exp_update_statuses([StatusChange(1, "Running")] * (MAX_STATUS_BATCH + 1))


def test_over_grpc_the_client_chunks_and_rebuilds_each_error(falcon_api, monkeypatch):
    import controllers.grpc_client as grpc_client

    monkeypatch.setattr(grpc_client, "BATCH_SIZE", 2)
    user = UserFactory()
    exps = [make_exp(creator=user, name=f"e{i}") for i in range(3)]
    exp_abort(exp_id=exps[1].pk, actor=user)
    results = falcon_api.update_exp_statuses(
        [ExpStatusUpdate(e.pk, "Running", message="m") for e in exps])
    assert [(r.id, r.changed, type(r.error)) for r in results] == [
        (exps[0].pk, True, type(None)), (exps[1].pk, False, InvalidTransition),
        (exps[2].pk, True, type(None))]


def test_an_unknown_status_is_invalid_argument(stubs):
    request = experiment_pb2.UpdateExpStatusesReq(items=[
        experiment_pb2.UpdateExpStatusReq(id=1, status="Sleeping")])
    with pytest.raises(grpc.RpcError) as info:
        stubs.exps.UpdateExpStatuses(request, timeout=10, metadata=stubs.md)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_every_applied_item_is_in_the_transition_history_in_order():
    from core.domain.history import exp_events

    user = UserFactory()
    a, b = (make_exp(creator=user, name=n) for n in ("a", "b"))
    exp_update_statuses([
        StatusChange(a.pk, "Running", message="1 Running"),
        StatusChange(b.pk, "Running", message="2 Running"),
        StatusChange(a.pk, "Failed", reason="JobFailed", message="job 1 failed"),
        StatusChange(b.pk, "Aborted"),  # refused (Running -> Aborted is not allowed)
    ])
    assert [(e.from_status, e.to_status, e.reason, e.message)
            for e in exp_events(exp_id=a.pk)] == [
        ("Created", "Running", "", "1 Running"),
        ("Running", "Failed", "JobFailed", "job 1 failed")]
    assert [(e.from_status, e.to_status, e.message) for e in exp_events(exp_id=b.pk)] == [
        ("Created", "Running", "2 Running")]


def test_a_malformed_item_is_named_by_its_index_and_the_count_comes_first(stubs):
    request = experiment_pb2.UpdateExpStatusesReq(items=[
        experiment_pb2.UpdateExpStatusReq(id=1, status="Running"),
        experiment_pb2.UpdateExpStatusReq(id=2, status="Sleeping")])
    with pytest.raises(grpc.RpcError) as info:
        stubs.exps.UpdateExpStatuses(request, timeout=10, metadata=stubs.md)
    assert "items[1].status" in info.value.details()
    request = experiment_pb2.UpdateExpStatusesReq(
        items=[experiment_pb2.UpdateExpStatusReq(id=0, status="")] * (MAX_STATUS_BATCH + 1))
    with pytest.raises(grpc.RpcError) as info:
        stubs.exps.UpdateExpStatuses(request, timeout=10, metadata=stubs.md)
    assert f"at most {MAX_STATUS_BATCH} items" in info.value.details()


def test_a_batch_of_long_messages_is_sent_in_calls_that_fit(falcon_api):
    user = UserFactory()
    exps = [make_exp(creator=user, name=f"m{i}") for i in range(300)]
    results = falcon_api.update_exp_statuses(
        [ExpStatusUpdate(e.pk, "Running", message="y" * 60_000) for e in exps])
    assert [r.error for r in results] == [None] * 300
    assert Experiment.objects.filter(status="Running").count() == 300
