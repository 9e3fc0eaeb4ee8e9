"""Browser-facing auth: the admin behind Access, the CLI login page, the auth config endpoint."""
from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from accounts.models import User

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
    res = client.post("/admin/experiments/experiment/", {
        "action": "abort_experiments", "_selected_action": [exp.pk]},
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


# -- the CLI login page ----------------------------------------------------------------------------

def test_cli_login_redirects_the_token_to_loopback(client, cloudflare):
    token = cloudflare.sign()
    res = client.get(f"/auth/cli-login?port=54321&state={STATE}",
                     HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 302
    target = urlsplit(res["Location"])
    assert (target.scheme, target.hostname, target.port, target.path) == (
        "http", "127.0.0.1", 54321, "/callback")
    assert parse_qs(target.query) == {"token": [token], "state": [STATE]}
    assert res["Referrer-Policy"] == "no-referrer" and "no-store" in res["Cache-Control"]
    assert User.objects.filter(pk="cf-sub-bob").exists()


@pytest.mark.parametrize("query,status,reason", [
    (f"port=80&state={STATE}", 400, "port"),
    (f"port=70000&state={STATE}", 400, "port"),
    (f"port=evil.example&state={STATE}", 400, "port"),
    (f"port=5000@evil.example&state={STATE}", 400, "port"),
    ("port=54321&state=short", 400, "state"),
    ("port=54321&state=" + "x" * 20 + "%2F..", 400, "state"),
    (f"state={STATE}", 400, "port"),
])
def test_cli_login_refuses_bad_port_or_state(client, cloudflare, query, status, reason):
    res = client.get(f"/auth/cli-login?{query}", HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign())
    assert res.status_code == status and reason in res.content.decode()
    assert "Location" not in res


def test_cli_login_needs_a_valid_access_header(client, cloudflare, settings):
    url = f"/auth/cli-login?port=54321&state={STATE}"
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
    res = client.get(f"/auth/cli-login?port=54321&state={STATE}",
                     HTTP_CF_ACCESS_JWT_ASSERTION=token_for("bob@example.com"))
    assert res.status_code == 404


# -- GET /api/v1/auth/config -----------------------------------------------------------------------

def test_auth_config_in_both_modes(api, cloudflare, settings):
    assert api.get("/api/v1/auth/config").json() == {"mode": "cloudflare",
                                                     "login_url": "/auth/cli-login"}
    settings.FALCON_AUTH_MODE = "local"
    assert api.get("/api/v1/auth/config").json() == {"mode": "local",
                                                     "login_url": "/api/v1/auth/token"}
    # Open to anyone, and a garbage token does not turn it into a 401.
    assert api.get("/api/v1/auth/config", HTTP_AUTHORIZATION="Bearer x").status_code == 200
