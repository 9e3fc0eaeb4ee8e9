"""HTTP client of the Falcon API (docs/architecture.md, How a request travels), with the session
checks.

Every authenticated request first asks the token provider for the token of THIS server; the
provider checks the cached token's expiry (the CLI refuses to call with an expired token and asks
for a new login). Redirects are never followed, so the `Authorization: Bearer` header cannot be
carried to another host.

Errors become `CLIError`s with one line and an `ExitCode` chosen from the response's stable
`code` (decisions.md#dec-errors) or, when there is none, from the HTTP status: never from the text.

The HTTP library is urllib3 (docs/decisions.md#dec-cli-startup: it costs the CLI's start-up
half of what httpx did), with what httpx gave the CLI kept: a connect and a read timeout, no
retry of its own (`request(attempts=...)` retries with tenacity), no redirect followed, the
proxies of `HTTP_PROXY` / `HTTPS_PROXY` / `ALL_PROXY` / `NO_PROXY`, and certifi's CA bundle
(or `SSL_CERT_FILE` / `SSL_CERT_DIR`) for https.
"""
from __future__ import annotations

import json as jsonlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import urllib3
from urllib3.exceptions import HTTPError, NewConnectionError, TimeoutError

from .errors import CLIError
from .exit_codes import ExitCode

USER_AGENT = "falcon-cli/0.1.0"
CONNECT_TIMEOUT = 5.0  # seconds
STREAM_CHUNK = 64 * 1024  # bytes read at a time from a download


class RedirectedError(CLIError):
    """The server answered with a redirect, which the client never follows.

    Behind Cloudflare Access a request without a valid token is redirected to the Access login
    (`https://<team>.cloudflareaccess.com/...`); `falcon auth login` uses that to recognise the
    cloudflare mode. Attributes: `location`, the redirect target ('' when absent).
    """

    def __init__(self, message: str, location: str):
        super().__init__(message, ExitCode.ERROR)
        self.location = location

# The API's stable error codes (core/errors.py) and DRF's authentication codes.
CODE_TO_EXIT: dict[str, ExitCode] = {
    "not_found": ExitCode.NOT_FOUND,
    "conflict": ExitCode.CONFLICT,
    "invalid_transition": ExitCode.CONFLICT,
    "transition_race": ExitCode.CONFLICT,
    "invalid": ExitCode.INVALID,
    "too_large": ExitCode.INVALID,
    "permission_denied": ExitCode.FORBIDDEN,
    "not_authenticated": ExitCode.AUTH,
    "authentication_failed": ExitCode.AUTH,
}

STATUS_TO_EXIT: dict[int, ExitCode] = {
    400: ExitCode.INVALID,
    401: ExitCode.AUTH,
    403: ExitCode.FORBIDDEN,
    404: ExitCode.NOT_FOUND,
    409: ExitCode.CONFLICT,
    413: ExitCode.INVALID,
    422: ExitCode.INVALID,
}


def _flatten_field_errors(value: Any, prefix: str, out: list[str]) -> None:
    """Append `field: message` strings for a DRF error structure (dicts nest with dots)."""
    if isinstance(value, Mapping):
        for key, sub in value.items():
            _flatten_field_errors(sub, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        text = " ".join(value)
        out.append(f"{prefix}: {text}" if prefix and prefix != "non_field_errors" else text)
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            if sub:
                _flatten_field_errors(sub, f"{prefix}.{index}" if prefix else str(index), out)
    else:
        text = str(value)
        out.append(f"{prefix}: {text}" if prefix and prefix != "non_field_errors" else text)


def error_from_response(status: int, body: Any, *, url: str) -> CLIError:
    """Turn an error answer into one `CLIError` line and exit code.

    Args:
        status: the HTTP status code.
        body: the decoded JSON body (DRF: `{"detail": ..., "code": ...}` or
            `{field: [messages], "code": ...}`), or None when the body was not JSON.
        url: the request URL, named when the body says nothing useful.
    """
    code = body.get("code") if isinstance(body, dict) else None
    exit_code = CODE_TO_EXIT.get(code) if isinstance(code, str) else None
    if exit_code is None:
        if status >= 500:
            exit_code = ExitCode.ERROR
        else:
            exit_code = STATUS_TO_EXIT.get(status, ExitCode.ERROR)

    message = ""
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, str):
            message = detail
        else:
            fields = {k: v for k, v in body.items() if not (k == "code" and isinstance(v, str))}
            parts: list[str] = []
            _flatten_field_errors(fields, "", parts)
            message = "; ".join(parts)
    elif isinstance(body, list):
        parts = []
        _flatten_field_errors(body, "", parts)
        message = "; ".join(parts)
    if not message:
        message = f"the server answered HTTP {status} to {url}"
    if status >= 500:
        message = f"the server failed (HTTP {status}): {message}"
    if exit_code is ExitCode.AUTH and status == 401:
        message = f"{message.rstrip('.')}; run `falcon auth login`"
    return CLIError(message, exit_code, status=status)


