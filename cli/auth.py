"""`falcon auth`: log in to an API server, show the cached session, log out.

Login is pluggable: each way of obtaining a token is a `LoginFlow` registered in `LOGIN_FLOWS`
under the name `--method` selects:

- `local`: the server's embedded issuer (docs/architecture.md, "Embedded defaults and
  production"; decisions.md#dec-auth);
- `cloudflare`: the browser flow ("Cloudflare Access + local server"): a loopback listener, the
  browser at the server's Access-protected `/auth/cli-login` where the user confirms the code
  the CLI prints, a one-time grant id back on the listener with a `state` the CLI checks, and
  the token redeemed with a PKCE verifier (decisions.md#auth-12);
- `cloudflared`: `cloudflared access login` / `cloudflared access token`, when it is installed.

Without `--method` the CLI asks the server (`GET /api/v1/auth/config`) which mode it runs in.
"""
from __future__ import annotations

import base64
import hashlib
import secrets
from abc import ABC, abstractmethod
from typing import Any, ClassVar
from urllib.parse import urlencode, urljoin, urlsplit

import rich_click as click

from .errors import CLIError
from .exit_codes import ExitCode
from .options import FalconSubGroup, output_option, pass_env, server_option
from .visible import visible

TOKEN_PATH = "/api/v1/auth/token"
CONFIG_PATH = "/api/v1/auth/config"
WHOAMI_PATH = "/api/v1/auth/whoami"
CLI_LOGIN_PATH = "/auth/cli-login"  # used when Access guards even the config endpoint
REDEEM_SUFFIX = "/redeem"  # the CLI login's grant is redeemed at <login page>/redeem
CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # RFC 8628 section 6.1
ACCESS_LOGOUT_PATH = "/cdn-cgi/access/logout"  # Cloudflare ends the browser's Access session
CLOUDFLARED_TIMEOUT = 600.0  # seconds `cloudflared access login` may take (browser, SSO, MFA)


class LoginFlow(ABC):
    """One way to obtain a session token from a server.

    Subclasses set `name` and implement `obtain`; the `login` command stores what they return.
    """

    name: ClassVar[str] = ""

    @abstractmethod
    def obtain(self, env, client, *, email: str | None, no_browser: bool = False,
               login_path: str | None = None) -> tuple[str, str]:
        """Obtain a token.

        Args:
            env: the run's `Environment`.
            client: an unauthenticated `FalconClient` for the server.
            email: the `--email` option, or None (a flow may prompt for it or ignore it).
            no_browser: print the login URL instead of opening a browser (`--no-browser`).
            login_path: the login path the server announced (`GET /api/v1/auth/config`), or
                None for the flow's default.

        Returns:
            `(token, email)`: the JWT and the email it was issued to.

        Raises:
            CLIError: the server refused or cannot be reached, or the login did not finish.
        """


class LocalLogin(LoginFlow):
    """Local mode: ask the server's embedded issuer for a token for an email.

    `POST /api/v1/auth/token {"email"}` answers `{token, token_type, expires_at, email}`; a server
    running with Cloudflare Access answers 404 because its local issuer is off.
    """

    name = "local"

    def obtain(self, env, client, *, email: str | None, no_browser: bool = False,
               login_path: str | None = None) -> tuple[str, str]:
        """Obtain a local-issuer token for `email` (prompted when None)."""
        if not email:
            email = click.prompt("Email", err=True).strip()
        try:
            body = client.request("POST", login_path or TOKEN_PATH, json={"email": email},
                                  authenticated=False)
        except CLIError as exc:
            if exc.code is ExitCode.NOT_FOUND:
                raise CLIError(f"{client.server} does not issue local tokens ({exc.message})",
                               ExitCode.AUTH) from None
            raise
        token = body.get("token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise CLIError(f"{client.server} answered the login without a token",
                           ExitCode.ERROR)
        return token, str(body.get("email") or email)


