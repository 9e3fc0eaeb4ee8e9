"""Under FALCON_LOG_FORMAT=json the HTTP servers write JSON lines only: `manage.py runserver`
(what runlocal runs) and gunicorn (production), their access lines with their fields.

Each test starts the real server as a process on a free loopback port against the test
database, sends a few requests (one with a secret in its query string, one the server cannot
parse), stops it, and parses every line it wrote.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.testing import wait_until as poll_until
from tests.test_e2e import database_url, free_port

ROOT = Path(__file__).resolve().parent.parent
SECRET = "s3cr3t-query-value-0123456789"

pytestmark = pytest.mark.django_db(transaction=True)


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, DATABASE_URL=database_url(), FALCON_VAR_DIR=str(tmp_path / "var"),
                FALCON_ARTIFACT_ROOT=(tmp_path / "artifacts").as_uri(),
                FALCON_LOG_FORMAT="json", FALCON_LOG_LEVEL="INFO", PYTHONUNBUFFERED="1",
                HOME=str(tmp_path))  # gunicorn's control socket goes under $HOME


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def _serve(cmd: list[str], env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    def answers() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                return True
        except OSError:
            return False

    poll_until(answers, timeout=120, what="the server to answer", every=0.1)
    return proc


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _requests(port: int) -> dict[str, str]:
    """Send the test's requests; return the request id each answer carried."""
    base = f"http://127.0.0.1:{port}"
    ids = {}
    status, headers = _get(f"{base}/api/v1/exps", {"X-Request-ID": "client-chosen-id-1"})
    assert status == 401 and headers["X-Request-ID"] == "client-chosen-id-1"
    ids["exps"] = headers["X-Request-ID"]
    status, headers = _get(f"{base}/healthz?token={SECRET}")
    assert status == 200
    ids["healthz"] = headers["X-Request-ID"]
    status, headers = _get(f"{base}/no-such-page", {"X-Request-ID": "bad id with spaces"})
    assert status == 404 and headers["X-Request-ID"] != "bad id with spaces"
    ids["missing"] = headers["X-Request-ID"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"NOT-HTTP\r\n\r\n")  # a request line the server cannot parse
        sock.recv(4096)
    return ids


def _wait_for_log(log: Path, written: Callable[[str], bool], seconds: float = 60) -> None:
    """Wait until the log's text satisfies `written`: a server writes a request's access line
    after it has sent the answer, so the client can be done before the line is."""
    try:
        poll_until(lambda: written(log.read_text()), timeout=seconds, what="the awaited lines")
    except AssertionError as exc:
        raise AssertionError(f"{exc}:\n{log.read_text()}") from None


def _served(command: list[str], env: dict[str, str], port: int, log: Path,
            client: Callable[[int], Any],
            written: Callable[[Any, str], bool] | None = None) -> Any:
    """Prepare the database, serve `command` (which listens on `port`), run `client(port)`
    against it, wait until `written(answer, log text)` holds (when given: a client that waits
    for its lines itself passes none), stop the server, and return what `client` returned (its
    output is in `log`)."""
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "prepare"], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    proc = _serve(command, env, port, log)
    try:
        answer = client(port)
        if written is not None:
            _wait_for_log(log, lambda text: written(answer, text))
        return answer
    finally:
        _stop(proc)


def _access_logged(logger: str) -> Callable[[dict[str, str], str], bool]:
    """Whether `logger` wrote the access line of every request id (other lines of a request,
    the application's, come before its access line)."""
    def written(ids: dict[str, str], text: str) -> bool:
        seen = set()
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written
            if isinstance(record, dict) and record.get("logger") == logger:
                seen.add(record.get("request_id"))
        return set(ids.values()) <= seen
    return written


def _gunicorn(port: int) -> list[str]:
    return [str(Path(sys.executable).parent / "gunicorn"), "falcon_site.wsgi", "--bind",
            f"127.0.0.1:{port}", "--workers", "1", "--access-logfile", "-"]


