"""`falcon auth`: log in to an API server, show the cached session, log out (seed 000, 3.4).

Login is pluggable: each way of obtaining a token is a `LoginFlow` registered in `LOGIN_FLOWS`
under the name `--method` selects. Today the only flow is `local` (the server's embedded issuer,
architecture page "Embedded defaults"); the Cloudflare Access browser flow of seed 3.4 is added
by registering another flow, without touching the commands or the credential cache.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import rich_click as click

from .errors import CLIError
from .exit_codes import ExitCode
from .options import output_option, pass_env, server_option

TOKEN_PATH = "/api/v1/auth/token"


class LoginFlow(ABC):
    """One way to obtain a session token from a server.

    Subclasses set `name` and implement `obtain`; the `login` command stores what they return.
    """

    name: ClassVar[str] = ""

    @abstractmethod
    def obtain(self, env, client, *, email: str | None) -> tuple[str, str]:
        """Obtain a token.

        Args:
            env: the run's `Environment`.
            client: an unauthenticated `FalconClient` for the server.
            email: the `--email` option, or None (a flow may prompt for it or ignore it).

        Returns:
            `(token, email)`: the JWT and the email it was issued to.

        Raises:
            CLIError: the server refused or cannot be reached.
        """


class LocalLogin(LoginFlow):
    """Local mode: ask the server's embedded issuer for a token for an email.

    `POST /api/v1/auth/token {"email"}` answers `{token, token_type, expires_at, email}`; a server
    running with Cloudflare Access answers 404 because its local issuer is off.
    """

    name = "local"

    def obtain(self, env, client, *, email: str | None) -> tuple[str, str]:
        """Obtain a local-issuer token for `email` (prompted when None)."""
        if not email:
            email = click.prompt("Email", err=True).strip()
        try:
            body = client.request("POST", TOKEN_PATH, json={"email": email},
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


LOGIN_FLOWS: dict[str, type[LoginFlow]] = {LocalLogin.name: LocalLogin}
"""Login flows by `--method` name."""


@click.group("auth")
def auth_group() -> None:
    """Log in to a Falcon server, show the session, log out."""


@auth_group.command("login")
@click.option("--email", help="Your email (local mode). Prompted for when omitted.")
@click.option("--method", type=click.Choice(sorted(LOGIN_FLOWS)), default=LocalLogin.name,
              show_default=True, help="How to obtain the token.")
@server_option
@pass_env
def login(env, email: str | None, method: str, server: str) -> None:
    """Log in and cache the session token for this server (file mode 0600)."""
    from .client import open_client
    from .credentials import CredentialStore, Session, format_time, token_expiry

    with open_client(env, server, authenticated=False) as client:
        token, who = LOGIN_FLOWS[method]().obtain(env, client, email=email)
        expires_at = token_expiry(token)
        if expires_at is None:
            raise CLIError(f"{client.server} issued a token without an expiry (`exp`)",
                           ExitCode.ERROR)
        session = Session(server=client.server, token=token, email=who, expires_at=expires_at,
                          method=method, obtained_at=int(env.clock()))
    store = CredentialStore(env.credentials_dir)
    store.put(session)
    env.print_out(f"logged in to {session.server} as {who}; the session ends at "
                  f"{format_time(expires_at)}")


def _status_data(session, now: float) -> dict[str, Any]:
    from .credentials import format_time

    return {"server": session.server, "email": session.email, "method": session.method,
            "expires_at": session.expires_at, "expires_at_local": format_time(session.expires_at),
            "expired": session.expired(now)}


@auth_group.command("status")
@output_option
@server_option
@pass_env
def status(env, output: str, server: str) -> None:
    """Show who is logged in to this server and when the session ends (no request is sent).

    Exit code 5 when not logged in or the session has expired.
    """
    from . import output as out
    from .credentials import CredentialStore, login_hint, normalize_server, token_expiry

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
                           ("method", data["method"]), ("session", ends)):
            console.print(Text(f"{key + ':':9}{value}"))

    out.emit(env, data, output, table)
    if data["expired"]:
        raise CLIError(f"session expired at {data['expires_at_local']}, run `falcon auth "
                       f"login{login_hint(server)}`", ExitCode.AUTH)


@auth_group.command("logout")
@server_option
@pass_env
def logout(env, server: str) -> None:
    """Forget the cached session of this server."""
    from .credentials import CredentialStore, normalize_server

    server = normalize_server(server)
    if CredentialStore(env.credentials_dir).remove(server):
        env.print_out(f"logged out of {server}")
    else:
        env.print_out(f"not logged in to {server}; nothing to do")