def _confirm_identity(env, client, token: str) -> str:
    """Ask the server who `token` is (`GET /api/v1/auth/whoami`) and return the email.

    The server verifies the token as on every request, so a token from a wrong Access app or
    team is refused here, at login, rather than on the first real command.

    Raises:
        CLIError(AUTH): the server refuses the token, or it names a service, not a person.
    """
    from .client import FalconClient

    with FalconClient(client.server, token_provider=lambda: token, timeout=env.http_timeout,
                      transport=env.transport) as checker:
        who = checker.request("GET", WHOAMI_PATH)
    email = who.get("email") if isinstance(who, dict) else None
    if not isinstance(email, str) or not email:
        raise CLIError(f"{client.server} accepted the token but it names no user",
                       ExitCode.AUTH)
    return email


def login_code() -> str:
    """A short code the user compares between the terminal and the login page: `XXXX-XXXX`.

    RFC 8628 section 6.1's user-code alphabet (base 20, no vowels, no look-alike characters).
    """
    chars = "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))
    return f"{chars[:4]}-{chars[4:]}"


def s256_challenge(verifier: str) -> str:
    """RFC 7636 section 4.2: `BASE64URL-ENCODE(SHA256(ASCII(code_verifier)))`, no padding."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class CloudflareBrowserLogin(LoginFlow):
    """Cloudflare mode: log in through Access in the browser, confirm, redeem over the API.

    Listen on 127.0.0.1 at a port the kernel picks; make a one-time `state`, a PKCE `verifier`
    (32 random bytes, kept here; RFC 7636) and a code printed in the terminal; open
    `<server><login_path>?port=&state=&challenge=S256(verifier)&code=` in the browser (or print
    it with `--no-browser`). The user confirms there; the server sends the browser to
    `/callback?state=&grant=` on the listener, and the CLI redeems the grant with
    `POST <login_path>/redeem {grant, state, verifier}`, receiving the token in the body. The
    whole wait lasts at most `env.login_timeout` seconds; the token is then confirmed with the
    server (decisions.md#auth-12).
    """

    name = "cloudflare"

    def obtain(self, env, client, *, email: str | None, no_browser: bool = False,
               login_path: str | None = None) -> tuple[str, str]:
        """Run the browser login; `email` is not used (Access decides who logs in)."""
        from .client import RedirectedError
        from .loopback import CallbackListener

        base = urljoin(client.server + "/", login_path or CLI_LOGIN_PATH)
        if urlsplit(base)[:2] != urlsplit(client.server)[:2]:
            raise CLIError(f"{client.server} announced a login page on another host ({base}); "
                           "refusing to log in there", ExitCode.AUTH)
        state = secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(32)  # 32 random bytes, 43 characters: never sent
        code = login_code()
        with CallbackListener(state) as listener:
            url = f"{base}?" + urlencode({"port": listener.port, "state": state,
                                          "challenge": s256_challenge(verifier), "code": code})
            opened = False
            if not no_browser:
                try:
                    opened = bool(env.open_browser(url))
                except Exception:  # no display, no browser: fall back to printing the URL
                    opened = False
            if opened:
                env.print_err("A browser window opened for the Cloudflare Access login; "
                              "waiting for it to finish ...")
            else:
                env.print_err("Open this URL in a browser on this machine to log in:")
                env.print_err(url)
            env.print_err(f"Confirm there only if the page shows the code {code}")
            grant = listener.wait(env.login_timeout)
        if grant is None:
            raise CLIError(f"the browser login did not finish within {env.login_timeout:.0f} s; "
                           "run `falcon auth login` again", ExitCode.TIMEOUT)
        redeem = urlsplit(base).path.rstrip("/") + REDEEM_SUFFIX
        try:
            body = client.request("POST", redeem, authenticated=False,
                                  json={"grant": grant, "state": state, "verifier": verifier})
        except RedirectedError:
            raise CLIError(f"Cloudflare Access guards {client.server}{redeem}, so the CLI cannot "
                           "collect its login; give that path a Bypass policy in the Access "
                           "application (the grant and verifier protect it)",
                           ExitCode.AUTH) from None
        token = body.get("token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise CLIError(f"{client.server} answered the login without a token",
                           ExitCode.ERROR)
        return token, _confirm_identity(env, client, token)


class CloudflaredLogin(LoginFlow):
    """Cloudflare mode through `cloudflared`: `access login <server>`, then `access token`.

    Cloudflare's CLI tutorial: `cloudflared access login https://app` opens the browser and
    stores the app token; `cloudflared access token -app=https://app` prints it.
    """

    name = "cloudflared"

    def obtain(self, env, client, *, email: str | None, no_browser: bool = False,
               login_path: str | None = None) -> tuple[str, str]:
        """Run cloudflared and return its token for this server, confirmed by the server."""
        import shutil
        import subprocess

        binary = shutil.which("cloudflared", path=env.environ.get("PATH"))
        if binary is None:
            raise CLIError("cloudflared is not installed (not on PATH); install it or log in "
                           "without --cloudflared", ExitCode.USAGE)
        run = env.run or subprocess.run
        try:
            # Inherits the terminal: cloudflared prints its own URL when no browser opens.
            login = run([binary, "access", "login", client.server], timeout=CLOUDFLARED_TIMEOUT,
                        stdout=subprocess.DEVNULL, check=False)
            if login.returncode != 0:
                raise CLIError(f"`cloudflared access login` failed (exit {login.returncode})",
                               ExitCode.AUTH)
            out = run([binary, "access", "token", f"-app={client.server}"], timeout=60,
                      capture_output=True, text=True, check=False)
        except subprocess.TimeoutExpired:
            raise CLIError("cloudflared did not finish in time; run `falcon auth login "
                           "--cloudflared` again", ExitCode.TIMEOUT) from None
        token = (out.stdout or "").strip()
        if out.returncode != 0 or not token or any(c.isspace() for c in token):
            raise CLIError(f"`cloudflared access token` gave no token (exit {out.returncode})",
                           ExitCode.AUTH)
        return token, _confirm_identity(env, client, token)


LOGIN_FLOWS: dict[str, type[LoginFlow]] = {
    flow.name: flow for flow in (LocalLogin, CloudflareBrowserLogin, CloudflaredLogin)}
"""Login flows by `--method` name."""


def discover_mode(client) -> tuple[str, str | None]:
    """Ask the server how to log in: `(mode, login_path)`.

    `GET /api/v1/auth/config` answers `{"mode", "login_url"}`. When Cloudflare Access guards even
    that endpoint, the edge answers with a redirect to its login page: that means cloudflare
    mode with the default login page. A server without the endpoint (404) is a local server of
    an older version.

    Raises:
        CLIError: the server cannot be reached or answers something else.
    """
    from .client import RedirectedError

    try:
        body = client.request("GET", CONFIG_PATH, authenticated=False)
    except RedirectedError:
        return "cloudflare", None
    except CLIError as exc:
        if exc.code is ExitCode.NOT_FOUND:
            return "local", None
        raise
    mode = body.get("mode") if isinstance(body, dict) else None
    if mode not in ("local", "cloudflare"):
        raise CLIError(f"{client.server} announced an unknown auth mode {mode!r}",
                       ExitCode.ERROR)
    login_url = body.get("login_url")
    return mode, login_url if isinstance(login_url, str) and login_url.startswith("/") else None


@click.group("auth", cls=FalconSubGroup)
def auth_group() -> None:
    """Log in to a Falcon server, show the session, log out.

    \b
    Examples:
      falcon auth login --email you@example.com
      falcon auth status
      falcon auth logout
    """


@auth_group.command("login")
@click.option("--email", help="Your email (local mode). Prompted for when omitted.")
@click.option("--method", type=click.Choice(["auto", *sorted(LOGIN_FLOWS)]), default="auto",
              show_default=True,
              help="How to obtain the token; auto asks the server which mode it runs in.")
@click.option("--cloudflared", "use_cloudflared", is_flag=True,
              help="Use `cloudflared access login` (same as --method cloudflared).")
@click.option("--no-browser", is_flag=True,
              help="Print the login URL instead of opening a browser (cloudflare mode).")
@server_option
@pass_env
def login(env, email: str | None, method: str, use_cloudflared: bool, no_browser: bool,
          server: str) -> None:
    """Log in and cache the session token for this server (file mode 0600).

    \b
    Examples:
      falcon auth login --email you@example.com
      falcon auth login --server https://falcon.example.com
    """
    from .client import open_client
    from .token_cache import CredentialStore, Session, format_time, token_expiry

    if use_cloudflared:
        if method not in ("auto", CloudflaredLogin.name):
            raise CLIError("--cloudflared contradicts --method " + method, ExitCode.USAGE)
        method = CloudflaredLogin.name
    with open_client(env, server, authenticated=False) as client:
        login_path = None
        if method == "auto":
            mode, login_path = discover_mode(client)
            method = CloudflareBrowserLogin.name if mode == "cloudflare" else LocalLogin.name
        token, who = LOGIN_FLOWS[method]().obtain(env, client, email=email,
                                                  no_browser=no_browser, login_path=login_path)
        expires_at = token_expiry(token)
        if expires_at is None:
            raise CLIError(f"{client.server} issued a token without an expiry (`exp`)",
                           ExitCode.ERROR)
        if expires_at <= env.clock():
            raise CLIError(f"{client.server} handed over a token that already expired at "
                           f"{format_time(expires_at)}", ExitCode.AUTH)
        session = Session(server=client.server, token=token, email=who, expires_at=expires_at,
                          method=method, obtained_at=int(env.clock()))
    store = CredentialStore(env.credentials_dir)
    store.put(session)
    env.print_out(visible(f"logged in to {session.server} as {who}; the session ends at "
                          f"{format_time(expires_at)}"))


def _token_issuer(token: str) -> str:
    """Return the token's `iss` read WITHOUT verifying it ('' when absent): for display only."""
    import jwt

    try:
        iss = jwt.decode(token, options={"verify_signature": False}).get("iss")
    except jwt.PyJWTError:
        return ""
    return iss if isinstance(iss, str) else ""


def _status_data(session, now: float) -> dict[str, Any]:
    from .token_cache import format_time

    return {"server": session.server, "email": session.email, "method": session.method,
            "issuer": _token_issuer(session.token),
            "expires_at": session.expires_at, "expires_at_local": format_time(session.expires_at),
            "expired": session.expired(now)}


@auth_group.command("status")
@output_option
@server_option
@pass_env
def status(env, output: str, server: str) -> None:
    """Show who is logged in to this server and when the session ends (no request is sent).

    Exit code 5 when not logged in or the session has expired.

    \b
    Examples:
      falcon auth status
      falcon auth status -o json
    """
    from . import output as out
    from .token_cache import CredentialStore, login_hint, normalize_server, token_expiry

    server = normalize_server(server)
    session = CredentialStore(env.credentials_dir).get(server)
    if session is None:
        raise CLIError(f"not logged in to {server}; run `falcon auth login{login_hint(server)}`",
                       ExitCode.AUTH)
    exp = token_expiry(session.token)
    if exp is not None and exp != session.expires_at:
        from dataclasses import replace

        session = replace(session, expires_at=exp)
    now = env.clock()
    data = _status_data(session, now)

    def table(console, data: dict[str, Any]) -> None:
        from rich.text import Text

        left = out.duration(session.expires_at - now)
        ends = (f"expired at {data['expires_at_local']}" if data["expired"]
                else f"ends at {data['expires_at_local']} (in {left})")
        for key, value in (("server", data["server"]), ("user", data["email"]),
                           ("method", data["method"]), ("issuer", data["issuer"] or "-"),
                           ("session", ends)):
            console.print(Text(visible(f"{key + ':':9}{value}")))

    out.emit(env, data, output, table)
    if data["expired"]:
        raise CLIError(f"session expired at {data['expires_at_local']}, run `falcon auth "
                       f"login{login_hint(server)}`", ExitCode.AUTH)


@auth_group.command("logout")
@server_option
@pass_env
def logout(env, server: str) -> None:
    """Forget the cached session of this server.

    A Cloudflare Access login also left a session in the browser (and, with `--cloudflared`, a
    token in cloudflared's cache); the command says where to end those, as it cannot.

    \b
    Examples:
      falcon auth logout
      falcon auth logout --server https://falcon.example.com
    """
    from .token_cache import CredentialStore, normalize_server

    server = normalize_server(server)
    store = CredentialStore(env.credentials_dir)
    session = store.get(server)
    if not store.remove(server):
        env.print_out(f"not logged in to {server}; nothing to do")
        return
    env.print_out(f"logged out of {server}")
    if session is not None and session.method in (CloudflareBrowserLogin.name,
                                                  CloudflaredLogin.name):
        env.print_err(f"the browser's Cloudflare Access session lasts until it expires; end it "
                      f"at {server}{ACCESS_LOGOUT_PATH}")