def _records(log: Path) -> list[dict]:
    text = log.read_text()
    assert SECRET not in text, "a query string reached the log"
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"line {number} is not JSON: {line!r}\n{text}")
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "message", "request_id"} <= set(record), line
        records.append(record)
    return records


def _access(records: list[dict], logger: str, request_id: str) -> dict:
    [record] = [r for r in records if r["logger"] == logger and r["request_id"] == request_id]
    return record


def test_runserver_writes_only_json_lines_with_access_fields(tmp_path):
    port = free_port()
    log = tmp_path / "runserver.log"
    ids = _served([sys.executable, str(ROOT / "manage.py"), "runserver", "--noreload",
                   "--insecure", f"127.0.0.1:{port}"], _env(tmp_path), port, log, _requests,
                   lambda ids, text: _access_logged("django.server")(ids, text) and '"status": 400' in text)
    records = _records(log)

    exps = _access(records, "django.server", ids["exps"])
    assert (exps["method"], exps["path"], exps["status"]) == ("GET", "/api/v1/exps", 401)
    assert exps["level"] == "WARNING" and exps["bytes"] > 0
    assert isinstance(exps["duration_ms"], float)
    healthz = _access(records, "django.server", ids["healthz"])
    assert (healthz["path"], healthz["status"]) == ("/healthz", 200)
    missing = _access(records, "django.server", ids["missing"])
    assert (missing["path"], missing["status"]) == ("/no-such-page", 404)
    # The application's own line of a request carries the same id and the same fields.
    [app] = [r for r in records if r["logger"] == "falcon.http" and r["path"] == "/api/v1/exps"]
    assert (app["request_id"], app["method"], app["status"]) == (ids["exps"], "GET", 401)
    # What Django says of a response (django.request) carries its request's id too.
    assert any(r["logger"] == "django.request" and r["request_id"] == ids["missing"]
               for r in records)
    # The refused request line and the banner are JSON lines too.
    assert any(r["logger"] == "django.server" and r.get("status") == 400 for r in records)
    assert any(r["message"].startswith("Starting development server at http://127.0.0.1:")
               for r in records)


def test_gunicorn_writes_only_json_lines_with_access_fields(tmp_path):
    port = free_port()
    log = tmp_path / "gunicorn.log"
    ids = _served(_gunicorn(port), _env(tmp_path), port, log, _requests,
                  _access_logged("gunicorn.access"))
    records = _records(log)

    exps = _access(records, "gunicorn.access", ids["exps"])
    assert (exps["method"], exps["path"], exps["status"]) == ("GET", "/api/v1/exps", 401)
    assert exps["bytes"] > 0 and isinstance(exps["duration_ms"], float)
    assert exps["message"].startswith("GET /api/v1/exps 401 ")
    healthz = _access(records, "gunicorn.access", ids["healthz"])
    assert (healthz["path"], healthz["status"]) == ("/healthz", 200)
    # gunicorn's error log (start, workers, shutdown) is JSON as well.
    errors = [r["message"] for r in records if r["logger"] == "gunicorn.error"]
    assert any(m.startswith("Starting gunicorn") for m in errors)
    assert any(m.startswith("Booting worker") for m in errors)


def test_gunicorn_text_lines_mask_a_token_in_a_query_string(tmp_path):
    """Under `text` gunicorn keeps its own access format (the request line, query string
    included), and a credential in it is still masked."""
    port = free_port()
    log = tmp_path / "gunicorn.log"
    status = _served(_gunicorn(port), dict(_env(tmp_path), FALCON_LOG_FORMAT="text"), port,
                     log, lambda port: _get(f"http://127.0.0.1:{port}/healthz?token={SECRET}")[0],
                     lambda status, text: '"GET /healthz?token=' in text)
    assert status == 200
    text = log.read_text()
    assert SECRET not in text
    assert '"GET /healthz?token=[redacted] HTTP/1.1" 200' in text
