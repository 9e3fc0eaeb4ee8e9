"""`falcon auth login` in the cloudflare mode, end to end against the live Django server.

The browser is a fake: a function that does what a browser behind Cloudflare Access does with
the login URL. It requests the Falcon page carrying `Cf-Access-Jwt-Assertion` (what the edge
adds after the Access login), does not follow the redirect by itself, checks it points at
loopback, then requests that URL (the CLI's listener), as a browser would.
"""
from __future__ import annotations

import io
import logging
import os
import re
import stat
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest
import yaml
from click.testing import CliRunner

from cli.client import FalconClient
from cli.token_cache import CredentialStore, normalize_server
from cli.env import Environment
from cli.exit_codes import ExitCode
from cli.main import falcon

from .conftest import RecordingTransport, one_line

pytestmark = pytest.mark.django_db(transaction=True)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class FakeBrowser:
    """Stands in for `webbrowser.open`: Access login (a header), then follow to loopback.

    Attributes:
        token: the Access token the edge attaches, or None for none.
        tamper_state: replace `state` in the redirect before following it (an attacker).
        visits: the URLs opened, and the loopback status codes seen.
    """

    def __init__(self, token: str | None):
        self.token = token
        self.tamper_state = False
        self.opened: list[str] = []
        self.callback_status: list[int] = []
        self.refused: str | None = None

    def __call__(self, url: str) -> bool:
        self.opened.append(url)
        headers = {"Cf-Access-Jwt-Assertion": self.token} if self.token else {}
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            opener.open(urllib.request.Request(url, headers=headers), timeout=10)
            raise AssertionError("the login page did not redirect")
        except urllib.error.HTTPError as exc:
            if exc.code != 302:
                self.refused = exc.read().decode()
                return True
            location = exc.headers["Location"]
        target = urlsplit(location)
        assert (target.scheme, target.hostname) == ("http", "127.0.0.1"), location
        if self.tamper_state:
            query = parse_qs(target.query)
            query["state"] = ["forged-state-forged-state-forged"]
            location = urlunsplit(target._replace(query=urlencode(query, doseq=True)))
        try:
            with urllib.request.urlopen(location, timeout=10) as res:
                self.callback_status.append(res.status)
        except urllib.error.HTTPError as exc:
            self.callback_status.append(exc.code)
        return True


class URLWatchingStderr(io.StringIO):
    """stderr that, like a user reading the terminal, opens the first printed URL (--no-browser)."""

    def __init__(self, browser: FakeBrowser):
        super().__init__()
        self.browser = browser

    def write(self, text: str) -> int:
        match = re.search(r"https?://\S+/auth/cli-login\?\S+", text)
        if match:
            threading.Thread(target=self.browser, args=(match.group(0),), daemon=True).start()
        return super().write(text)


def run_cli(server: str, config_dir: Path, *args: str, browser=None, stderr=None,
            login_timeout: float = 10.0, environ: dict | None = None):
    env = Environment(config_dir=config_dir, environ=environ or {},
                      transport=RecordingTransport(), http_timeout=10.0,
                      open_browser=browser or (lambda url: pytest.fail("no browser expected")),
                      login_timeout=login_timeout, stderr=stderr)
    result = CliRunner().invoke(falcon, list(args), obj=env, env={"FALCON_SERVER": server},
                                catch_exceptions=True)
    return result, env


@pytest.fixture
def bob_token(cloudflare):
    return cloudflare.sign(sub="cf-sub-bob", email="bob@example.com")


def test_browser_login_end_to_end(live_server, tmp_path, cloudflare, bob_token, caplog):
    caplog.set_level(logging.DEBUG)
    browser = FakeBrowser(bob_token)
    result, env = run_cli(live_server.url, tmp_path, "auth", "login", browser=browser)
    assert result.exit_code == 0, result.output
    assert "as bob@example.com" in result.stdout
    assert bob_token not in result.output and bob_token not in result.stderr
    [url] = browser.opened
    parts = urlsplit(url)
    assert parts.path == "/auth/cli-login" and f"{parts.scheme}://{parts.netloc}" == \
        live_server.url
    assert browser.callback_status == [200]

    # Cached for this server, 0600, with the Access token and its expiry.
    path = tmp_path / "credentials.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    session = CredentialStore(tmp_path).get(live_server.url)
    assert session.token == bob_token and session.method == "cloudflare"
    assert session.email == "bob@example.com"
    # The login asked the mode, then the server confirmed the token (whoami) with both headers.
    config, whoami = env.transport.requests
    assert config.url.path == "/api/v1/auth/config" and "cf-access-token" not in config.headers
    assert whoami.url.path == "/api/v1/auth/whoami"
    assert whoami.headers["cf-access-token"] == bob_token

    # Later commands send the token to this server (edge header and bearer) and work.
    result, env = run_cli(live_server.url, tmp_path, "exp", "list")
    assert result.exit_code == 0, result.output
    [request] = env.transport.requests
    assert request.headers["cf-access-token"] == bob_token
    assert request.headers["authorization"] == f"Bearer {bob_token}"

    result, _ = run_cli(live_server.url, tmp_path, "auth", "status", "-o", "yaml")
    data = yaml.safe_load(result.stdout)
    assert data["email"] == "bob@example.com" and data["method"] == "cloudflare"
    assert data["issuer"] == "https://acme.cloudflareaccess.com" and data["expired"] is False

    result, _ = run_cli(live_server.url, tmp_path, "auth", "logout")
    assert result.exit_code == 0 and "logged out" in result.stdout
    assert "/cdn-cgi/access/logout" in result.stderr
    assert CredentialStore(tmp_path).get(live_server.url) is None

    assert bob_token not in caplog.text  # neither the server, the CLI nor the listener logs it


