"""`falcon auth` over the wire against the real Django app (live_server)."""
from __future__ import annotations

import json
import os
import socket
import stat
import time

import jwt
import pytest
import yaml

from cli.token_cache import CredentialStore, Session, normalize_server
from cli.exit_codes import ExitCode

from .conftest import EMAIL, one_line

pytestmark = pytest.mark.django_db(transaction=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_login_caches_a_0600_session_for_the_server(falcon_cli):
    result = falcon_cli("auth", "login", "--email", EMAIL)
    assert result.exit_code == 0, result.output
    assert f"logged in to {normalize_server(falcon_cli.server)} as {EMAIL}" in result.stdout
    path = falcon_cli.config_dir / "credentials.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = json.loads(path.read_text())
    entry = data["servers"][normalize_server(falcon_cli.server)]
    assert entry["email"] == EMAIL and entry["method"] == "local"
    claims = jwt.decode(entry["token"], options={"verify_signature": False})
    assert claims["email"] == EMAIL and entry["expires_at"] == claims["exp"]
    # The mode is asked first (auto), then the local issuer; neither request carries a token.
    config, request = falcon_cli.transport.requests
    assert config.url.path == "/api/v1/auth/config"
    assert request.url.path == "/api/v1/auth/token"
    assert not any("authorization" in r.headers or "cf-access-token" in r.headers
                   for r in (config, request))


def test_login_prompts_for_the_email(falcon_cli):
    result = falcon_cli("auth", "login", input="bob@example.com\n")
    assert result.exit_code == 0, result.output
    assert CredentialStore(falcon_cli.config_dir).get(falcon_cli.server).email == \
        "bob@example.com"


def test_login_with_a_bad_email_is_one_line(falcon_cli):
    result = falcon_cli("auth", "login", "--email", "not-an-email")
    assert result.exit_code == ExitCode.INVALID
    assert one_line(result.stderr).startswith("error: email: ")
    assert not (falcon_cli.config_dir / "credentials.json").exists()


def test_status_and_logout(logged_in):
    result = logged_in("auth", "status")
    assert result.exit_code == 0, result.output
    assert EMAIL in result.stdout and normalize_server(logged_in.server) in result.stdout
    assert "ends at" in result.stdout
    data = yaml.safe_load(logged_in("auth", "status", "-o", "yaml").stdout)
    assert data["email"] == EMAIL and data["expired"] is False
    assert data["expires_at"] > time.time()
    assert logged_in.transport.requests == []  # status is answered from the cache

    result = logged_in("auth", "logout")
    assert result.exit_code == 0 and "logged out" in result.stdout
    result = logged_in("auth", "status")
    assert result.exit_code == ExitCode.AUTH
    assert "not logged in" in one_line(result.stderr)


def test_expired_session_asks_for_login_and_sends_nothing(logged_in, token_for):
    store = CredentialStore(logged_in.config_dir)
    old = store.get(logged_in.server)
    expired = token_for(EMAIL, ttl_seconds=-120)
    store.put(Session(server=old.server, token=expired, email=EMAIL,
                      expires_at=old.expires_at, method="local", obtained_at=old.obtained_at))
    for args in (["exp", "list"], ["exp", "get", "1"], ["exp", "abort", "1"],
                 ["exp", "delete", "--yes", "1"]):
        result = logged_in(*args)
        assert result.exit_code == ExitCode.AUTH, result.output
        line = one_line(result.stderr)
        assert line.startswith("error: session expired at ")
        assert "run `falcon auth login" in line
    assert logged_in.transport.requests == []
    assert logged_in("auth", "status").exit_code == ExitCode.AUTH


def test_not_logged_in_sends_nothing(falcon_cli):
    result = falcon_cli("exp", "list")
    assert result.exit_code == ExitCode.AUTH
    assert "not logged in to" in one_line(result.stderr)
    assert falcon_cli.transport.requests == []


def test_a_token_is_only_sent_to_the_server_it_was_issued_for(logged_in):
    # The same live server under another name is another server: its session is not used.
    port = logged_in.server.rsplit(":", 1)[1]
    other = f"http://127.0.0.1:{port}"
    assert normalize_server(other) != normalize_server(logged_in.server)
    result = logged_in("exp", "list", "--server", other)
    assert result.exit_code == ExitCode.AUTH
    assert f"not logged in to {other}" in one_line(result.stderr)
    assert logged_in.transport.requests == []
    # With its own server, the bearer token goes out.
    assert logged_in("exp", "list").exit_code == 0
    [request] = logged_in.transport.requests
    token = CredentialStore(logged_in.config_dir).get(logged_in.server).token
    assert request.headers["authorization"] == f"Bearer {token}"


def test_a_token_the_server_refuses_is_an_auth_error(logged_in):
    store = CredentialStore(logged_in.config_dir)
    forged = jwt.encode({"sub": "x", "email": EMAIL, "exp": int(time.time()) + 600},
                        "not-the-key" * 4, algorithm="HS256")
    store.put(Session(server=normalize_server(logged_in.server), token=forged, email=EMAIL,
                      expires_at=int(time.time()) + 600, method="local", obtained_at=0))
    result = logged_in("exp", "list")
    assert result.exit_code == ExitCode.AUTH
    line = one_line(result.stderr)
    assert line.startswith("error: ") and line.endswith("run `falcon auth login`")


def test_unreachable_server_is_one_line_naming_it(falcon_cli, token_for):
    server = f"http://127.0.0.1:{_free_port()}"
    result = falcon_cli("auth", "login", "--email", EMAIL, "--server", server)
    assert result.exit_code == ExitCode.UNAVAILABLE
    line = one_line(result.stderr)
    assert server in line and "running" in line
    assert result.exception is None or isinstance(result.exception, SystemExit)

    CredentialStore(falcon_cli.config_dir).put(Session(
        server=server, token=token_for(EMAIL), email=EMAIL, expires_at=int(time.time()) + 600,
        method="local", obtained_at=0))
    result = falcon_cli("exp", "get", "1", "--server", server)
    assert result.exit_code == ExitCode.UNAVAILABLE
    assert server in one_line(result.stderr)


def test_redirects_are_not_followed_so_the_token_stays_home(falcon_cli, token_for):
    # Under /admin every unknown path redirects to the login page: the CLI must stop there.
    server = f"{falcon_cli.server}/admin"
    CredentialStore(falcon_cli.config_dir).put(Session(
        server=normalize_server(server), token=token_for(EMAIL), email=EMAIL,
        expires_at=int(time.time()) + 600, method="local", obtained_at=0))
    result = falcon_cli("exp", "list", "--server", server)
    assert result.exit_code == ExitCode.ERROR, result.output
    assert "redirected" in one_line(result.stderr)
    assert len(falcon_cli.transport.requests) == 1