def _proxy_for(url: str) -> str | None:
    """Return the proxy URL the environment names for `url` (`HTTPS_PROXY`, `HTTP_PROXY`,
    `ALL_PROXY`, lower case too), None when there is none or `NO_PROXY` exempts its host: the
    standard library's reading of them (`urllib.request`), as httpx and requests use."""
    if not any(name.lower().endswith("_proxy") for name in os.environ):
        return None  # the common case, without importing urllib.request
    from urllib.request import getproxies_environment, proxy_bypass_environment

    proxies = getproxies_environment()
    parts = urlsplit(url)
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    return proxy


def pool_for(server: str) -> urllib3.PoolManager:
    """Return the urllib3 pool that reaches `server`: through the environment's proxy, if any;
    certificates checked against `SSL_CERT_FILE` / `SSL_CERT_DIR`, else certifi's bundle (as
    httpx did). Retries and redirects are off (the client decides)."""
    options: dict[str, Any] = {"retries": False}
    if server.startswith("https:"):
        cert_file, cert_dir = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
        if cert_file or cert_dir:
            options.update(ca_certs=cert_file or None, ca_cert_dir=cert_dir or None)
        else:
            import certifi

            options["ca_certs"] = certifi.where()
    proxy = _proxy_for(server)
    if proxy:
        return urllib3.ProxyManager(proxy, **options)
    return urllib3.PoolManager(**options)


