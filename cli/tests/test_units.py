"""Pure pieces of the CLI: server URL keys, error lines from API bodies, the token cache."""
from __future__ import annotations

import os
import stat

import jwt
import pytest

from cli.client import error_from_response
from cli.token_cache import (CredentialStore, Session, normalize_server, session_token_provider,
                             token_expiry)
from cli.errors import CLIError
from cli.exit_codes import ExitCode


@pytest.mark.parametrize("url,key", [
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
    ("HTTP://LocalHost:8000", "http://localhost:8000"),
    ("https://falcon.example.com:443/", "https://falcon.example.com"),
    ("http://falcon.example.com:80", "http://falcon.example.com"),
    ("https://example.com/falcon/", "https://example.com/falcon"),
])
def test_server_urls_are_normalized(url, key):
    assert normalize_server(url) == key


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://h", "http://", "http://u:p@h",
                                 "http://h:99999"])
def test_bad_server_urls_are_usage_errors(url):
    with pytest.raises(CLIError) as err:
        normalize_server(url)
    assert err.value.code is ExitCode.USAGE


@pytest.mark.parametrize("status,body,code,line", [
    (400, {"role_to_task_spec.main.replica": ["must be an integer >= 1; got 0."],
           "code": "invalid"}, ExitCode.INVALID,
     "role_to_task_spec.main.replica: must be an integer >= 1; got 0."),
    (400, {"name": ["This field is required."], "cluster_name": ["This field is required."]},
     ExitCode.INVALID, "name: This field is required.; cluster_name: This field is required."),
    (400, {"outer": {"inner": ["bad."]}}, ExitCode.INVALID, "outer.inner: bad."),
    (404, {"detail": "Experiment 9 does not exist.", "code": "not_found"}, ExitCode.NOT_FOUND,
     "Experiment 9 does not exist."),
    (409, {"detail": "Experiment 1 is Running.", "code": "conflict"}, ExitCode.CONFLICT,
     "Experiment 1 is Running."),
    (409, {"detail": "x", "code": "invalid_transition"}, ExitCode.CONFLICT, "x"),
    # The code wins over the status; an unknown code falls back to the status.
    (400, {"detail": "gone", "code": "not_found"}, ExitCode.NOT_FOUND, "gone"),
    (404, {"detail": "nope", "code": "something_new"}, ExitCode.NOT_FOUND, "nope"),
    (401, {"detail": "token has expired; log in again"}, ExitCode.AUTH,
     "token has expired; log in again; run `falcon auth login`"),
    (413, {"config": ["is too big."], "code": "too_large"}, ExitCode.INVALID,
     "config: is too big."),
    (502, None, ExitCode.ERROR, "the server failed (HTTP 502): the server answered HTTP 502 to u"),
    # 403 is "not allowed", not "not logged in": logging in again would not help.
    (403, {"detail": "Only the creator or a staff user may abort experiment 3.",
           "code": "permission_denied"}, ExitCode.FORBIDDEN,
     "Only the creator or a staff user may abort experiment 3."),
    (403, None, ExitCode.FORBIDDEN, "the server answered HTTP 403 to u"),
    (403, {"detail": "Authentication credentials were not provided.",
           "code": "not_authenticated"}, ExitCode.AUTH,
     "Authentication credentials were not provided."),
])
def test_error_bodies_become_one_line_and_a_code(status, body, code, line):
    err = error_from_response(status, body, url="u")
    assert err.code is code
    assert err.message == line


def test_multiline_server_text_is_folded_into_one_line():
    err = error_from_response(400, {"detail": "first\nsecond"}, url="u")
    assert err.message == "first second"


def _token(exp: int) -> str:
    return jwt.encode({"sub": "s", "email": "a@example.com", "exp": exp}, "k" * 32,
                      algorithm="HS256")


def test_store_writes_a_0600_file_in_a_0700_dir_and_keys_by_server(tmp_path):
    store = CredentialStore(tmp_path / "cfg")
    store.put(Session(server="http://a:1", token=_token(2_000_000_000), email="a@example.com",
                      expires_at=2_000_000_000, method="local", obtained_at=1))
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.config_dir).st_mode) == 0o700
    assert store.get("HTTP://A:1/").email == "a@example.com"
    assert store.get("http://b:1") is None
    assert store.remove("http://a:1") and not store.remove("http://a:1")
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600


def test_a_corrupt_credentials_file_is_a_usage_error(tmp_path):
    store = CredentialStore(tmp_path)
    store.path.write_text("{not json")
    with pytest.raises(CLIError) as err:
        store.get("http://a:1")
    assert err.value.code is ExitCode.USAGE and str(store.path) in err.value.message