def test_no_browser_prints_the_url_and_the_user_opens_it(live_server, tmp_path, cloudflare,
                                                         bob_token):
    browser = FakeBrowser(bob_token)
    stderr = URLWatchingStderr(browser)
    result, _ = run_cli(live_server.url, tmp_path, "auth", "login", "--no-browser",
                        stderr=stderr)
    assert result.exit_code == 0, stderr.getvalue()
    assert "Open this URL" in stderr.getvalue() and len(browser.opened) == 1
    assert CredentialStore(tmp_path).get(live_server.url).token == bob_token


def test_a_forged_state_is_refused_and_nothing_is_cached(live_server, tmp_path, cloudflare,
                                                        bob_token):
    browser = FakeBrowser(bob_token)
    browser.tamper_state = True
    result, _ = run_cli(live_server.url, tmp_path, "auth", "login", browser=browser,
                        login_timeout=1.0)
    assert result.exit_code == ExitCode.TIMEOUT
    assert result.stderr.splitlines()[-1].startswith("error: the browser login did not finish")
    assert browser.callback_status == [400]
    assert not (tmp_path / "credentials.json").exists()


def test_access_refusing_the_login_times_out_cleanly(live_server, tmp_path, cloudflare):
    browser = FakeBrowser(cloudflare.sign(aud=["another-app"]))
    result, _ = run_cli(live_server.url, tmp_path, "auth", "login", browser=browser,
                        login_timeout=1.0)
    assert result.exit_code == ExitCode.TIMEOUT
    assert "audience" in browser.refused
    assert not (tmp_path / "credentials.json").exists()


def test_browser_that_cannot_open_falls_back_to_printing(live_server, tmp_path, cloudflare):
    result, _ = run_cli(live_server.url, tmp_path, "auth", "login",
                        browser=lambda url: False, login_timeout=0.5)
    assert result.exit_code == ExitCode.TIMEOUT
    assert "/auth/cli-login?port=" in result.stderr


def test_local_server_still_uses_the_local_flow(live_server, tmp_path):
    result, env = run_cli(live_server.url, tmp_path, "auth", "login", "--email",
                          "dave@example.com")
    assert result.exit_code == 0, result.output
    assert CredentialStore(tmp_path).get(live_server.url).method == "local"


def test_cloudflared_flow(live_server, tmp_path, cloudflare, bob_token):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls.log"
    (tmp_path / "token").write_text(bob_token + "\n")
    script = bindir / "cloudflared"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
case "$2" in
  login) exit 0 ;;
  token) cat {tmp_path / 'token'} ;;
  *) exit 3 ;;
esac
""")
    script.chmod(0o755)
    result, _ = run_cli(live_server.url, tmp_path / "cfg", "auth", "login", "--cloudflared",
                        environ={"PATH": str(bindir)})
    assert result.exit_code == 0, result.output
    server = normalize_server(live_server.url)
    assert calls.read_text().splitlines() == [f"access login {server}",
                                              f"access token -app={server}"]
    session = CredentialStore(tmp_path / "cfg").get(live_server.url)
    assert session.method == "cloudflared" and session.token == bob_token


def test_cloudflared_not_installed_is_a_usage_error(live_server, tmp_path, cloudflare):
    result, _ = run_cli(live_server.url, tmp_path, "auth", "login", "--cloudflared",
                        environ={"PATH": str(tmp_path)})
    assert result.exit_code == ExitCode.USAGE
    assert "cloudflared is not installed" in one_line(result.stderr)


def test_mode_is_cloudflare_when_access_guards_the_config_endpoint():
    from cli.auth import discover_mode

    def edge(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={
            "Location": "https://acme.cloudflareaccess.com/cdn-cgi/access/login/falcon"})

    with FalconClient("https://falcon.example.com", transport=httpx.MockTransport(edge)) as c:
        assert discover_mode(c) == ("cloudflare", None)


@pytest.mark.parametrize("login_url", ["//evil.example/auth/cli-login",
                                       "/auth/../../evil"])
def test_a_login_page_on_another_host_is_refused(tmp_path, login_url):
    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"mode": "cloudflare", "login_url": login_url})

    opened: list[str] = []
    env = Environment(config_dir=tmp_path, environ={}, transport=httpx.MockTransport(server),
                      open_browser=lambda url: opened.append(url) or False, login_timeout=0.2)
    result = CliRunner().invoke(falcon, ["auth", "login"], obj=env,
                                env={"FALCON_SERVER": "https://falcon.example.com"})
    if login_url.startswith("//"):
        assert result.exit_code == ExitCode.AUTH and "another host" in result.stderr
        assert opened == []
    else:  # a path on the same host is merely a wrong page: the login just does not finish
        assert result.exit_code == ExitCode.TIMEOUT
        assert [urlsplit(u).hostname for u in opened] == ["falcon.example.com"]
