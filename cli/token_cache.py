"""The local token cache: one session per API server, in a 0600 JSON file.

The CLI caches the JWT it obtained at login and sends it with every request; it checks the
token's expiry itself before each request and the server verifies it again.
A session is keyed by the server's origin (`scheme://host:port`), and the client only ever reads
the session of the server it is about to call, so a token never reaches another server.

File: `<config dir>/credentials.json`, mode 0600 from creation (the temporary file is opened with
`os.open(..., 0o600)` and renamed over the old one, so the token is never readable by others, not
even for an instant), in a 0700 directory:

    {"version": 1, "servers": {"http://127.0.0.1:8000": {"token": "...", "email": "...",
      "expires_at": 1713254400, "method": "local", "obtained_at": 1713168000}}}
"""
from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .errors import CLIError
from .exit_codes import ExitCode

FILE_NAME = "credentials.json"
FORMAT_VERSION = 1


def normalize_server(url: str) -> str:
    """Return the origin `scheme://host[:port]` that identifies a server, lowercased.

    Default ports are dropped (`http://h:80` is `http://h`), a path prefix is kept
    (`https://h/falcon`), a trailing slash is not.

    Raises:
        CLIError(USAGE): the URL is not http(s) with a host.
    """
    raw = url.strip()
    try:
        parts = urlsplit(raw)
    except ValueError as exc:  # `http://[::1`: an unclosed IPv6 bracket
        raise CLIError(f"server URL {url!r} is not valid ({exc}): use http(s)://host[:port], "
                       "e.g. http://127.0.0.1:8000 or http://[::1]:8000", ExitCode.USAGE) from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise CLIError(f"server URL {url!r} is not valid: use http(s)://host[:port], "
                       "e.g. http://127.0.0.1:8000", ExitCode.USAGE)
    if parts.query or parts.fragment or parts.username or parts.password:
        raise CLIError(f"server URL {url!r} must not carry credentials, a query or a fragment",
                       ExitCode.USAGE)
    try:
        port = parts.port
    except ValueError:
        raise CLIError(f"server URL {url!r} has an invalid port", ExitCode.USAGE) from None
    host = parts.hostname.lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    default_port = 80 if scheme == "http" else 443
    netloc = host if port in (None, default_port) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


def token_expiry(token: str) -> int | None:
    """Return the `exp` claim (seconds since the epoch) of a JWT, read WITHOUT verifying it.

    The server verifies the signature; the CLI only needs to know whether calling is pointless.

    Returns:
        The expiry, or None when the token has no integer `exp`.

    Raises:
        CLIError(AUTH): the token is not a readable JWT.
    """
    # Read by hand rather than with pyjwt: importing pyjwt loads `cryptography` (~50 ms of CPU,
    # most of `falcon exp list`'s budget) to decode three base64 segments that are not verified
    # here anyway (RFC 7519 section 7.2 steps 1-7 without the signature).
    parts = token.split(".")
    try:
        if len(parts) != 3:
            raise ValueError("not three segments")
        header, payload = (json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
                           for part in parts[:2])
        if not isinstance(header, dict) or not isinstance(payload, dict):
            raise ValueError("not JSON objects")
    except (ValueError, RecursionError, binascii.Error):
        raise CLIError("the cached token is not a readable JWT; run `falcon auth login`",
                       ExitCode.AUTH) from None
    exp = payload.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, (int, float)) or exp != exp \
            or exp in (float("inf"), float("-inf")):
        return None
    return int(exp)