def test_token_provider_checks_exp_of_the_jwt_on_every_call(tmp_path):
    store = CredentialStore(tmp_path)
    store.put(Session(server="http://a:1", token=_token(1000), email="a@example.com",
                      expires_at=5000, method="local", obtained_at=1))
    now = [999.0]
    provide = session_token_provider(store, "http://a:1", clock=lambda: now[0])
    assert provide() == _token(1000)
    now[0] = 1000.0  # the JWT's exp wins over the cached expires_at
    with pytest.raises(CLIError) as err:
        provide()
    assert err.value.code is ExitCode.AUTH
    assert err.value.message.startswith("session expired at ")
    assert "run `falcon auth login --server http://a:1`" in err.value.message


def test_token_expiry_reads_exp_without_verifying():
    assert token_expiry(_token(1234)) == 1234
    with pytest.raises(CLIError) as err:
        token_expiry("not-a-jwt")
    assert err.value.code is ExitCode.AUTH


def test_pagination_uses_only_the_cursor_of_next_links_on_its_own_server():
    import httpx

    from cli.client import FalconClient

    from .conftest import MockTransport

    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if "cursor" not in request.url.params:
            return httpx.Response(200, json={
                "next": "http://elsewhere.example:9/api/v1/exps?cursor=abc&page_size=1",
                "results": [{"id": 2}]})
        return httpx.Response(200, json={"next": None, "results": [{"id": 1}]})

    client = FalconClient("http://falcon.test:8000", token_provider=lambda: "tok",
                          transport=MockTransport(handler))
    assert [e["id"] for e in client.paginate("/api/v1/exps", params=[("page_size", "1")],
                                             limit=10)] == [2, 1]
    assert [r.url.host for r in seen] == ["falcon.test", "falcon.test"]
    assert seen[1].url.params["cursor"] == "abc"
    assert all(r.headers["authorization"] == "Bearer tok" for r in seen)


def test_the_config_dir_comes_from_falcon_config_dir_or_defaults(tmp_path):
    from pathlib import Path

    from cli.env import Environment

    assert Environment(environ={"FALCON_CONFIG_DIR": str(tmp_path)}).credentials_dir == tmp_path
    assert Environment(environ={}).credentials_dir == Path("~/.config/falcon").expanduser()
    assert Environment(environ={}, config_dir=tmp_path / "x").credentials_dir == tmp_path / "x"


def test_the_cli_checks_analysis_ids_as_the_server_defines_them():
    """The CLI keeps its own copy of the format (it imports no Django): the same length, and it
    accepts exactly the DNS-1123 labels the server's URL routes accept."""
    import re

    from analysis.api.urls import AnalysisIdConverter
    from analysis.models import ANALYSIS_ID_MAX, new_analysis_id
    from jobs.specs import DNS1123_LABEL
    from cli.options import ANALYSIS_ID_EXAMPLE, ANALYSIS_ID_MAX as CLI_MAX, AnalysisIdType

    assert CLI_MAX == ANALYSIS_ID_MAX
    check = AnalysisIdType()
    route = re.compile(AnalysisIdConverter.regex)
    samples = [new_analysis_id(), ANALYSIS_ID_EXAMPLE, "7", "a" * 40, "a" * 41, "a-b", "-a",
               "a-", "A", "a_b", "a.b", "", "a\n", "\u0430", "\uff11"]
    for text in samples:
        try:
            cli_ok = check.convert(text, None, None) == text
        except Exception:
            cli_ok = False
        server_ok = len(text) <= ANALYSIS_ID_MAX and bool(DNS1123_LABEL.fullmatch(text))
        assert cli_ok == server_ok == bool(route.fullmatch(text)), text


@pytest.mark.parametrize("environ,server,proxy", [
    ({}, "https://falcon.example.com", None),
    ({"HTTPS_PROXY": "http://proxy.corp:3128"}, "https://falcon.example.com",
     "http://proxy.corp:3128"),
    ({"https_proxy": "http://proxy.corp:3128", "NO_PROXY": ".example.com"},
     "https://falcon.example.com", None),
    ({"HTTP_PROXY": "http://proxy.corp:3128"}, "https://falcon.example.com", None),
    ({"ALL_PROXY": "http://proxy.corp:3128"}, "http://127.0.0.1:8000",
     "http://proxy.corp:3128"),
])
def test_the_client_uses_the_proxy_the_environment_names(monkeypatch, environ, server, proxy):
    """As httpx did: *_PROXY and NO_PROXY, read by the standard library."""
    import urllib3

    from cli.client import pool_for

    for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    pool = pool_for(server)
    if proxy is None:
        assert not isinstance(pool, urllib3.ProxyManager)
    else:
        assert isinstance(pool, urllib3.ProxyManager) and pool.proxy.url == proxy


def test_https_is_checked_against_certifi_unless_ssl_cert_file_says_otherwise(monkeypatch,
                                                                            tmp_path):
    import certifi

    from cli.client import pool_for

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert pool_for("https://falcon.example.com").connection_pool_kw["ca_certs"] == \
        certifi.where()
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    assert pool_for("https://falcon.example.com").connection_pool_kw["ca_certs"] == \
        str(tmp_path / "ca.pem")
