"""`falcon auth login` in the cloudflare mode, end to end against the live Django server.

The browser is a fake: a function that does what a browser behind Cloudflare Access does with
the login URL. It requests the Falcon page carrying `Cf-Access-Jwt-Assertion` (what the edge
adds after the Access login), reads the confirmation form, checks the page shows the code the
CLI printed, submits the form (Django's CSRF cookie and token, a same-origin `Origin`), does not
follow the redirect by itself, checks it points at loopback and holds no token, then requests
that URL (the CLI's listener), as a browser would. The CLI then redeems the grant itself.
"""
from __future__ import annotations

import io
import json
import logging
import os
import re
import stat
import threading
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest
import yaml
from click.testing import CliRunner

from cli.auth import s256_challenge
from cli.client import FalconClient
from cli.token_cache import CredentialStore, normalize_server
from cli.env import Environment
from cli.exit_codes import ExitCode
from cli.main import falcon

from .conftest import MockTransport, RecordingTransport, one_line

pytestmark = pytest.mark.django_db(transaction=True)
CODE = re.compile(r"\b[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}\b")


class _Form(HTMLParser):
    """The first form of a page: its action and its hidden inputs."""

    def __init__(self):
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = attrs.get("action") or ""
        elif tag == "input" and attrs.get("type") == "hidden":
            self.fields[attrs["name"]] = attrs.get("value") or ""


class FakeBrowser:
    """Stands in for `webbrowser.open`: Access login (a header), confirm, follow to loopback.

    Attributes:
        token: the Access token the edge attaches, or None for none.
        expect_code: the code the page must show (None: any; the test checks it afterwards).
        tamper_state: replace `state` in the redirect before following it (an attacker).
        confirm: press Confirm (False: a user who only looked at the page).
        opened: the URLs opened; locations: the redirects seen; pages: the page texts;
        callback_status: the loopback status codes seen; refused: a refusal's text.
    """

    def __init__(self, token: str | None):
        self.token = token
        self.tamper_state = False
        self.confirm = True
        self.opened: list[str] = []
        self.pages: list[str] = []
        self.locations: list[str] = []
        self.callback_status: list[int] = []
        self.refused: str | None = None

    def __call__(self, url: str) -> bool:
        self.opened.append(url)
        headers = {"Cf-Access-Jwt-Assertion": self.token} if self.token else {}
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        with httpx.Client(follow_redirects=False, timeout=10) as http:
            page = http.get(url, headers=headers)
            if page.status_code != 200:
                self.refused = page.text
                return True
            assert "Location" not in page.headers
            self.pages.append(page.text)
            if not self.confirm:
                return True
            form = _Form()
            form.feed(page.text)
            answer = http.post(urljoin_same(origin, form.action), data=form.fields,
                               headers={**headers, "Origin": origin})
        if answer.status_code != 303:
            self.refused = answer.text
            return True
        location = answer.headers["Location"]
        self.locations.append(location)
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


def urljoin_same(origin: str, path: str) -> str:
    assert path.startswith("/") and not path.startswith("//"), path
    return origin + path


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
    # The user compared the code: the terminal and the page show the same one.
    [code] = set(CODE.findall(result.stderr))
    query = parse_qs(parts.query)
    assert query["code"] == [code] and code in browser.pages[0]
    # No token in any URL: neither the login URL nor the redirect to the listener.
    [location] = browser.locations
    assert bob_token not in url and bob_token not in location
    assert set(parse_qs(urlsplit(location).query)) == {"state", "grant"}

    # Cached for this server, 0600, with the Access token and its expiry.
    path = tmp_path / "credentials.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    session = CredentialStore(tmp_path).get(live_server.url)
    assert session.token == bob_token and session.method == "cloudflare"
    assert session.email == "bob@example.com"
    # The login asked the mode, redeemed the grant with its verifier (whose S256 the login
    # URL carried, the verifier itself never), then had the token confirmed (whoami).
    config, redeem, whoami = env.transport.requests
    assert config.url.path == "/api/v1/auth/config" and "cf-access-token" not in config.headers
    sent = json.loads(redeem.content)
    assert redeem.url.path == "/auth/cli-login/redeem" and redeem.method == "POST"
    assert "authorization" not in redeem.headers and "cf-access-token" not in redeem.headers
    assert sent["state"] == query["state"][0] and sent["verifier"] not in url
    assert query["challenge"] == [s256_challenge(sent["verifier"])]
    assert len(sent["verifier"]) >= 43  # 32 random bytes
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

    with FalconClient("https://falcon.example.com", transport=MockTransport(edge)) as c:
        assert discover_mode(c) == ("cloudflare", None)


@pytest.mark.parametrize("login_url", ["//evil.example/auth/cli-login",
                                       "/auth/../../evil"])
def test_a_login_page_on_another_host_is_refused(tmp_path, login_url):
    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"mode": "cloudflare", "login_url": login_url})

    opened: list[str] = []
    env = Environment(config_dir=tmp_path, environ={}, transport=MockTransport(server),
                      open_browser=lambda url: opened.append(url) or False, login_timeout=0.2)
    result = CliRunner().invoke(falcon, ["auth", "login"], obj=env,
                                env={"FALCON_SERVER": "https://falcon.example.com"})
    if login_url.startswith("//"):
        assert result.exit_code == ExitCode.AUTH and "another host" in result.stderr
        assert opened == []
    else:  # a path on the same host is merely a wrong page: the login just does not finish
        assert result.exit_code == ExitCode.TIMEOUT
        assert [urlsplit(u).hostname for u in opened] == ["falcon.example.com"]


def test_a_redeem_path_guarded_by_access_names_the_bypass_fix(tmp_path):
    """Access in front of `/auth/cli-login/redeem` redirects the CLI to its login page."""
    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/auth/config":
            return httpx.Response(200, json={"mode": "cloudflare", "login_url": "/auth/cli-login"})
        assert request.url.path == "/auth/cli-login/redeem"
        return httpx.Response(302, headers={
            "Location": "https://acme.cloudflareaccess.com/cdn-cgi/access/login/falcon"})

    def browser(url: str) -> bool:  # the user confirmed: the server sent a grant to the listener
        query = parse_qs(urlsplit(url).query)
        callback = (f"http://127.0.0.1:{query['port'][0]}/callback?"
                    + urlencode({"state": query["state"][0], "grant": "g" * 43}))
        with urllib.request.urlopen(callback, timeout=10) as res:
            assert res.status == 200
        return True

    env = Environment(config_dir=tmp_path, environ={}, transport=MockTransport(server),
                      open_browser=browser, login_timeout=5)
    result = CliRunner().invoke(falcon, ["auth", "login"], obj=env,
                                env={"FALCON_SERVER": "https://falcon.example.com"})
    assert result.exit_code == ExitCode.AUTH
    error = result.stderr.splitlines()[-1]
    assert error.startswith("error: ") and "/auth/cli-login/redeem" in error and "Bypass" in error
    assert not (tmp_path / "credentials.json").exists()
