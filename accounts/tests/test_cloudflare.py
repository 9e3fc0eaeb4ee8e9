"""Cloudflare mode of the verifier, offline: tokens signed here, certs served on loopback.

Accepted tokens, bad input, logs without tokens, and the rules of decisions.md: AUTH-1 (no
audience, no start), AUTH-2 (service tokens), AUTH-3 (certs outage) and AUTH-4 (two first
requests of a new user). Forged tokens and the expiry leeway are in test_attacks.py.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from django.core.exceptions import ImproperlyConfigured

from accounts.models import ServicePrincipal, User
from accounts.verifier import default_verifier, verifier_settings

from .cloudflare import AUD, OTHER_AUD, TEAM, signing_key

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
WHOAMI = "/api/v1/auth/whoami"


def whoami(api, token=None, header="HTTP_CF_ACCESS_JWT_ASSERTION", **extra):
    if token is not None:
        extra[header] = token if header != "HTTP_AUTHORIZATION" else f"Bearer {token}"
    return api.get(WHOAMI, **extra)


def detail(res) -> str:
    body = res.json()
    assert set(body) <= {"detail", "code"}, body
    line = body["detail"]
    assert "\n" not in line and line, line
    return line


# -- AUTH-1: refuse to start without a team domain and an audience ------------------------------

def _start(env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {**os.environ, "DJANGO_SETTINGS_MODULE": "falcon_site.settings", **env}
    for name in ("FALCON_CF_TEAM_DOMAIN", "FALCON_CF_AUDIENCES"):
        if name not in env:
            full.pop(name, None)
    return subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT,
                          env=full, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("env,missing", [
    ({"FALCON_CF_TEAM_DOMAIN": TEAM}, "FALCON_CF_AUDIENCES"),
    ({"FALCON_CF_TEAM_DOMAIN": TEAM, "FALCON_CF_AUDIENCES": " , "}, "FALCON_CF_AUDIENCES"),
    ({"FALCON_CF_AUDIENCES": AUD}, "FALCON_CF_TEAM_DOMAIN"),
])
def test_cloudflare_mode_refuses_to_start_without_team_or_audience(env, missing):
    result = _start({"FALCON_AUTH_MODE": "cloudflare", **env})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and missing in result.stderr
    assert "never skipped" in result.stderr


@pytest.mark.parametrize("team", ["/", "http://acme.cloudflareaccess.com",
                                  "https://acme.cloudflareaccess.com/cdn-cgi"])
def test_cloudflare_mode_refuses_a_team_domain_that_is_not_one(team):
    result = _start({"FALCON_AUTH_MODE": "cloudflare", "FALCON_CF_TEAM_DOMAIN": team,
                     "FALCON_CF_AUDIENCES": AUD})
    assert result.returncode != 0
    assert "is not a team domain" in result.stderr


def test_cloudflare_mode_starts_with_team_and_audience():
    result = _start({"FALCON_AUTH_MODE": "cloudflare", "FALCON_CF_TEAM_DOMAIN": TEAM,
                     "FALCON_CF_AUDIENCES": AUD})
    assert result.returncode == 0, result.stderr


def test_settings_resolve_issuer_certs_url_and_audiences(settings, cloudflare):
    settings.FALCON_CF_CERTS_URL = ""
    settings.FALCON_CF_TEAM_DOMAIN = "ACME.cloudflareaccess.com/"
    settings.FALCON_CF_AUDIENCES = [AUD, OTHER_AUD]
    conf = verifier_settings()
    assert conf.issuer == TEAM
    assert conf.jwks_url == f"{TEAM}/cdn-cgi/access/certs"
    assert conf.audiences == (AUD, OTHER_AUD)
    settings.FALCON_CF_AUDIENCES = []
    with pytest.raises(ImproperlyConfigured, match="never skipped"):
        verifier_settings()


def test_an_audience_emptied_at_run_time_is_401_not_500(api, settings, cloudflare):
    token = cloudflare.sign()
    settings.FALCON_CF_AUDIENCES = []
    res = whoami(api, token)
    assert res.status_code == 401 and "misconfigured" in detail(res)


# -- accepted tokens ------------------------------------------------------------------------------

def test_valid_user_token_registers_the_user(api, cloudflare):
    res = whoami(api, cloudflare.sign())
    assert res.status_code == 200, res.content
    assert res.json() == {"kind": "user", "user_id": "cf-sub-bob", "email": "bob@example.com",
                          "is_staff": False}
    assert list(User.objects.values_list("user_id", "email")) == [("cf-sub-bob",
                                                                   "bob@example.com")]
    assert whoami(api, cloudflare.sign()).status_code == 200
    assert User.objects.count() == 1


@pytest.mark.parametrize("header", ["HTTP_CF_ACCESS_JWT_ASSERTION", "HTTP_CF_ACCESS_TOKEN",
                                    "HTTP_AUTHORIZATION"])
def test_token_is_read_from_each_place(api, cloudflare, header):
    assert whoami(api, cloudflare.sign(), header=header).status_code == 200


def test_token_is_read_from_the_cf_authorization_cookie(api, cloudflare):
    api.cookies["CF_Authorization"] = cloudflare.sign()
    assert whoami(api).status_code == 200


def test_header_order_cf_assertion_first_then_cf_access_token_then_bearer_then_cookie(
        api, cloudflare):
    good, bad = cloudflare.sign(), "not-a-jwt"
    # The first place present decides: a good token there wins over garbage further down ...
    assert whoami(api, good, HTTP_CF_ACCESS_TOKEN=bad, HTTP_AUTHORIZATION=f"Bearer {bad}",
                  ).status_code == 200
    assert api.get(WHOAMI, HTTP_CF_ACCESS_TOKEN=good,
                   HTTP_AUTHORIZATION=f"Bearer {bad}").status_code == 200
    # ... and garbage there is refused even when a good token follows.
    assert whoami(api, bad, HTTP_AUTHORIZATION=f"Bearer {good}").status_code == 401
    # A header the client chose wins over the cookie its browser adds (decisions.md#dec-sec-auth).
    api.cookies["CF_Authorization"] = bad
    assert api.get(WHOAMI, HTTP_AUTHORIZATION=f"Bearer {good}").status_code == 200
    assert api.get(WHOAMI, HTTP_CF_ACCESS_TOKEN=good).status_code == 200
    api.cookies["CF_Authorization"] = good
    assert api.get(WHOAMI, HTTP_AUTHORIZATION=f"Bearer {bad}").status_code == 401


@pytest.mark.parametrize("aud", [[AUD], AUD, [OTHER_AUD, AUD]])
def test_aud_as_list_or_string(api, cloudflare, aud):
    assert whoami(api, cloudflare.sign(aud=aud)).status_code == 200


def test_previous_key_is_still_accepted(api, cloudflare):
    assert whoami(api, cloudflare.sign(key=cloudflare.previous)).status_code == 200


# -- refused input: 401 with a one-line reason (forged tokens: test_attacks.py) --------------------

@pytest.mark.parametrize("value", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer  ", "bearer a b c",
                                   "Token abc"])
def test_malformed_authorization_headers_are_401(api, cloudflare, value):
    res = api.get(WHOAMI, HTTP_AUTHORIZATION=value)
    assert res.status_code == 401
    detail(res)


def test_public_cert_is_never_read(api, cloudflare):
    # `public_cert` names an attacker's certificate under the current kid: it must not matter.
    attacker = signing_key("attacker")
    cloudflare.publish([cloudflare.current], cert_of=attacker)
    assert whoami(api, cloudflare.sign(key=attacker, kid=cloudflare.current.kid)
                  ).status_code == 401
    assert whoami(api, cloudflare.sign()).status_code == 200


def _ec_jwk(kid: str) -> dict:
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": kid, "use": "sig", "alg": "ES256"})
    return jwk


@pytest.mark.parametrize("jwk", [
    _ec_jwk("ec-key"),
    {"kty": "oct", "kid": "oct-key", "k": base64.urlsafe_b64encode(b"s" * 32).decode(),
     "use": "sig", "alg": "HS256"},
], ids=["EC", "oct"])
def test_jwks_with_a_non_rsa_key_is_401(api, cloudflare, jwk):
    cloudflare.publish([cloudflare.current], extra_jwks=[jwk])
    res = whoami(api, cloudflare.sign(kid=jwk["kid"]))
    assert res.status_code == 401
    assert "RSA" in detail(res) or "kid" in detail(res)
    # The RSA key beside it still works.
    assert whoami(api, cloudflare.sign()).status_code == 200


def test_jwks_with_only_garbage_is_an_outage_503_not_500(api, cloudflare):
    cloudflare.certs.document = {"keys": [{"kty": "nope", "kid": "x"}], "public_certs": []}
    res = whoami(api, cloudflare.sign())
    assert res.status_code == 503 and int(res["Retry-After"]) >= 1
    detail(res)


# -- AUTH-3: rotation, rate-limited refetch, outages -----------------------------------------------

def test_rotation_new_kid_is_accepted_after_exactly_one_refetch(api, cloudflare, settings):
    settings.FALCON_AUTH_JWKS_COOLDOWN_SECONDS = 0
    assert whoami(api, cloudflare.sign()).status_code == 200
    assert cloudflare.certs.hits == 1
    rotated = signing_key("rotated")
    cloudflare.publish([rotated, cloudflare.current])
    assert whoami(api, cloudflare.sign(key=rotated)).status_code == 200
    assert cloudflare.certs.hits == 2
    # The now-previous key keeps working for its 7 days, from the cache.
    assert whoami(api, cloudflare.sign()).status_code == 200
    assert whoami(api, cloudflare.sign(key=rotated)).status_code == 200
    assert cloudflare.certs.hits == 2


def test_unknown_kids_do_not_hammer_the_certs_endpoint(api, cloudflare, settings):
    settings.FALCON_AUTH_JWKS_COOLDOWN_SECONDS = 60
    assert whoami(api, cloudflare.sign()).status_code == 200
    for n in range(5):
        res = whoami(api, cloudflare.sign(key=signing_key("attacker"), kid=f"unknown-{n}"))
        assert res.status_code == 401 and "kid" in detail(res)
    assert cloudflare.certs.hits == 1


@pytest.mark.usefixtures("uncached_tokens")
def test_certs_down_with_a_warm_cache_keeps_serving_the_last_good_keys(
        api, cloudflare, settings, caplog):
    settings.FALCON_AUTH_JWKS_LIFESPAN_SECONDS = 0.2
    settings.FALCON_AUTH_JWKS_STALE_SECONDS = 60
    settings.FALCON_AUTH_JWKS_RETRY_SECONDS = 60
    assert whoami(api, cloudflare.sign()).status_code == 200
    cloudflare.certs.status = 503
    cloudflare.clock.advance(0.3)  # the cached set is now older than its lifespan
    with caplog.at_level(logging.WARNING, logger="accounts.jwks"):
        for _ in range(3):
            assert whoami(api, cloudflare.sign()).status_code == 200
    assert cloudflare.certs.hits == 2  # one failed fetch, then no retry within the back-off
    assert "serving the key set fetched" in caplog.text
    # One warning for the one failed fetch, not one per request served from the stale set.
    assert len([r for r in caplog.records if r.name == "accounts.jwks"]) == 1
    # Recovery: once the endpoint answers again and the back-off ends, keys are fetched anew.
    cloudflare.certs.status = 200
    default_verifier().keys.retry_seconds = 0
    default_verifier().keys._retry_not_before = 0
    assert whoami(api, cloudflare.sign()).status_code == 200
    assert cloudflare.certs.hits == 3


@pytest.mark.usefixtures("uncached_tokens")
def test_stale_keys_serve_only_for_a_bounded_time(api, cloudflare, settings):
    settings.FALCON_AUTH_JWKS_LIFESPAN_SECONDS = 0.1
    settings.FALCON_AUTH_JWKS_STALE_SECONDS = 0.4
    settings.FALCON_AUTH_JWKS_RETRY_SECONDS = 0
    assert whoami(api, cloudflare.sign()).status_code == 200
    cloudflare.certs.status = 503
    cloudflare.clock.advance(0.2)
    assert whoami(api, cloudflare.sign()).status_code == 200
    cloudflare.clock.advance(0.4)
    res = whoami(api, cloudflare.sign())
    assert res.status_code == 503 and "unavailable" in detail(res)
    assert int(res["Retry-After"]) >= 1


def test_certs_down_with_a_cold_cache_is_503_not_500(api, cloudflare):
    cloudflare.certs.status = 503
    res = whoami(api, cloudflare.sign())
    assert res.status_code == 503 and "unavailable" in detail(res)
    assert int(res["Retry-After"]) >= 1
    cloudflare.certs.close()  # connection refused is the same answer
    from django.core.signals import setting_changed

    setting_changed.send(sender=None, setting="FALCON_AUTH_MODE", value="cloudflare",
                         enter=True)  # rebuild the verifier: a cold cache again
    res = whoami(api, cloudflare.sign())
    assert res.status_code == 503 and "unavailable" in detail(res)
    assert int(res["Retry-After"]) >= 1


def test_a_slow_certs_endpoint_cannot_stall_requests(api, cloudflare, settings):
    settings.FALCON_AUTH_JWKS_TIMEOUT_SECONDS = 0.3
    held = cloudflare.certs.hold = threading.Event()  # the endpoint answers only when set
    res = whoami(api, cloudflare.sign())
    assert res.status_code == 503 and "unavailable" in detail(res)
    assert int(res["Retry-After"]) >= 1
    # The back-off answers the next requests at once instead of waiting for the timeout again:
    # no new fetch is sent, and every answer came while the one fetch was still unanswered.
    for _ in range(3):
        assert whoami(api, cloudflare.sign()).status_code == 503
    assert cloudflare.certs.hits == 1
    assert not held.is_set()


# -- AUTH-2: service tokens ------------------------------------------------------------------------

def test_service_token_allowed_by_setting(api, cloudflare, settings):
    settings.FALCON_CF_SERVICE_TOKENS = ["ci-runner.access"]
    res = whoami(api, cloudflare.sign(cloudflare.service_claims("ci-runner.access")))
    assert res.status_code == 200, res.content
    assert res.json() == {"kind": "service", "user_id": "service:ci-runner.access", "email": "",
                          "is_staff": False}
    assert not User.objects.exists()


def test_service_token_allowed_in_the_admin(api, cloudflare):
    ServicePrincipal.objects.create(common_name="ci-runner.access")
    token = cloudflare.sign(cloudflare.service_claims("ci-runner.access"))
    assert whoami(api, token).status_code == 200
    assert api.get("/api/v1/exps", HTTP_CF_ACCESS_JWT_ASSERTION=token).status_code == 200
    assert not User.objects.exists()


def test_service_token_not_allowed_is_403(api, cloudflare, settings):
    settings.FALCON_CF_SERVICE_TOKENS = ["someone-else.access"]
    res = whoami(api, cloudflare.sign(cloudflare.service_claims("ci-runner.access")))
    assert res.status_code == 403 and "not allowed" in detail(res)
    assert not User.objects.exists()


def test_a_deactivated_service_principal_wins_over_the_setting(api, cloudflare, settings):
    settings.FALCON_CF_SERVICE_TOKENS = ["ci-runner.access"]
    ServicePrincipal.objects.create(common_name="ci-runner.access", is_active=False)
    res = whoami(api, cloudflare.sign(cloudflare.service_claims("ci-runner.access")))
    assert res.status_code == 403


def test_service_token_with_an_email_is_not_a_service(api, cloudflare, settings):
    # Only Cloudflare's exact shape (common_name, empty sub, no email) is a service token; a
    # token with an email but no sub names nobody.
    settings.FALCON_CF_SERVICE_TOKENS = ["ci-runner.access"]
    res = whoami(api, cloudflare.sign(cloudflare.service_claims(
        "ci-runner.access", email="x@example.com")))
    assert res.status_code == 401 and "identity" in detail(res)
    assert not User.objects.exists()


def test_service_principal_may_read_but_not_create(api, cloudflare, settings, user):
    from experiments.tests.factories import make_exp

    settings.FALCON_CF_SERVICE_TOKENS = ["ci-runner.access"]
    exp = make_exp(creator=user)
    api.credentials(HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign(
        cloudflare.service_claims("ci-runner.access")))
    assert api.get(f"/api/v1/exps/{exp.pk}").status_code == 200
    res = api.post("/api/v1/exps", {"name": "x", "cluster_name": "local",
                                    "exp_type": "profiling",
                                    "role_to_task_spec": {"main": {"command": "true"}}},
                   format="json")
    assert res.status_code == 403 and res.json()["code"] == "permission_denied"
    assert api.post(f"/api/v1/exps/{exp.pk}/abort").status_code == 403


def test_service_principal_admin_lists_and_edits(client, cloudflare):
    # Behind Access the admin follows the Access identity of each request (decisions.md#auth-11).
    User.objects.create_superuser("ops@example.com", user_id="cf-ops")
    access = {"HTTP_CF_ACCESS_JWT_ASSERTION": cloudflare.sign(email="ops@example.com",
                                                              sub="cf-ops")}
    res = client.post("/admin/accounts/serviceprincipal/add/",
                      {"common_name": "ci.access", "description": "CI", "is_active": "on"},
                      **access)
    assert res.status_code == 302, res.content
    assert ServicePrincipal.objects.get().common_name == "ci.access"
    assert b"ci.access" in client.get("/admin/accounts/serviceprincipal/", **access).content


# -- AUTH-4: two first requests of a new user at once ----------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_two_concurrent_first_requests_make_one_user_and_both_succeed(live_server, cloudflare):
    token = cloudflare.sign(sub="cf-sub-new", email="new@example.com")
    barrier = threading.Barrier(2)
    results: list = []

    def call():
        barrier.wait()
        try:
            results.append(httpx.get(f"{live_server.url}{WHOAMI}", timeout=20,
                                     headers={"Cf-Access-Jwt-Assertion": token}).status_code)
        except Exception as exc:  # noqa: BLE001 (reported by the assert below)
            results.append(exc)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [200, 200]
    assert list(User.objects.filter(email="new@example.com").values_list("user_id", flat=True)
                ) == ["cf-sub-new"]


# -- logs never carry a token ----------------------------------------------------------------------

def test_tokens_never_appear_in_logs(api, cloudflare, settings, caplog):
    settings.FALCON_CF_SERVICE_TOKENS = []
    caplog.set_level(logging.DEBUG)
    cf = cloudflare
    tokens = [cf.sign(), cf.sign(aud=[OTHER_AUD]), cf.sign(exp=int(time.time()) - 999),
              cf.sign(kid="../x"), cf.sign(key=signing_key("attacker")),
              cf.sign(cf.service_claims("nope.access")), "a" * 100_000, "garbage.token.here"]
    for token in tokens:
        whoami(api, token)
        api.get(WHOAMI, HTTP_AUTHORIZATION=f"Bearer {token}")
    cf.certs.status = 503
    from django.core.signals import setting_changed

    setting_changed.send(sender=None, setting="FALCON_CF_AUDIENCES", value=[AUD], enter=True)
    whoami(api, cf.sign())
    assert "refused a token" in caplog.text  # the reasons are logged ...
    for token in tokens + cf.issued:
        assert token not in caplog.text  # ... the tokens are not
        assert token.split(".")[-1] not in caplog.text


@pytest.mark.usefixtures("uncached_tokens")
@pytest.mark.parametrize("body", [b"<html><body>502 Bad Gateway</body></html>",
                                  b'{"keys": [', b"[1, 2, 3]"])
def test_a_malformed_certs_answer_is_an_outage_not_a_500(api, cloudflare, settings, body):
    """An HTML error page or a truncated body from the certs endpoint: the last good keys keep
    serving (warm cache), a cold cache answers 503, and the endpoint is not hammered."""
    settings.FALCON_AUTH_JWKS_LIFESPAN_SECONDS = 0.2
    settings.FALCON_AUTH_JWKS_STALE_SECONDS = 60
    settings.FALCON_AUTH_JWKS_RETRY_SECONDS = 60
    assert whoami(api, cloudflare.sign()).status_code == 200
    cloudflare.certs.raw_body = body
    cloudflare.clock.advance(0.3)
    for _ in range(3):
        assert whoami(api, cloudflare.sign()).status_code == 200
    assert cloudflare.certs.hits == 2  # one failed fetch, then the back-off holds
    from django.core.signals import setting_changed

    setting_changed.send(sender=None, setting="FALCON_AUTH_MODE", value="cloudflare",
                         enter=True)  # a cold cache
    res = whoami(api, cloudflare.sign())
    assert res.status_code == 503 and "unavailable" in detail(res)
    assert int(res["Retry-After"]) >= 1
