"""Browser-facing auth: the admin behind Access, the CLI login page, the auth config endpoint."""
from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from accounts.cli_login import s256
from accounts.models import CliLoginGrant, User

pytestmark = pytest.mark.django_db

STATE = "s" * 43


# -- the admin: Access identity in the cloudflare mode, password in the local mode -----------------

def test_admin_logs_staff_in_from_the_access_header(client, cloudflare):
    User.objects.create_user("ops@example.com", user_id="cf-ops", is_staff=True,
                             is_superuser=True)
    token = cloudflare.sign(sub="cf-ops", email="ops@example.com")
    res = client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 200 and b"Site administration" in res.content
    # The session follows the header: another identity replaces it, none ends it.
    res = client.get("/admin/experiments/experiment/", HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 200 and b"ops@example.com" in res.content
    User.objects.create_user("ops2@example.com", user_id="cf-ops2", is_staff=True,
                             is_superuser=True)
    res = client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign(
        sub="cf-ops2", email="ops2@example.com"))
    assert res.status_code == 200 and b"ops2@example.com" in res.content
    assert client.session["_auth_user_id"] == "cf-ops2"
    res = client.get("/admin/")
    assert res.status_code == 302 and "/admin/login/" in res["Location"]


def test_admin_refuses_a_non_staff_access_identity(client, cloudflare):
    token = cloudflare.sign(sub="cf-bob", email="bob@example.com")
    res = client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 302 and "/admin/login/" in res["Location"]
    assert "_auth_user_id" not in client.session  # no session for a non-staff identity
    assert User.objects.get(pk="cf-bob").is_staff is False


def test_an_admin_session_alone_never_authenticates_the_api(client, cloudflare):
    """Behind Access every API call carries its token; the admin's session cookie is not one."""
    User.objects.create_user("ops@example.com", user_id="cf-ops", is_staff=True)
    token = cloudflare.sign(sub="cf-ops", email="ops@example.com")
    assert client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=token).status_code == 200
    assert client.session["_auth_user_id"] == "cf-ops"
    assert client.get("/api/v1/auth/whoami").status_code == 401
    assert client.get("/api/v1/auth/whoami", HTTP_CF_ACCESS_JWT_ASSERTION=token).status_code == 200


