"""Who may do what: anyone authenticated reads; only the experiment's creator or a staff user
aborts or deletes it. One rule in `experiments.services`, obeyed by HTTP, gRPC and the admin; here
in the cloudflare mode, with tokens signed by the offline Access double."""
from __future__ import annotations

import json

import grpc
import pytest

from accounts.models import User
from experiments.models import Experiment
from experiments.services import exp_abort, exp_delete, exp_may_change, exp_update_status
from experiments.tests.factories import make_exp
from core.errors import PermissionDenied
from core.grpc.channel import auth_metadata
from core.grpc.errors import ERROR_CODE_KEY
from falcon_proto.falcon.v1 import common_pb2, experiment_pb2
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    grpc_channel, grpc_server, stubs,
)

SPEC = {"main": {"command": "python bench.py"}}


@pytest.fixture
def people(db):
    """The creator, another user and a staff user, as Access would name them."""
    return {
        "creator": User.objects.create_user("carol@example.com", user_id="cf-carol"),
        "other": User.objects.create_user("mallory@example.com", user_id="cf-mallory"),
        "staff": User.objects.create_user("ops@example.com", user_id="cf-ops", is_staff=True),
    }


def token_of(cloudflare, user) -> str:
    return cloudflare.sign(sub=user.user_id, email=user.email)


# -- the rule itself -------------------------------------------------------------------------------

@pytest.mark.django_db
def test_service_layer_rule(people):
    exp = make_exp(creator=people["creator"])
    assert exp_may_change(exp=exp, actor=people["creator"])
    assert exp_may_change(exp=exp, actor=people["staff"])
    assert not exp_may_change(exp=exp, actor=people["other"])
    with pytest.raises(PermissionDenied, match="only its creator or a staff user"):
        exp_abort(exp_id=exp.pk, actor=people["other"])
    exp_update_status(exp_id=exp.pk, status="Failed")
    with pytest.raises(PermissionDenied):
        exp_delete(exp_id=exp.pk, actor=people["other"])
    people["creator"].is_active = False  # a deactivated creator is nobody
    assert not exp_may_change(exp=exp, actor=people["creator"])


# -- HTTP ------------------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("who,allowed", [("creator", True), ("other", False), ("staff", True)])
def test_http_abort_and_delete(api, cloudflare, people, who, allowed):
    exp = make_exp(creator=people["creator"])
    api.credentials(HTTP_CF_ACCESS_JWT_ASSERTION=token_of(cloudflare, people[who]))
    assert api.get(f"/api/v1/exps/{exp.pk}").status_code == 200  # anyone reads
    assert api.get("/api/v1/exps").json()["results"][0]["id"] == exp.pk
    res = api.post(f"/api/v1/exps/{exp.pk}/abort")
    if allowed:
        assert res.status_code == 200 and res.json()["status"] == "Aborting"
        assert people[who].email in res.json()["message"]
    else:
        assert res.status_code == 403 and res.json()["code"] == "permission_denied"
        assert Experiment.objects.get(pk=exp.pk).status == "Created"
    exp_update_status(exp_id=exp.pk, status="Aborted" if allowed else "Failed")
    res = api.delete(f"/api/v1/exps/{exp.pk}")
    assert res.status_code == (204 if allowed else 403)
    assert Experiment.objects.filter(pk=exp.pk).exists() is not allowed


@pytest.mark.django_db
def test_http_other_user_is_403_even_on_a_finished_experiment(api, cloudflare, people):
    # The permission is checked before the state, so the answer leaks nothing about it.
    exp = make_exp(creator=people["creator"])
    exp_update_status(exp_id=exp.pk, status="Succeeded")
    api.credentials(HTTP_CF_ACCESS_JWT_ASSERTION=token_of(cloudflare, people["other"]))
    assert api.post(f"/api/v1/exps/{exp.pk}/abort").status_code == 403


@pytest.mark.django_db
def test_http_staff_set_in_the_admin_takes_effect(api, cloudflare, people):
    exp = make_exp(creator=people["creator"])
    api.credentials(HTTP_CF_ACCESS_JWT_ASSERTION=token_of(cloudflare, people["other"]))
    assert api.post(f"/api/v1/exps/{exp.pk}/abort").status_code == 403
    User.objects.filter(pk=people["other"].pk).update(is_staff=True)
    assert api.post(f"/api/v1/exps/{exp.pk}/abort").status_code == 200