class FalconClient:
    """Talk JSON over HTTP to one Falcon API server.

    Args:
        server: the normalized server URL (`credentials.normalize_server`).
        token_provider: returns the bearer token for `server`, checking its expiry; it is called
            before EACH authenticated request and raises `CLIError(AUTH)` to stop the request.
        timeout: seconds a request may take (connecting: at most 5 s).
        transport: a `urllib3.PoolManager` to send the requests through (tests), None for the
            network (`pool_for`).
    """

    def __init__(self, server: str, *, token_provider: Callable[[], str] | None = None,
                 timeout: float = 30.0, transport: Any = None,
                 sleep: Callable[[float], None] | None = None):
        self.server = server
        self._sleep = sleep
        self._token_provider = token_provider
        self._http = transport if transport is not None else pool_for(server)
        self._timeout = urllib3.Timeout(connect=min(CONNECT_TIMEOUT, timeout), read=timeout)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.clear()

    def _send(self, method: str, path: str, *, params: Any, headers: Mapping[str, str],
              body: bytes | None = None, stream: bool = False):
        """Send one request to `server + path` (with the query `params`); return urllib3's
        response (its body not read yet when `stream`)."""
        url = f"{self.server}{path}"
        if params:
            url += ("&" if "?" in path else "?") + urlencode(params, doseq=True)
        sent = {"User-Agent": USER_AGENT, "Accept": "application/json", **headers}
        return self._http.request(method, url, body=body, headers=sent, timeout=self._timeout,
                                  redirect=False, retries=False, preload_content=not stream)

    def __enter__(self) -> FalconClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def request(self, method: str, path: str, *, json: Any = None,
                params: Any = None, authenticated: bool = True,
                headers: Mapping[str, str] | None = None, attempts: int = 1) -> Any:
        """Send one request and return the decoded JSON body (None for 204).

        Args:
            method: `GET`, `POST`, `PATCH`, `DELETE`.
            path: the path under the server, e.g. `/api/v1/exps/12`.
            json: the request body, sent as JSON when not None.
            params: query parameters (a mapping or a list of pairs for repeated keys).
            authenticated: send `Authorization: Bearer <token>` (checked first for expiry).
            headers: extra request headers (`Idempotency-Key`).
            attempts: how many times to send it when the server cannot be reached, the
                connection drops or the answer times out (tenacity: exponential backoff from
                0.5 s, at most 8 s between tries). Only for requests that are safe to repeat:
                reads, and creates carrying an `Idempotency-Key`.

        Raises:
            CLIError: AUTH (no or expired session, 401), FORBIDDEN (403), NOT_FOUND, CONFLICT,
                INVALID, UNAVAILABLE (unreachable, timed out; after `attempts` tries) or ERROR
                (5xx, malformed answer).
        """
        if attempts <= 1:
            return self._request_once(method, path, json=json, params=params,
                                      authenticated=authenticated, headers=headers)
        import tenacity

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_exponential(multiplier=0.5, max=8),
            retry=tenacity.retry_if_exception(
                lambda exc: isinstance(exc, CLIError) and exc.code == ExitCode.UNAVAILABLE),
            sleep=self._sleep or tenacity.nap.sleep, reraise=True)
        return retrying(self._request_once, method, path, json=json, params=params,
                        authenticated=authenticated, headers=headers)

    def _request_once(self, method: str, path: str, *, json: Any, params: Any,
                      authenticated: bool, headers: Mapping[str, str] | None) -> Any:
        """One try of `request`."""
        headers = dict(headers or {})
        if authenticated:
            if self._token_provider is None:
                raise CLIError("this command needs a login; run `falcon auth login`",
                               ExitCode.AUTH)
            token = self._token_provider()
            headers["Authorization"] = f"Bearer {token}"
            # Cloudflare's edge reads a CLI's token from `cf-access-token` (what `cloudflared
            # access curl` sends); the origin accepts either header. Both go to this one server.
            headers["cf-access-token"] = token
        url = f"{self.server}{path}"
        body_bytes = None
        if json is not None:
            body_bytes = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"),
                                       allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        try:
            response = self._send(method, path, params=params, headers=headers,
                                  body=body_bytes)
        except NewConnectionError as exc:  # before TimeoutError: urllib3 makes it one
            raise CLIError(f"cannot reach the Falcon server at {self.server} "
                           f"({_reason(exc)}); is it running? Start it (e.g. `python manage.py "
                           "runlocal`) or point --server / FALCON_SERVER at it",
                           ExitCode.UNAVAILABLE) from None
        except TimeoutError:
            raise CLIError(f"the Falcon server at {self.server} did not answer {method} {path} "
                           "in time; check that it is healthy", ExitCode.UNAVAILABLE) from None
        except HTTPError as exc:
            raise CLIError(f"talking to the Falcon server at {self.server} failed "
                           f"({type(exc).__name__}: {exc})", ExitCode.UNAVAILABLE) from None

        if response.status in (301, 302, 303, 307, 308) and "location" in response.headers:
            location = response.headers.get("location", "")
            raise RedirectedError(f"the server at {self.server} redirected {path} to "
                                  f"{location or '?'}; point --server at the final URL, or run "
                                  "`falcon auth login` if it is a login page (redirects are not "
                                  "followed, so the token stays with its server)", location)
        body: Any = None
        if response.data:
            try:
                body = jsonlib.loads(response.data)
            except ValueError:  # not JSON, or not UTF-8
                body = None
        if 200 <= response.status < 300:
            if response.status == 204:
                return None
            if body is None:
                raise CLIError(f"the server at {self.server} answered {method} {path} with "
                               "something that is not JSON; is --server a Falcon API server?",
                               ExitCode.ERROR)
            return body
        raise error_from_response(response.status, body, url=url)

    def stream_to(self, path: str, fh, *, params: Any = None,
                  headers: Mapping[str, str] | None = None,
                  on_response: Callable[[int, Mapping[str, str]], None] | None = None) -> int:
        """GET `path` and write the body's bytes to the binary file `fh` as they arrive.

        For file downloads (`falcon exp artifacts --download`): the body is not JSON. Sends the
        bearer token as `request` does; `headers` adds e.g. `Range: bytes=N-`.
        `on_response(status, headers)` is called once the answer's headers are in, before
        any byte of the body is written (to record the file's `ETag` first).

        Returns the HTTP status (200 or 206).

        Raises:
            CLIError: as `request` (errors are read from the JSON error body).
        """
        token = self._token_provider() if self._token_provider is not None else None
        sent = dict(headers or {})
        if token:
            sent["Authorization"] = f"Bearer {token}"
            sent["cf-access-token"] = token
        try:
            response = self._send("GET", path, params=params, headers=sent, stream=True)
            try:
                if not 200 <= response.status < 300:
                    try:
                        body = jsonlib.loads(response.read())
                    except ValueError:
                        body = None
                    raise error_from_response(response.status, body,
                                              url=f"{self.server}{path}")
                if on_response is not None:
                    on_response(response.status, response.headers)
                for data in response.stream(STREAM_CHUNK):
                    fh.write(data)
                return response.status
            finally:
                response.release_conn()
        except NewConnectionError as exc:  # before TimeoutError: urllib3 makes it one
            raise CLIError(f"downloading {path} from {self.server} failed (cannot reach it: "
                           f"{_reason(exc)}); run the command again to resume",
                           ExitCode.UNAVAILABLE) from None
        except TimeoutError:
            raise CLIError(f"the Falcon server at {self.server} did not answer GET {path} in "
                           "time; run the command again to resume", ExitCode.UNAVAILABLE) from None
        except HTTPError as exc:
            raise CLIError(f"downloading {path} from {self.server} failed "
                           f"({type(exc).__name__}: {exc}); run the command again to resume",
                           ExitCode.UNAVAILABLE) from None

    def paginate(self, path: str, *, params: list[tuple[str, str]],
                 limit: int) -> Iterator[dict[str, Any]]:
        """Yield up to `limit` items of a cursor-paginated list, following its `next` links.

        Only the `next` link's query (the cursor) is used, always against `self.server`, so a
        link naming another host never receives the token.

        Args:
            path: the list endpoint, e.g. `/api/v1/exps`.
            params: the filter query as `(key, value)` pairs (repeated keys allowed).
            limit: the most items to yield (>= 1).
        """
        seen = 0
        query: list[tuple[str, str]] = list(params)
        while True:
            page = self.request("GET", path, params=query)
            if not isinstance(page, dict) or not isinstance(page.get("results"), list):
                raise CLIError(f"the server's answer to GET {path} is not a page of results",
                               ExitCode.ERROR)
            for item in page["results"]:
                yield item
                seen += 1
                if seen >= limit:
                    return
            next_link = page.get("next")
            if not next_link:
                return
            next_query = parse_qsl(urlsplit(next_link).query, keep_blank_values=True)
            if next_query == query:  # a server bug would otherwise loop forever
                return
            query = next_query


def _reason(exc: NewConnectionError) -> str:
    """The operating system's words for a failed connection (`Connection refused`)."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    return str(exc).split(": ", 1)[-1] or type(exc).__name__


def open_client(env, server: str, *, authenticated: bool = True) -> FalconClient:
    """Return a client for `server` wired to the environment's credentials, clock and transport.

    Args:
        env: the run's `cli.env.Environment`.
        server: the server URL as the user gave it (normalized here).
        authenticated: False for calls that need no session (login itself).

    Raises:
        CLIError(USAGE): `server` is not an http(s) URL.
    """
    from .token_cache import CredentialStore, normalize_server, session_token_provider

    server = normalize_server(server)
    provider = None
    if authenticated:
        provider = session_token_provider(CredentialStore(env.credentials_dir), server,
                                          clock=env.clock)
    return FalconClient(server, token_provider=provider, timeout=env.http_timeout,
                        transport=env.transport, sleep=env.sleep)
