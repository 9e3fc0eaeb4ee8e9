"""A request body sent with `Transfer-Encoding: chunked` (no Content-Length) is read, under
the same 8 MiB limit, by the real production server (gunicorn), and refused with a 411 saying
so where the server cannot read one (`runserver`); it is never read as empty.

`core.http.middleware.ChunkedBodyWSGIMiddleware`, around `falcon_site.wsgi.application`.
"""
from __future__ import annotations

import http.client
import json
import sys
from pathlib import Path

import pytest

from tests.test_e2e import free_port
from tests.test_json_server_logs import _env, _serve, _stop

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.django_db(transaction=True)

CREATE = {"name": "chunked-create", "cluster_name": "local", "exp_type": "profiling",
          "role_to_task_spec": {"main": {"command": "true", "replica": 1, "image": "x:1",
                                         "device_count": 1, "device_type": "cpu"}},
          "config": "a: 1\n"}


def _chunks(data: bytes, size: int = 64 * 1024):
    for start in range(0, len(data), size):
        yield data[start:start + size]


def _post(port: int, path: str, body: bytes, headers=None, chunked: bool = True):
    """POST `body` to the server; chunked (no Content-Length) unless `chunked` is False."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        sent = {"Content-Type": "application/json", **(headers or {})}
        if chunked:
            conn.request("POST", path, body=_chunks(body), headers=sent, encode_chunked=True)
        else:
            conn.request("POST", path, body=body, headers=sent)
        reply = conn.getresponse()
        raw = reply.read()
        try:
            return reply.status, json.loads(raw or b"null")
        except ValueError:
            return reply.status, raw
    finally:
        conn.close()


@pytest.fixture
def server(tmp_path, request):
    """Start the server `request.param` names ("gunicorn" or "runserver") on a free port."""
    import subprocess

    port = free_port()
    env = dict(_env(tmp_path), FALCON_LOG_FORMAT="text")
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "prepare"], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    if request.param == "gunicorn":
        command = [str(Path(sys.executable).parent / "gunicorn"), "falcon_site.wsgi",
                   "--bind", f"127.0.0.1:{port}", "--workers", "1"]
    else:
        command = [sys.executable, str(ROOT / "manage.py"), "runserver", "--noreload",
                   f"127.0.0.1:{port}"]
    proc = _serve(command, env, port, tmp_path / "server.log")
    yield port
    _stop(proc)


def _token(port: int, chunked: bool) -> str:
    status, body = _post(port, "/api/v1/auth/token",
                         json.dumps({"email": "alice@example.com"}).encode(), chunked=chunked)
    assert status == 201, body
    return body["token"]


@pytest.mark.parametrize("server", ["gunicorn"], indirect=True)
def test_gunicorn_reads_a_chunked_create_and_refuses_one_over_the_limit(server):
    token = _token(server, chunked=True)  # a chunked body, read whole
    auth = {"Authorization": f"Bearer {token}"}
    status, body = _post(server, "/api/v1/exps", json.dumps(CREATE).encode(), auth)
    assert status == 201, body
    assert body["name"] == "chunked-create"
    # 9 MiB of valid JSON, chunked: over the 8 MiB limit, a 413, not "This field is required".
    big = json.dumps({**CREATE, "config": "a" * (9 << 20)}).encode()
    status, body = _post(server, "/api/v1/exps", big, auth)
    assert status == 413, body
    assert body["code"] == "too_large" and "8388608 bytes" in body["detail"]


@pytest.mark.parametrize("server", ["gunicorn"], indirect=True)
def test_gunicorn_reads_a_refused_body_so_the_client_gets_its_413(server):
    """A body over the limit is read to its end (up to twice the limit) before the 413, so the
    client finishes sending and reads the answer instead of a reset connection, with a
    declared length as with a chunked one; the client here sends slowly (small chunks), as a
    loaded machine does, so the server would otherwise answer long before the body ends."""
    token = _token(server, chunked=True)
    auth = {"Authorization": f"Bearer {token}"}
    big = json.dumps({**CREATE, "config": "a" * (12 << 20)}).encode()
    for chunked in (True, False):
        conn = http.client.HTTPConnection("127.0.0.1", server, timeout=120)
        try:
            headers = {"Content-Type": "application/json", **auth}
            if chunked:
                conn.request("POST", "/api/v1/exps", body=_chunks(big, 4096), headers=headers,
                             encode_chunked=True)
            else:
                headers["Content-Length"] = str(len(big))
                conn.putrequest("POST", "/api/v1/exps")
                for name, value in headers.items():
                    conn.putheader(name, value)
                conn.endheaders()
                for part in _chunks(big, 4096):
                    conn.send(part)  # a broken pipe here is the fault this test is about
            reply = conn.getresponse()
            assert reply.status == 413, (chunked, reply.read()[:200])
            assert json.loads(reply.read())["code"] == "too_large"
        finally:
            conn.close()


@pytest.mark.parametrize("server", ["runserver"], indirect=True)
def test_runserver_refuses_a_chunked_body_with_411_saying_so(server):
    status, body = _post(server, "/api/v1/auth/token",
                         json.dumps({"email": "alice@example.com"}).encode())
    assert status == 411, body
    assert body["code"] == "length_required" and "Content-Length" in body["detail"]
    # The same body with its length is served.
    assert _token(server, chunked=False)
