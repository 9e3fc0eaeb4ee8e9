"""ExperimentService over a real gRPC channel, plus the server's wiring (auth, health,
reflection, generated code, `manage.py rungrpc`)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from google.protobuf.descriptor_pool import DescriptorPool

from accounts.tests.factories import UserFactory
from experiments.grpc.experiment_servicer import ExperimentServicer
from experiments.models import Experiment
from core.domain.statuses import ExpStatus
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp
from core.grpc.channel import auth_metadata
from core.grpc.errors import ERROR_CODE_KEY, ERROR_FIELDS_KEY
from falcon_proto.falcon.v1 import common_pb2, experiment_pb2
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    INTERNAL_TOKEN, grpc_channel, grpc_server, stubs,
)
from jobs.models import Job
from core.domain.statuses import JobStatus
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"main": {"command": "python bench.py", "replica": 2, "envs": {"A": 1}},
        "worker": {"command": "python worker.py"}}


def rpc_error(call, request, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=10, **kwargs)
    return info.value


def trailers(err: grpc.RpcError) -> dict[str, str]:
    return dict(err.trailing_metadata() or ())


def create_req(**overrides) -> experiment_pb2.CreateExpReq:
    fields = {"name": "bench-1", "cluster_name": "local", "exp_type": "profiling",
              "role_to_task_spec_json": json.dumps(SPEC), "config": "model: x\n",
              "creator_email": "carol@example.com"}
    fields.update(overrides)
    return experiment_pb2.CreateExpReq(**fields)


# -- CreateExp -------------------------------------------------------------------------------

def test_create_exp_writes_exp_jobs_and_artifact(stubs):
    carol = UserFactory(email="carol@example.com")
    resp = stubs.exps.CreateExp(create_req(priority=5), metadata=stubs.md, timeout=10)
    # The reply: id, status, names, creator, artifact; not the config, specs and jobs just sent.
    assert resp.changed and resp.id == resp.exp.id > 0
    assert (resp.exp.name, resp.exp.status, resp.exp.priority) == ("bench-1", "Created", 5)
    assert resp.exp.artifact.status == "Created"
    assert not (resp.exp.config or resp.exp.role_to_task_spec_json or resp.exp.jobs)
    exp = stubs.exps.GetExp(experiment_pb2.GetExpReq(id=resp.id), metadata=stubs.md, timeout=10)
    assert exp.config == "model: x\n"
    assert exp.creator_id == carol.pk and exp.creator_email == "carol@example.com"
    assert [j.role for j in exp.jobs] == ["main", "worker"]
    assert {j.status for j in exp.jobs} == {"Pending"}
    main = json.loads(exp.jobs[0].task_spec_json)
    assert main["replica"] == 2 and main["envs"] == {"A": "1"}  # ints stay ints, envs strings
    assert exp.artifact.status == "Created" and exp.artifact.path == exp.artifact_path
    assert exp.HasField("created_at") and not exp.HasField("started_at")
    assert Job.objects.filter(experiment_id=exp.id).count() == 2


def test_create_exp_priority_defaults_to_minus_one(stubs):
    UserFactory(email="carol@example.com")
    exp = stubs.exps.CreateExp(create_req(), metadata=stubs.md, timeout=10).exp
    assert exp.priority == -1


def test_create_exp_invalid_fields_are_named(stubs):
    UserFactory(email="carol@example.com")
    bad = {"main": {"command": "", "replica": 0}}
    err = rpc_error(stubs.exps.CreateExp,
                    create_req(name="", role_to_task_spec_json=json.dumps(bad)),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "role_to_task_spec.main.replica" in err.details()
    assert "role_to_task_spec.main.command" in err.details() and "name" in err.details()
    meta = trailers(err)
    assert meta[ERROR_CODE_KEY] == "invalid"
    assert set(json.loads(meta[ERROR_FIELDS_KEY])) == {
        "name", "role_to_task_spec.main.command", "role_to_task_spec.main.replica"}
    assert not Experiment.objects.exists()


def test_create_exp_rejects_json_that_does_not_parse(stubs):
    UserFactory(email="carol@example.com")
    err = rpc_error(stubs.exps.CreateExp, create_req(role_to_task_spec_json="{main:"),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "role_to_task_spec_json" in err.details()


def test_create_exp_config_over_1mib_is_too_large(stubs):
    UserFactory(email="carol@example.com")
    err = rpc_error(stubs.exps.CreateExp, create_req(config="x" * (1024 * 1024 + 1)),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert trailers(err)[ERROR_CODE_KEY] == "too_large" and "config" in err.details()


def test_create_exp_with_service_token_needs_a_known_creator(stubs):
    err = rpc_error(stubs.exps.CreateExp, create_req(creator_email=""), metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "creator_email" in err.details()
    err = rpc_error(stubs.exps.CreateExp, create_req(creator_email="nobody@example.com"),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "creator_email" in err.details()


def test_create_exp_with_user_jwt_uses_the_caller_as_creator(stubs, token_for):
    md = auth_metadata(token_for("dave@example.com"))
    exp = stubs.exps.CreateExp(create_req(creator_email=""), metadata=md, timeout=10).exp
    assert exp.creator_email == "dave@example.com"  # registered on first sight
    err = rpc_error(stubs.exps.CreateExp, create_req(creator_email="carol@example.com"),
                    metadata=md)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert trailers(err)[ERROR_CODE_KEY] == "permission_denied"


# -- UpdateExpStatus -------------------------------------------------------------------------

def test_update_exp_status_applies_a_guarded_transition(stubs):
    exp = make_exp()
    req = experiment_pb2.UpdateExpStatusReq(id=exp.pk, status="Running", reason="JobRunning",
                                            message="main is running")
    resp = stubs.exps.UpdateExpStatus(req, metadata=stubs.md, timeout=10)
    assert resp.changed and resp.exp.status == "Running" and resp.exp.reason == "JobRunning"
    assert resp.exp.HasField("started_at")
    assert not (resp.exp.jobs or resp.exp.config or resp.exp.role_to_task_spec_json)
    again = stubs.exps.UpdateExpStatus(
        experiment_pb2.UpdateExpStatusReq(id=exp.pk, status="Running"), metadata=stubs.md,
        timeout=10)
    assert not again.changed and again.exp.reason == "JobRunning"  # unset reason is kept


def test_update_exp_status_errors(stubs):
    exp = make_exp()
    err = rpc_error(stubs.exps.UpdateExpStatus,
                    experiment_pb2.UpdateExpStatusReq(id=exp.pk, status="Aborted"),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert trailers(err)[ERROR_CODE_KEY] == "invalid_transition"

    err = rpc_error(stubs.exps.UpdateExpStatus,
                    experiment_pb2.UpdateExpStatusReq(id=exp.pk, status="Running",
                                                      expected="Running"),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.ABORTED
    assert trailers(err)[ERROR_CODE_KEY] == "transition_race"

    err = rpc_error(stubs.exps.UpdateExpStatus,
                    experiment_pb2.UpdateExpStatusReq(id=exp.pk, status="Done"),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "status" in err.details()

    err = rpc_error(stubs.exps.UpdateExpStatus,
                    experiment_pb2.UpdateExpStatusReq(id=exp.pk + 100, status="Running"),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert trailers(err)[ERROR_CODE_KEY] == "not_found"

    err = rpc_error(stubs.exps.UpdateExpStatus,
                    experiment_pb2.UpdateExpStatusReq(status="Running"), metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "id" in err.details()


# -- AbortExp / GetExp / DeleteExp -------------------------------------------------------------

def test_abort_exp_moves_exp_and_jobs_to_aborting_idempotently(stubs):
    exp = make_exp(roles=("main", "worker"))
    resp = stubs.exps.AbortExp(experiment_pb2.AbortExpReq(id=exp.pk), metadata=stubs.md,
                               timeout=10)
    assert resp.exp.status == "Aborting" and resp.exp.HasField("aborting_at")
    assert not resp.exp.jobs  # the write replies carry no jobs: ListJobs has them
    jobs = stubs.jobs.ListJobs(common_pb2.CommonListReq(exp_ids=[exp.pk]), metadata=stubs.md,
                               timeout=10).jobs
    assert {j.status for j in jobs} == {"Aborting"}
    assert "internal service" in resp.exp.message
    again = stubs.exps.AbortExp(experiment_pb2.AbortExpReq(id=exp.pk), metadata=stubs.md,
                                timeout=10)
    assert again.exp.status == "Aborting"


def test_abort_exp_errors(stubs):
    exp = make_exp()
    exp_update_status(exp_id=exp.pk, status=ExpStatus.SUCCEEDED)
    err = rpc_error(stubs.exps.AbortExp, experiment_pb2.AbortExpReq(id=exp.pk),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert trailers(err)[ERROR_CODE_KEY] == "conflict"
    err = rpc_error(stubs.exps.AbortExp, experiment_pb2.AbortExpReq(id=exp.pk + 1),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND


def test_get_exp_returns_config_jobs_and_artifact(stubs):
    exp = make_exp(roles=("a", "b"), config="lr: 0.1\n")
    item = stubs.exps.GetExp(experiment_pb2.GetExpReq(id=exp.pk), metadata=stubs.md,
                             timeout=10)
    assert item.id == exp.pk and item.config == "lr: 0.1\n"
    assert [j.role for j in item.jobs] == ["a", "b"] and item.artifact.exp_id == exp.pk
    assert json.loads(item.role_to_task_spec_json)["a"]["command"] == "echo hello"
    err = rpc_error(stubs.exps.GetExp, experiment_pb2.GetExpReq(id=exp.pk + 5),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND and str(exp.pk + 5) in err.details()
    err = rpc_error(stubs.exps.GetExp, experiment_pb2.GetExpReq(), metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_delete_exp_only_when_terminal(stubs):
    exp = make_exp()
    err = rpc_error(stubs.exps.DeleteExp, experiment_pb2.DeleteExpReq(id=exp.pk),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert Experiment.objects.filter(pk=exp.pk).exists()

    stubs.exps.AbortExp(experiment_pb2.AbortExpReq(id=exp.pk), metadata=stubs.md, timeout=10)
    for job in Job.objects.filter(experiment=exp):
        job_update_status(job_id=job.pk, status=JobStatus.ABORTED)
    exp_update_status(exp_id=exp.pk, status=ExpStatus.ABORTED)
    resp = stubs.exps.DeleteExp(experiment_pb2.DeleteExpReq(id=exp.pk), metadata=stubs.md,
                                timeout=10)
    assert resp.changed and resp.id == exp.pk and not resp.HasField("exp")
    assert not Experiment.objects.filter(pk=exp.pk).exists()
    assert not Job.objects.filter(experiment_id=exp.pk).exists()
    err = rpc_error(stubs.exps.DeleteExp, experiment_pb2.DeleteExpReq(id=exp.pk),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND


# -- ListExps --------------------------------------------------------------------------------

def test_list_exps_pages_without_gaps_or_duplicates(stubs):
    ids = {make_exp(name=f"e{i}").pk for i in range(7)}
    seen, pages, token = [], 0, ""
    while True:
        resp = stubs.exps.ListExps(common_pb2.CommonListReq(page_size=3, page_token=token),
                                   metadata=stubs.md, timeout=10)
        pages += 1
        seen.extend(item.id for item in resp.exps)
        token = resp.next_page_token
        if not token:
            break
    assert pages == 3 and seen == sorted(ids)
    first = stubs.exps.ListExps(common_pb2.CommonListReq(ids=[min(ids)]), metadata=stubs.md,
                                timeout=10).exps[0]
    # The list shape: creator and artifact, no config and no jobs (experiment.proto).
    assert first.creator_email and first.artifact.id and not first.config and not first.jobs


def test_list_exps_filters(stubs):
    a = make_exp(name="a", cluster_name="c1", exp_type="profiling")
    b = make_exp(name="b", cluster_name="c2", exp_type="benchmark")
    c = make_exp(name="c", cluster_name="c2", exp_type="profiling")
    exp_update_status(exp_id=b.pk, status=ExpStatus.RUNNING)

    def ids(**filters):
        resp = stubs.exps.ListExps(common_pb2.CommonListReq(**filters), metadata=stubs.md,
                                   timeout=10)
        return [item.id for item in resp.exps]

    assert ids() == [a.pk, b.pk, c.pk]
    assert ids(statuses=["Running"]) == [b.pk]
    assert ids(statuses=["Created", "Running"]) == [a.pk, b.pk, c.pk]
    assert ids(cluster_names=["c2"]) == [b.pk, c.pk]
    assert ids(exp_types=["profiling"]) == [a.pk, c.pk]
    assert ids(cluster_names=["c2"], exp_types=["profiling"]) == [c.pk]
    assert ids(ids=[a.pk, c.pk]) == [a.pk, c.pk]
    Experiment.objects.filter(pk=a.pk).update(updated_at=datetime(2020, 1, 1, tzinfo=timezone.utc))
    since = common_pb2.CommonListReq().updated_since
    since.FromDatetime(datetime.now(timezone.utc) - timedelta(hours=1))
    resp = stubs.exps.ListExps(common_pb2.CommonListReq(updated_since=since), metadata=stubs.md,
                               timeout=10)
    assert [item.id for item in resp.exps] == [b.pk, c.pk]


def test_list_exps_invalid_filters_and_tokens_are_named(stubs):
    for request, field in [
        (common_pb2.CommonListReq(exp_ids=[1]), "exp_ids"),
        (common_pb2.CommonListReq(statuses=["Pending"]), "statuses"),
        (common_pb2.CommonListReq(page_size=5000), "page_size"),
        (common_pb2.CommonListReq(page_size=-1), "page_size"),
        (common_pb2.CommonListReq(page_token="not-a-token"), "page_token"),
        *((common_pb2.CommonListReq(page_token=_b64(raw)), "page_token")
          for raw in ("p=1", "k1:abc", "k1:-1", "k1:" + "9" * 30, "k1:1.5", "o=1&p=2020-01-01")),
        (common_pb2.CommonListReq(ids=[0]), "ids"),
    ]:
        err = rpc_error(stubs.exps.ListExps, request, metadata=stubs.md)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert field in json.loads(trailers(err)[ERROR_FIELDS_KEY]), field


def _b64(text: str) -> str:
    import base64

    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def test_list_exps_pages_exactly_while_rows_are_created_and_deleted(stubs):
    """Keyset pages on the id: deleting seen rows and creating rows between pages neither
    skips nor repeats a row that existed throughout (decisions.md#dec-paging)."""
    ids = [make_exp(name=f"k{i}").pk for i in range(25)]
    seen, token, page = [], "", 0
    while True:
        resp = stubs.exps.ListExps(common_pb2.CommonListReq(page_size=10, page_token=token),
                                   metadata=stubs.md, timeout=10)
        seen.extend(item.id for item in resp.exps)
        token = resp.next_page_token
        if not token:
            break
        exp_update_status(exp_id=seen[page], status="Failed")
        Experiment.objects.filter(pk=seen[page]).delete()
        make_exp(name=f"new{page}")
        page += 1
    assert all(seen.count(pk) == 1 for pk in ids) and seen == sorted(seen)


def test_list_exps_page_is_one_query(django_assert_num_queries):
    for i in range(3):
        make_exp(name=f"q{i}", roles=("a", "b"))
    with django_assert_num_queries(1):
        resp = ExperimentServicer().ListExps(common_pb2.CommonListReq(page_size=2), None)
    assert len(resp.exps) == 2 and resp.next_page_token
    assert all(item.creator_email and item.artifact.id for item in resp.exps)


# -- ListExpStates -----------------------------------------------------------------------------

def _states(stubs, **fields) -> tuple[list, list]:
    """Every page of ListExpStates: the experiments and the skipped rows' ids."""
    exps, skipped, token = [], [], ""
    while True:
        resp = stubs.exps.ListExpStates(experiment_pb2.ListExpStatesReq(page_token=token,
                                                                        **fields),
                                        metadata=stubs.md, timeout=10)
        exps.extend(resp.exps)
        skipped.extend(row.id for row in resp.skipped)
        token = resp.next_page_token
        if not token:
            return exps, skipped


def test_list_exp_states_returns_each_experiment_with_all_its_jobs_and_its_artifact(stubs):
    running = make_exp(name="s-running", roles=("main", "worker"))
    for job in Job.objects.filter(experiment=running):
        job_update_status(job_id=job.pk, status=JobStatus.RUNNING)
    job_update_status(job_id=Job.objects.get(experiment=running, role="worker").pk,
                      status=JobStatus.SUCCEEDED, reason="Completed", message="done")
    exp_update_status(exp_id=running.pk, status=ExpStatus.RUNNING, message="2 Running")
    finished = make_exp(name="s-failed")
    exp_update_status(exp_id=finished.pk, status=ExpStatus.FAILED, reason="Boom")
    created = make_exp(name="s-created")
    created.artifact.delete()

    exps, skipped = _states(stubs, statuses=["Created", "Running", "Aborting"], page_size=1)
    assert skipped == [] and [e.id for e in exps] == [running.pk, created.pk]
    first = exps[0]
    assert (first.name, first.status, first.message, first.cluster_name, first.exp_type,
            first.artifact_path) == ("s-running", "Running", "2 Running", "local", "profiling",
                                     running.artifact_path)
    jobs = list(Job.objects.filter(experiment=running).order_by("pk"))
    assert [(j.id, j.role, j.status) for j in first.jobs] == [
        (jobs[0].pk, "main", "Running"), (jobs[1].pk, "worker", "Succeeded")]
    assert (first.jobs[1].reason, first.jobs[1].message) == ("Completed", "done")
    assert (first.artifact.id, first.artifact.path, first.artifact.status) == (
        running.artifact.pk, running.artifact_path, "Created")
    assert not exps[1].HasField("artifact") and len(exps[1].jobs) == 1
    # No status filter: every experiment.
    assert [e.id for e in _states(stubs)[0]] == [running.pk, finished.pk, created.pk]


def test_list_exp_states_page_is_three_selects_in_one_transaction():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for i in range(4):
        make_exp(name=f"t{i}", roles=("a", "b"))
    with CaptureQueriesContext(connection) as queries:
        resp = ExperimentServicer().ListExpStates(
            experiment_pb2.ListExpStatesReq(statuses=["Created"], page_size=3), None)
    assert len(resp.exps) == 3 and resp.next_page_token
    assert all(len(e.jobs) == 2 and e.artifact.id for e in resp.exps)
    selects = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT")]
    assert len(selects) == 3, selects


def test_list_exp_states_refuses_bad_arguments(stubs):
    for request, field in [
        (experiment_pb2.ListExpStatesReq(statuses=["Pending"]), "statuses"),
        (experiment_pb2.ListExpStatesReq(page_size=5001), "page_size"),
        (experiment_pb2.ListExpStatesReq(page_size=-1), "page_size"),
        (experiment_pb2.ListExpStatesReq(page_token="not-a-token"), "page_token"),
    ]:
        err = rpc_error(stubs.exps.ListExpStates, request, metadata=stubs.md)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert field in json.loads(trailers(err)[ERROR_FIELDS_KEY]), field


def test_list_exp_states_skips_a_row_it_cannot_encode_and_goes_on(stubs, monkeypatch, caplog):
    from experiments.grpc import experiment_servicer

    exps = [make_exp(name=f"u{i}") for i in range(3)]
    real = experiment_servicer.exp_state_to_item

    def broken(row):
        if row["id"] == exps[1].pk:
            raise ValueError("a value its field cannot hold")
        return real(row)

    monkeypatch.setattr(experiment_servicer, "exp_state_to_item", broken)
    found, skipped = _states(stubs, page_size=2)
    assert [e.id for e in found] == [exps[0].pk, exps[2].pk] and skipped == [exps[1].pk]
    assert f"ListExpStates: skipped Experiment {exps[1].pk}, which cannot be encoded" \
        in caplog.text


# -- authentication --------------------------------------------------------------------------

def test_every_rpc_needs_a_token(stubs):
    exp = make_exp()
    for md in [None, auth_metadata("wrong-token"), (("authorization", INTERNAL_TOKEN),),
               auth_metadata(INTERNAL_TOKEN + "x")]:
        err = rpc_error(stubs.exps.GetExp, experiment_pb2.GetExpReq(id=exp.pk), metadata=md)
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        assert trailers(err)[ERROR_CODE_KEY] == "unauthenticated"
    err = rpc_error(stubs.jobs.ListJobs, common_pb2.CommonListReq())
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    err = rpc_error(stubs.artifacts.ListArtifacts, common_pb2.CommonListReq())
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED


def test_user_jwt_is_accepted_and_expired_one_refused(stubs, token_for):
    exp = make_exp()
    ok = stubs.exps.GetExp(experiment_pb2.GetExpReq(id=exp.pk),
                           metadata=auth_metadata(token_for("erin@example.com")), timeout=10)
    assert ok.id == exp.pk
    err = rpc_error(stubs.exps.GetExp, experiment_pb2.GetExpReq(id=exp.pk),
                    metadata=auth_metadata(token_for("erin@example.com", ttl_seconds=-3600)))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "expired" in err.details()


def test_empty_internal_token_accepts_no_service_caller(stubs, settings):
    settings.FALCON_INTERNAL_TOKEN = ""
    err = rpc_error(stubs.exps.ListExps, common_pb2.CommonListReq(),
                    metadata=auth_metadata(""))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED


# -- health, reflection, generated code, rungrpc -----------------------------------------------

def test_health_reports_serving_without_a_token(grpc_channel):
    stub = health_pb2_grpc.HealthStub(grpc_channel)
    for service in ("", "falcon.v1.ExperimentService", "falcon.v1.JobService",
                    "falcon.v1.ArtifactService"):
        resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING, service
    err = rpc_error(stub.Check, health_pb2.HealthCheckRequest(service="falcon.v1.Nope"))
    assert err.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_and_describes_the_services(grpc_channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(grpc_channel)
    responses = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
    names = {s.name for r in responses for s in r.list_services_response.service}
    assert {"falcon.v1.ExperimentService", "falcon.v1.JobService", "falcon.v1.ArtifactService",
            "grpc.health.v1.Health"} <= names
    pool = DescriptorPool(ProtoReflectionDescriptorDatabase(grpc_channel))
    service = pool.FindServiceByName("falcon.v1.ExperimentService")
    assert [m.name for m in service.methods] == [
        "CreateExp", "UpdateExpStatus", "AbortExp", "GetExp", "ListExps", "DeleteExp",
        "UpdateExpStatuses", "ListExpStates"]
    assert pool.FindServiceByName("falcon.v1.JobService").methods_by_name[
        "ListJobs"].input_type.full_name == "falcon.v1.CommonListReq"


@pytest.mark.django_db(transaction=False)
def test_regenerating_the_protos_reproduces_the_committed_code(tmp_path):
    committed = ROOT / "falcon_proto"
    subprocess.run(["bash", str(ROOT / "scripts" / "gen_protos.sh"), str(tmp_path)], check=True,
                   env={**os.environ, "PYTHON": sys.executable}, capture_output=True)

    def files(base: Path) -> dict[str, bytes]:
        return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*"))
                if p.is_file() and "__pycache__" not in p.parts}

    regenerated, current = files(tmp_path), files(committed)
    assert sorted(regenerated) == sorted(current)
    changed = [name for name in current if current[name] != regenerated[name]]
    assert not changed, f"run scripts/gen_protos.sh: stale generated files {changed}"


@pytest.mark.django_db(transaction=False)
def test_rungrpc_serves_health_and_stops_cleanly_on_sigterm():
    proc = subprocess.Popen([sys.executable, "manage.py", "rungrpc", "--addr", "127.0.0.1:0",
                             "--grace", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on 127.0.0.1:" in line, proc.stderr.read()
        port = int(line.rsplit(":", 1)[1])
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                             timeout=10)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_unexpected_errors_are_internal_and_database_outages_unavailable(stubs, monkeypatch):
    from django.db import OperationalError

    from experiments import selectors

    exp = make_exp()

    def broken(**kwargs):
        raise RuntimeError("secret detail")

    monkeypatch.setattr(selectors, "exp_get", broken)
    err = rpc_error(stubs.exps.GetExp, experiment_pb2.GetExpReq(id=exp.pk), metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INTERNAL and "secret" not in err.details()
    assert trailers(err)[ERROR_CODE_KEY] == "internal"

    def locked(**kwargs):
        raise OperationalError(1205, "Lock wait timeout exceeded")  # as mysqlclient raises it

    monkeypatch.setattr(selectors, "exp_get", locked)
    err = rpc_error(stubs.exps.GetExp, experiment_pb2.GetExpReq(id=exp.pk), metadata=stubs.md)
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert trailers(err)[ERROR_CODE_KEY] == "unavailable"

    def too_complex(**kwargs):
        # SQLite's answer to a 70,000-character LIKE pattern: caused by the input, so no retry
        # can cure it; it was answered UNAVAILABLE "database unavailable, retry".
        raise OperationalError("LIKE or GLOB pattern too complex")

    monkeypatch.setattr(selectors, "exp_get", too_complex)
    err = rpc_error(stubs.exps.GetExp, experiment_pb2.GetExpReq(id=exp.pk), metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INTERNAL and "LIKE" not in err.details()
    assert trailers(err)[ERROR_CODE_KEY] == "internal"


def _free_loopback_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.django_db(transaction=False)
def test_a_second_server_on_the_same_port_fails_loudly():
    from falcon_site.grpc.server import AddressUnavailable, build_server

    addr = f"127.0.0.1:{_free_loopback_port()}"
    first = build_server(addr, max_workers=1)
    first.start()
    try:
        # grpcio's default (SO_REUSEPORT) would let this one bind too and share the port.
        with pytest.raises(AddressUnavailable) as info:
            build_server(addr, max_workers=1)
        message = str(info.value)
        assert addr in message and "already in use" in message
        assert "--addr" in message and "--grpc" in message
        # And the command: a clear error naming the address, and a non-zero exit.
        proc = subprocess.run([sys.executable, "manage.py", "rungrpc", "--addr", addr],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0
        assert f"cannot listen on {addr}" in proc.stderr and "already in use" in proc.stderr
        # The first server still answers.
        with grpc.insecure_channel(addr) as channel:
            resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                             timeout=10)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        first.stop(grace=0)
    again = build_server(addr, max_workers=1)  # free again once the first one stopped
    again.start()
    again.stop(grace=0)


# -- labels, clones and idempotency keys -------------------------------------------------------

def test_create_exp_with_labels_then_list_by_selector(stubs):
    UserFactory(email="carol@example.com")
    first = stubs.exps.CreateExp(create_req(labels={"baseline": "true", "team": "infra"}),
                                 metadata=stubs.md, timeout=10)
    stubs.exps.CreateExp(create_req(name="b2", labels={"team": "infra"},
                                    cloned_from=first.id), metadata=stubs.md, timeout=10)
    got = stubs.exps.ListExps(common_pb2.CommonListReq(labels=["baseline=true"]),
                              metadata=stubs.md, timeout=10)
    assert [e.id for e in got.exps] == [first.id]
    assert dict(got.exps[0].labels) == {"baseline": "true", "team": "infra"}
    got = stubs.exps.ListExps(common_pb2.CommonListReq(labels=["team"]), metadata=stubs.md,
                              timeout=10)
    assert len(got.exps) == 2
    clone = [e for e in got.exps if e.id != first.id][0]
    assert clone.HasField("cloned_from") and clone.cloned_from == first.id
    assert not got.exps[0].HasField("cloned_from") or got.exps[0].id != first.id
    err = rpc_error(stubs.exps.ListExps, common_pb2.CommonListReq(labels=["Bad Key"]),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "labels" in err.details()
    err = rpc_error(stubs.jobs.ListJobs, common_pb2.CommonListReq(labels=["team"]),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "labels" in err.details()


def test_list_exps_by_label_pages_without_gaps_or_duplicates(stubs):
    """ListExps orders by id: a label selector's join must not change the order or the pages."""
    UserFactory(email="carol@example.com")
    held = []
    for i in range(8):
        labels = {"team": "infra"} if i % 3 else {"team": "ml"}
        exp = stubs.exps.CreateExp(create_req(name=f"l{i}", labels=labels), metadata=stubs.md,
                                   timeout=10)
        if i % 3:
            held.append(exp.id)
    seen, token = [], ""
    while True:
        resp = stubs.exps.ListExps(common_pb2.CommonListReq(labels=["team=infra"], page_size=2,
                                                            page_token=token),
                                   metadata=stubs.md, timeout=10)
        seen.extend(item.id for item in resp.exps)
        token = resp.next_page_token
        if not token:
            break
    assert seen == sorted(held)


def test_create_exp_with_an_idempotency_key_creates_once(stubs):
    UserFactory(email="carol@example.com")
    first = stubs.exps.CreateExp(create_req(idempotency_key="k-1"), metadata=stubs.md,
                                 timeout=10)
    again = stubs.exps.CreateExp(create_req(idempotency_key="k-1"), metadata=stubs.md,
                                 timeout=10)
    assert first.changed and not again.changed and again.id == first.id
    assert Experiment.objects.count() == 1
    err = rpc_error(stubs.exps.CreateExp, create_req(idempotency_key="k-1", name="other"),
                    metadata=stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "Idempotency-Key" in err.details()
