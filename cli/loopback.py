"""The loopback listener of the browser login ("Cloudflare Access + local server").

`falcon auth login` listens on 127.0.0.1 at a port the kernel picks, then sends the browser to the
server's Access-protected login page. Once the user confirms there, the server redirects the
browser to `http://127.0.0.1:<port>/callback?state=<state>&grant=<grant id>`: a one-time grant
id, never the token, which the CLI then redeems with its PKCE verifier (decisions.md#auth-12).
The listener accepts only that path with the exact `state` it was created with (compared in
constant time), so another local process or web page cannot slip in a grant of its own (the
`state` check of OAuth 2.0 for native apps, RFC 8252 section 8.9). It never writes the request
line anywhere.

Any local process can connect to the port, so one connection must not hold the listener: each
is served on a thread of its own (`ThreadingHTTPServer`, daemon threads, never joined on close)
and given up after `CONNECTION_TIMEOUT` seconds without a byte, so an idle or half-sent request
neither delays the browser's callback nor outlives the login.
"""
from __future__ import annotations

import hmac
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

PAGE_OK = (b"<!doctype html><meta charset=utf-8><title>Falcon</title>"
           b"<p>Falcon CLI login confirmed; the CLI is finishing it. You can close this tab.</p>")
PAGE_BAD = (b"<!doctype html><meta charset=utf-8><title>Falcon</title>"
            b"<p>This login answer was not expected by the Falcon CLI; run `falcon auth login` "
            b"again.</p>")
GRANT = re.compile(r"^[A-Za-z0-9_\-]{32,128}$")
# Seconds a connection may stay silent (reading the request line, a header, or writing the
# answer): a browser sends its request at once; a stalled local client is dropped.
CONNECTION_TIMEOUT = 5.0


class _Server(ThreadingHTTPServer):
    """One thread per connection; closing does not wait for a stalled one (its socket timeout
    ends it)."""

    daemon_threads = True
    block_on_close = False


class CallbackListener:
    """Wait for one `/callback` carrying the expected `state` and a grant id on loopback.

    Args:
        state: the random value the login page must echo back.

    Attributes:
        port: the bound TCP port on 127.0.0.1.
        rejected: how many requests were refused (wrong path, wrong or missing state/grant).

    Use as a context manager; it serves on a daemon thread until closed.
    """

    def __init__(self, state: str):
        self.state = state
        self.rejected = 0
        self._grant: str | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()  # connections are served concurrently
        listener = self

        class Handler(BaseHTTPRequestHandler):
            timeout = CONNECTION_TIMEOUT  # StreamRequestHandler: the socket's timeout

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                listener._handle(self)

            def log_message(self, format: str, *args) -> None:  # noqa: A002
                # The default writes the request line to stderr, and the grant id is in it.
                return

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,),
                                        name="falcon-login-listener", daemon=True)

    def __enter__(self) -> CallbackListener:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        state = (query.get("state") or [""])[0]
        grant = (query.get("grant") or [""])[0]
        valid = (parts.path == "/callback" and bool(GRANT.fullmatch(grant))
                 and hmac.compare_digest(state.encode(), self.state.encode()))
        with self._lock:  # the first valid callback wins; a second one is refused
            ok = valid and self._grant is None
            if ok:
                self._grant = grant
            else:
                self.rejected += 1
        try:
            self._answer(request, ok)
        finally:
            if ok:  # after the page is sent: the CLI closes the listener once woken
                self._done.set()

    @staticmethod
    def _answer(request: BaseHTTPRequestHandler, ok: bool) -> None:
        """Send the confirmation page (200) or the refusal page (400), never cached."""
        body = PAGE_OK if ok else PAGE_BAD
        request.send_response(200 if ok else 400)
        request.send_header("Content-Type", "text/html; charset=utf-8")
        request.send_header("Content-Length", str(len(body)))
        request.send_header("Cache-Control", "no-store")
        request.send_header("Referrer-Policy", "no-referrer")
        request.end_headers()
        request.wfile.write(body)

    def wait(self, timeout: float) -> str | None:
        """Return the grant id once a valid callback arrived, or None after `timeout` seconds."""
        if not self._done.wait(timeout):
            return None
        return self._grant