def format_time(epoch: float) -> str:
    """Format seconds since the epoch as local time, e.g. `2025-04-15 18:00:00 CEST`."""
    return datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def write_private_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` as JSON to `path` atomically, the file 0600 from its creation (never a
    chmod afterwards, so a token is never readable by others) in a 0700 folder."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class Session:
    """A cached login for one server.

    Attributes:
        server: the normalized server origin the token was issued by (`normalize_server`).
        token: the bearer JWT.
        email: who logged in.
        expires_at: when the session ends, seconds since the epoch (the JWT's `exp`).
        method: the login flow that produced it (`local`; later `cloudflare`).
        obtained_at: when the login happened, seconds since the epoch.
    """

    server: str
    token: str
    email: str
    expires_at: int
    method: str
    obtained_at: int

    def expired(self, now: float) -> bool:
        """True when the session has ended at `now` (seconds since the epoch)."""
        return now >= self.expires_at


class CredentialStore:
    """Read and write the credentials file.

    Args:
        config_dir: the directory holding `credentials.json` (created 0700 on first write).
    """

    def __init__(self, config_dir: Path):
        self.config_dir = Path(config_dir)
        self.path = self.config_dir / FILE_NAME

    def _load(self) -> dict[str, Any]:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"version": FORMAT_VERSION, "servers": {}}
        except UnicodeDecodeError:  # a credentials file is JSON in UTF-8, always
            data = None
        except OSError as exc:
            raise CLIError(f"cannot read {self.path}: {exc.strerror}", ExitCode.USAGE) from None
        else:
            try:
                data = json.loads(raw)
            except ValueError:
                data = None
        if not isinstance(data, dict) or not isinstance(data.get("servers"), dict):
            raise CLIError(f"{self.path} is not a Falcon credentials file (JSON in UTF-8, "
                           "written by `falcon auth login`); delete it and run "
                           "`falcon auth login`", ExitCode.USAGE)
        return data

    def _save(self, data: dict[str, Any]) -> None:
        write_private_json(self.path, data)

    def get(self, server: str) -> Session | None:
        """Return the session cached for `server` (normalized), or None.

        Raises:
            CLIError(AUTH): the file is unreadable or malformed.
        """
        entry = self._load()["servers"].get(normalize_server(server))
        if not isinstance(entry, dict):
            return None
        try:
            return Session(server=normalize_server(server), token=str(entry["token"]),
                           email=str(entry.get("email", "")),
                           expires_at=int(entry["expires_at"]),
                           method=str(entry.get("method", "local")),
                           obtained_at=int(entry.get("obtained_at", 0)))
        except (KeyError, TypeError, ValueError):
            raise CLIError(f"the session for {server} in {self.path} is malformed; run "
                           "`falcon auth login`", ExitCode.AUTH) from None

    def put(self, session: Session) -> None:
        """Cache `session` for its server, replacing any previous one."""
        data = self._load()
        entry = asdict(session)
        server = entry.pop("server")
        data["servers"][server] = entry
        data["version"] = FORMAT_VERSION
        self._save(data)

    def remove(self, server: str) -> bool:
        """Forget the session of `server`; True if there was one."""
        data = self._load()
        if data["servers"].pop(normalize_server(server), None) is None:
            return False
        self._save(data)
        return True


def login_hint(server: str) -> str:
    """Return the `--server URL` to append to `falcon auth login` ('' for the default server)."""
    from .env import DEFAULT_SERVER

    return "" if server == normalize_server(DEFAULT_SERVER) else f" --server {server}"


def session_token_provider(store: CredentialStore, server: str, *,
                           clock: Callable[[], float]) -> Callable[[], str]:
    """Return a function that yields `server`'s cached token after checking it has not expired.

    The check runs on every call, i.e. before each request, and re-reads the file, so a login made
    in another terminal during `exp wait` is picked up.

    Args:
        store: the credential cache.
        server: the normalized server URL; only its own session is ever read.
        clock: seconds since the epoch.

    Raises (from the returned function):
        CLIError(AUTH): not logged in to `server`, or the session expired.
    """
    hint = login_hint(server)

    def provide() -> str:
        session = store.get(server)
        if session is None:
            raise CLIError(f"not logged in to {server}; run `falcon auth login{hint}`",
                           ExitCode.AUTH)
        expires_at = token_expiry(session.token)
        if expires_at is None:
            expires_at = session.expires_at
        if clock() >= expires_at:
            raise CLIError(f"session expired at {format_time(expires_at)}, run "
                           f"`falcon auth login{hint}`", ExitCode.AUTH)
        return session.token

    return provide