def test_staff_without_superuser_see_and_act_on_experiments(client, cloudflare):
    from experiments.tests.factories import make_exp

    User.objects.create_user("ops@example.com", user_id="cf-ops", is_staff=True)
    exp = make_exp(name="visible-to-ops")
    token = cloudflare.sign(sub="cf-ops", email="ops@example.com")
    res = client.get("/admin/experiments/experiment/", HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 200 and b"visible-to-ops" in res.content
    selection = {"action": "abort_experiments", "_selected_action": [exp.pk]}
    res = client.post("/admin/experiments/experiment/", selection,
                      HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 200 and b"These will change (1)" in res.content  # confirmation
    res = client.post("/admin/experiments/experiment/", {**selection, "confirm": "yes"},
                      HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 302
    exp.refresh_from_db()
    assert exp.status == "Aborting"


@pytest.mark.parametrize("make", [
    lambda cf: cf.sign(sub="cf-ops", email="ops@example.com", aud=["other"]),
    lambda cf: "garbage",
], ids=["wrong aud", "garbage"])
def test_admin_with_a_bad_access_header_is_not_logged_in(client, cloudflare, make):
    User.objects.create_user("ops@example.com", user_id="cf-ops", is_staff=True,
                             is_superuser=True)
    res = client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=make(cloudflare))
    assert res.status_code == 302 and "/admin/login/" in res["Location"]


def test_admin_password_login_only_in_local_mode(client, settings, cloudflare):
    User.objects.create_superuser("ops@example.com", password="pw-for-tests")
    settings.FALCON_AUTH_MODE = "cloudflare"
    client.post("/admin/login/", {"username": "ops@example.com", "password": "pw-for-tests"})
    assert client.get("/admin/").status_code == 302  # no password behind Access
    settings.FALCON_AUTH_MODE = "local"
    res = client.post("/admin/login/?next=/admin/",
                      {"username": "ops@example.com", "password": "pw-for-tests"})
    assert res.status_code == 302
    assert client.get("/admin/").status_code == 200


def test_admin_middleware_ignores_the_api(client, cloudflare):
    token = cloudflare.sign()
    res = client.get("/api/v1/auth/whoami", HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 200
    assert "sessionid" not in res.cookies  # the API never opens sessions


# -- the CLI login page (decisions.md#auth-12; the attacks are in test_attacks.py) ----------------

VERIFIER = "v" * 43
CHALLENGE = s256(VERIFIER)
CODE = "BCDF-GHJK"
LOGIN = {"port": "54321", "state": STATE, "challenge": CHALLENGE, "code": CODE}


def test_cli_login_page_asks_for_confirmation_and_hands_nothing_over(client, cloudflare):
    token = cloudflare.sign()
    res = client.get("/auth/cli-login", LOGIN, HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 200 and "Location" not in res
    body = res.content.decode()
    assert "127.0.0.1:54321" in body and CODE in body and "bob@example.com" in body
    assert 'method="post"' in body and "csrfmiddlewaretoken" in body
    assert token not in body
    assert res["X-Frame-Options"] == "DENY" and "frame-ancestors 'none'" in \
        res["Content-Security-Policy"]
    assert res["Referrer-Policy"] == "no-referrer" and "no-store" in res["Cache-Control"]
    assert not CliLoginGrant.objects.exists()


def test_cli_login_confirm_redirects_a_grant_to_loopback_and_redeem_hands_the_token(
        client, cloudflare):
    from django.test import Client

    token = cloudflare.sign()
    browser = Client(enforce_csrf_checks=True)
    page = browser.get("/auth/cli-login", LOGIN, HTTP_CF_ACCESS_JWT_ASSERTION=token)
    csrf = page.cookies["csrftoken"].value
    res = browser.post("/auth/cli-login", {**LOGIN, "csrfmiddlewaretoken": csrf},
                       HTTP_CF_ACCESS_JWT_ASSERTION=token, HTTP_ORIGIN="http://testserver")
    assert res.status_code == 303
    target = urlsplit(res["Location"])
    assert (target.scheme, target.hostname, target.port, target.path) == (
        "http", "127.0.0.1", 54321, "/callback")
    query = parse_qs(target.query)
    assert set(query) == {"state", "grant"} and query["state"] == [STATE]
    assert token not in res["Location"]
    assert res["Referrer-Policy"] == "no-referrer"
    assert User.objects.filter(pk="cf-sub-bob").exists()
    redeemed = client.post("/auth/cli-login/redeem", {"grant": query["grant"][0],
                                                      "state": STATE, "verifier": VERIFIER},
                           content_type="application/json")
    assert redeemed.status_code == 200 and redeemed.json() == {"token": token,
                                                               "token_type": "Bearer"}
    assert "no-store" in redeemed["Cache-Control"]
    assert not CliLoginGrant.objects.exists()


@pytest.mark.parametrize("query,status,reason", [
    ({"port": "80"}, 400, "port"),
    ({"port": "70000"}, 400, "port"),
    ({"port": "evil.example"}, 400, "port"),
    ({"port": "5000@evil.example"}, 400, "port"),
    ({"state": "short"}, 400, "state"),
    ({"state": "x" * 20 + "/.."}, 400, "state"),
    ({"port": None}, 400, "port"),
    ({"challenge": None}, 400, "challenge"),
    ({"challenge": "plain-verifier"}, 400, "challenge"),
    ({"code": None}, 400, "code"),
    ({"code": "AAAA-AAAA"}, 400, "code"),
])
def test_cli_login_refuses_a_bad_field_naming_it(client, cloudflare, query, status, reason):
    params = {k: v for k, v in {**LOGIN, **query}.items() if v is not None}
    res = client.get("/auth/cli-login", params, HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign())
    assert res.status_code == status and reason in res.content.decode()
    assert "Location" not in res


def test_cli_login_needs_a_valid_access_header(client, cloudflare, settings):
    url = "/auth/cli-login?" + urlencode(LOGIN)
    res = client.get(url)
    assert res.status_code == 401 and b"Cloudflare Access" in res.content
    res = client.get(url, HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign(aud=["other"]))
    assert res.status_code == 401 and b"audience" in res.content
    # A bearer token or the cookie is not enough: only the edge's header proves the Access login.
    res = client.get(url, HTTP_AUTHORIZATION=f"Bearer {cloudflare.sign()}")
    assert res.status_code == 401
    settings.FALCON_CF_SERVICE_TOKENS = ["ci.access"]
    res = client.get(url, HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign(
        cloudflare.service_claims("ci.access")))
    assert res.status_code == 401 and b"service token" in res.content
    res = client.get(url, HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign(
        cloudflare.service_claims("stranger.access")))
    assert res.status_code == 403


def test_cli_login_is_off_in_local_mode(client, token_for):
    res = client.get("/auth/cli-login", LOGIN,
                     HTTP_CF_ACCESS_JWT_ASSERTION=token_for("bob@example.com"))
    assert res.status_code == 404
    res = client.post("/auth/cli-login/redeem", {"grant": "g" * 43, "state": STATE,
                                                 "verifier": VERIFIER},
                      content_type="application/json")
    assert res.status_code == 404


@pytest.mark.parametrize("body", [b"", b"[]", b"not json", b'{"grant": 1}', b"[" * 100_000,
                                  b'{"grant": "g", "state": "s", "verifier": "v"}'])
def test_cli_login_redeem_refuses_bad_bodies_naming_the_field(client, cloudflare, body):
    res = client.post("/auth/cli-login/redeem", body, content_type="application/json")
    assert res.status_code == 400 and res.json()["code"] == "invalid_grant"
    assert res.json()["detail"]


# -- GET /api/v1/auth/config -----------------------------------------------------------------------

def test_auth_config_in_both_modes(api, cloudflare, settings):
    assert api.get("/api/v1/auth/config").json() == {"mode": "cloudflare",
                                                     "login_url": "/auth/cli-login"}
    settings.FALCON_AUTH_MODE = "local"
    assert api.get("/api/v1/auth/config").json() == {"mode": "local",
                                                     "login_url": "/api/v1/auth/token"}
    # Open to anyone, and a garbage token does not turn it into a 401.
    assert api.get("/api/v1/auth/config", HTTP_AUTHORIZATION="Bearer x").status_code == 200
