"""An HTTP proxy on loopback in front of fake-gcs-server that misbehaves on purpose.

The emulator answers every request correctly; GCS itself sometimes answers 429 or 503, or
commits an upload and loses the reply in a connection reset. The proxy forwards every request
to the emulator and, for requests matching a planned fault, answers the status instead
(`status`) or forwards the request and then resets the connection without replying
(`reset_after=True`: the write is committed, the client never hears so).

Point `STORAGE_EMULATOR_HOST` at `proxy.url` to put it between a client and the emulator.
"""
from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Fault:
    method: str
    path_contains: str
    status: int = 0
    reset_after: bool = False
    times: int = 1


class FaultyGCSProxy:
    """Forward to `upstream` (http://host:port of the emulator); inject `faults` in order."""

    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        self.faults: list[Fault] = []
        self.seen: list[tuple[str, str, int]] = []  # (method, path, status answered)
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                proxy.handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def inject(self, method: str, path_contains: str, *, status: int = 0,
               reset_after: bool = False, times: int = 1) -> None:
        with self.lock:
            self.faults.append(Fault(method, path_contains, status, reset_after, times))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        with self.lock:
            fault = next((f for f in self.faults if f.times > 0 and f.method == h.command
                          and f.path_contains in h.path), None)
            if fault is not None:
                fault.times -= 1
        if fault is not None and fault.status:
            data = json.dumps({"error": {"code": fault.status, "message": "injected"}}).encode()
            with self.lock:
                self.seen.append((h.command, h.path, fault.status))
            h.send_response(fault.status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host",)}
        conn.request(h.command, h.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        with self.lock:
            self.seen.append((h.command, h.path, 0 if fault else resp.status))
        if fault is not None and fault.reset_after:
            # Committed upstream; the client sees a reset instead of the reply.
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            h.connection.close()
            return
        h.send_response(resp.status)
        for key, value in resp.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                h.send_header(key, value)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