# -- gRPC ------------------------------------------------------------------------------------------

def _call(method, request, metadata):
    return method(request, metadata=metadata, timeout=10)


def _error(method, request, metadata) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        _call(method, request, metadata)
    return info.value


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who,allowed", [("creator", True), ("other", False), ("staff", True)])
def test_grpc_abort_and_delete(stubs, cloudflare, people, who, allowed):
    exp = make_exp(creator=people["creator"])
    md = auth_metadata(token_of(cloudflare, people[who]))
    assert _call(stubs.exps.GetExp, experiment_pb2.GetExpReq(id=exp.pk), md).id == exp.pk
    if allowed:
        resp = _call(stubs.exps.AbortExp, experiment_pb2.AbortExpReq(id=exp.pk), md)
        assert resp.exp.status == "Aborting"
    else:
        err = _error(stubs.exps.AbortExp, experiment_pb2.AbortExpReq(id=exp.pk), md)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        assert dict(err.trailing_metadata())[ERROR_CODE_KEY] == "permission_denied"
    exp_update_status(exp_id=exp.pk, status="Aborted" if allowed else "Failed")
    if allowed:
        _call(stubs.exps.DeleteExp, experiment_pb2.DeleteExpReq(id=exp.pk), md)
    else:
        err = _error(stubs.exps.DeleteExp, experiment_pb2.DeleteExpReq(id=exp.pk), md)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert Experiment.objects.filter(pk=exp.pk).exists() is not allowed


@pytest.mark.django_db(transaction=True)
def test_grpc_reads_cf_access_token_metadata(stubs, cloudflare, people):
    exp = make_exp(creator=people["creator"])
    md = (("cf-access-token", token_of(cloudflare, people["other"])),)
    assert _call(stubs.exps.GetExp, experiment_pb2.GetExpReq(id=exp.pk), md).id == exp.pk


@pytest.mark.django_db(transaction=True)
def test_grpc_internal_token_is_refused_in_cloudflare_mode(stubs, cloudflare, people):
    exp = make_exp(creator=people["creator"])
    err = _error(stubs.exps.GetExp, experiment_pb2.GetExpReq(id=exp.pk), stubs.md)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "local mode only" in err.details()


@pytest.mark.django_db(transaction=True)
def test_grpc_internal_token_is_staff_in_local_mode(stubs, people):
    exp = make_exp(creator=people["creator"])
    resp = _call(stubs.exps.AbortExp, experiment_pb2.AbortExpReq(id=exp.pk), stubs.md)
    assert resp.exp.status == "Aborting" and "internal service" in resp.exp.message


@pytest.mark.django_db(transaction=True)
def test_grpc_service_principal_reads_but_cannot_create_abort_or_delete(
        stubs, cloudflare, people, settings):
    settings.FALCON_CF_SERVICE_TOKENS = ["controller.access"]
    exp = make_exp(creator=people["creator"])
    md = auth_metadata(cloudflare.sign(cloudflare.service_claims("controller.access")))
    assert _call(stubs.exps.GetExp, experiment_pb2.GetExpReq(id=exp.pk), md).id == exp.pk
    assert [e.id for e in _call(stubs.exps.ListExps, common_pb2.CommonListReq(), md).exps] \
        == [exp.pk]
    create = experiment_pb2.CreateExpReq(
        name="svc", cluster_name="local", exp_type="profiling",
        role_to_task_spec_json=json.dumps(SPEC), creator_email="carol@example.com")
    for method, request in ((stubs.exps.CreateExp, create),
                            (stubs.exps.AbortExp, experiment_pb2.AbortExpReq(id=exp.pk)),
                            (stubs.exps.DeleteExp, experiment_pb2.DeleteExpReq(id=exp.pk))):
        err = _error(method, request, md)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, method
    assert Experiment.objects.count() == 1 and not User.objects.filter(email="").exists()


