"""cli.loopback.CallbackListener: one valid callback, served whatever other local clients do."""
from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from cli import loopback
from cli.loopback import CallbackListener

STATE = "s" * 43
GRANT = "g" * 43


def _get(port: int, query: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/callback?{query}",
                                    timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_stalled_connection_is_dropped_after_the_connection_timeout(monkeypatch):
    monkeypatch.setattr(loopback, "CONNECTION_TIMEOUT", 0.2)
    with CallbackListener(STATE) as listener:
        with socket.create_connection(("127.0.0.1", listener.port), timeout=10) as sock:
            sock.sendall(b"GET /callback?state=")
            # The listener closes it (recv answers b"" or a reset) well before this deadline.
            try:
                assert sock.recv(4096) == b""
            except ConnectionResetError:
                pass
        assert listener.wait(0) is None


def test_the_first_valid_callback_wins_and_a_replay_is_refused():
    with CallbackListener(STATE) as listener:
        assert _get(listener.port, f"state=wrong&grant={GRANT}") == 400
        assert _get(listener.port, f"state={STATE}&grant={GRANT}") == 200
        assert _get(listener.port, f"state={STATE}&grant={'h' * 43}") == 400
        assert listener.wait(5) == GRANT and listener.rejected == 2


def test_closing_does_not_wait_for_a_stalled_connection(monkeypatch):
    monkeypatch.setattr(loopback, "CONNECTION_TIMEOUT", 300.0)
    listener = CallbackListener(STATE).__enter__()
    with socket.create_connection(("127.0.0.1", listener.port), timeout=10) as idle:
        assert _get(listener.port, f"state={STATE}&grant={GRANT}") == 200
        listener.close()  # returns though `idle` is still being served
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", listener.port), timeout=2).close()
        idle.sendall(b"\r\n")