@pytest.mark.django_db(transaction=True)
def test_grpc_service_token_not_allowed_is_permission_denied(stubs, cloudflare):
    md = auth_metadata(cloudflare.sign(cloudflare.service_claims("stranger.access")))
    err = _error(stubs.exps.ListExps, common_pb2.CommonListReq(), md)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "not allowed" in err.details()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("make,code", [
    (lambda cf: cf.sign(aud=["wrong"]), grpc.StatusCode.UNAUTHENTICATED),
    (lambda cf: cf.sign(kid="../../x"), grpc.StatusCode.UNAUTHENTICATED),
    (lambda cf: "a.b." + "c" * 6_000, grpc.StatusCode.UNAUTHENTICATED),
    # grpcio itself refuses metadata over its 8 KiB soft limit before any Falcon code runs.
    (lambda cf: "a" * 100_000, grpc.StatusCode.RESOURCE_EXHAUSTED),
], ids=["wrong aud", "kid path", "6 KB garbage", "100 KB"])
def test_grpc_bad_tokens_are_refused_never_internal(stubs, cloudflare, make, code):
    err = _error(stubs.exps.ListExps, common_pb2.CommonListReq(),
                 auth_metadata(make(cloudflare)))
    assert err.code() == code and "\n" not in (err.details() or "")


# -- admin -----------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_admin_actions_run_as_the_staff_user(client, people):
    from django.contrib.auth.models import Permission

    # A staff user (not a superuser) whom operators let see experiments in the admin.
    staff = people["staff"]
    staff.user_permissions.add(Permission.objects.get(codename="view_experiment"))
    client.force_login(staff)
    exp = make_exp(creator=people["creator"])
    client.post("/admin/experiments/experiment/",
                {"action": "abort_experiments", "_selected_action": [exp.pk], "confirm": "yes"})
    exp.refresh_from_db()
    assert exp.status == "Aborting" and "ops@example.com" in exp.message


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who", ["creator", "other", "staff"])
def test_grpc_controller_only_rpcs_refuse_every_user(stubs, cloudflare, people, who):
    """Only controllers move entities or edit an experiment's rows (docs/limits.md): a user,
    even the creator or staff, gets PERMISSION_DENIED and nothing changes."""
    from falcon_proto.falcon.v1 import artifact_pb2, job_pb2

    exp = make_exp(creator=people["creator"])
    job, artifact = exp.jobs.get(), exp.artifact
    md = auth_metadata(token_of(cloudflare, people[who]))
    calls = [
        (stubs.exps.UpdateExpStatus, experiment_pb2.UpdateExpStatusReq(id=exp.pk,
                                                                        status="Failed")),
        (stubs.jobs.UpdateJobStatus, job_pb2.UpdateJobStatusReq(id=job.pk, status="Running")),
        (stubs.jobs.CreateJob, job_pb2.CreateJobReq(exp_id=exp.pk, role="extra",
                                                    task_spec_json='{"command": "true"}')),
        (stubs.jobs.DeleteJob, job_pb2.DeleteJobReq(id=job.pk)),
        (stubs.artifacts.UpdateArtifactStatus, artifact_pb2.UpdateArtifactStatusReq(
            id=artifact.pk, status="Failed")),
        (stubs.artifacts.CreateArtifact, artifact_pb2.CreateArtifactReq(exp_id=exp.pk)),
        (stubs.artifacts.DeleteArtifact, artifact_pb2.DeleteArtifactReq(id=artifact.pk)),
    ]
    for method, request in calls:
        err = _error(method, request, md)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, method
        assert "controllers only" in err.details()
    exp.refresh_from_db()
    assert exp.status == "Created" and list(exp.jobs.values_list("role", "status")) == [
        ("main", "Pending")]
    assert exp.artifact.status == "Created"


@pytest.mark.django_db(transaction=True)
def test_grpc_a_service_token_with_a_controller_role_may_call_its_rpcs(stubs, cloudflare,
                                                                       people, settings):
    settings.FALCON_SERVICE_ROLES = {"falcon-controllers.access": "resource-manager"}
    from falcon_proto.falcon.v1 import job_pb2

    exp = make_exp(creator=people["creator"])
    md = auth_metadata(cloudflare.sign(cloudflare.service_claims("falcon-controllers.access")))
    _call(stubs.jobs.UpdateJobStatus,
          job_pb2.UpdateJobStatusReq(id=exp.jobs.get().pk, status="Running"), md)
    assert exp.jobs.get().status == "Running"
