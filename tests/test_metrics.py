"""The API server's /metrics: request count and latency by route and status, gRPC calls; and
the sums across several gunicorn workers (prometheus-client's multiprocess mode)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.testing import wait_until as poll_until
from falcon_site.grpc.testing import grpc_channel, grpc_server  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parent.parent


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found, name, **labels) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.django_db
def test_requests_are_counted_by_route_method_and_status(auth_api, client):
    route = "api/v1/exps/<id:exp_id>"
    before = samples(client.get("/metrics").content.decode())
    assert auth_api.get("/api/v1/exps/424242").status_code == 404
    assert auth_api.get("/api/v1/exps/424243").status_code == 404
    res = client.get("/metrics")
    assert res.status_code == 200 and res["Content-Type"].startswith("text/plain")
    after = samples(res.content.decode())
    key = {"route": route, "method": "GET", "status": "404"}
    assert value(after, "falcon_http_requests_total", **key) == value(
        before, "falcon_http_requests_total", **key) + 2
    assert value(after, "falcon_http_request_duration_seconds_count", route=route,
                 method="GET") >= 2
    # Raw paths never become labels: one series for every id.
    assert not any("424242" in str(labels) for _name, labels in after)


def series(found, name: str) -> set[tuple]:
    """The label sets of every sample of `name`."""
    return {labels for sample, labels in found if sample == name}


HTTP_SERIES = ("falcon_http_requests_total", "falcon_http_request_duration_seconds_count")


@pytest.mark.django_db
def test_made_up_methods_and_paths_add_a_constant_number_of_series(client):
    """200 unauthenticated requests, methods M1...M200 on made-up paths and on real routes:
    every label comes from a closed set, so the series grow by a bounded few, not by 200."""
    # Warm up the folded series once (each is created by its first request).
    client.generic("M0", "/api/v1/exps")
    client.generic("M0", "/no/such/path-0")
    client.get("/no/such/path-0")
    before = samples(client.get("/metrics").content.decode())
    for n in range(1, 201):
        assert client.generic(f"M{n}", "/api/v1/exps").status_code in (401, 403, 405)
        assert client.generic(f"M{n}", f"/no/such/path-{n}").status_code == 404
        assert client.get(f"/random-{n}/{n * 7919}").status_code == 404
    after = samples(client.get("/metrics").content.decode())
    for name in HTTP_SERIES:
        added = series(after, name) - series(before, name)
        # At most the scrape's own series: nothing per method or path sent.
        assert len(added) <= 2, sorted(added)
        assert not any(f"M{n}" in str(labels) or f"path-{n}" in str(labels)
                       for labels in series(after, name) for n in range(1, 201))
    other = {"route": "api/v1/exps", "method": "other"}
    assert value(after, "falcon_http_request_duration_seconds_count", **other) == value(
        before, "falcon_http_request_duration_seconds_count", **other) + 200
    unmatched = {"route": "unmatched", "method": "other", "status": "404"}
    assert value(after, "falcon_http_requests_total", **unmatched) == value(
        before, "falcon_http_requests_total", **unmatched) + 200


def test_http_labels_fold_statuses_outside_the_registry():
    from core.observability.metrics import http_labels

    assert http_labels("healthz", "GET", 200) == ("healthz", "GET", "200")
    assert http_labels(None, "get", 799) == ("unmatched", "other", "other")
    assert http_labels("", "TRACE", 404) == ("unmatched", "other", "404")


def test_grpc_methods_no_service_defines_add_no_series(grpc_channel, client):
    """A call of a method the server does not register is answered UNIMPLEMENTED and counted
    under no series of its own; a registered one is counted under its name."""
    import grpc

    before = samples(client.get("/metrics").content.decode())
    for n in range(20):
        call = grpc_channel.unary_unary(f"/falcon.v1.ExperimentService/Made{n}",
                                        request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as info:
            call(b"", timeout=10)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    known = grpc_channel.unary_unary("/falcon.v1.ExperimentService/GetExp",
                                     request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as info:
        known(b"", timeout=10)  # no token: UNAUTHENTICATED, still a served method
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    after = samples(client.get("/metrics").content.decode())
    added = series(after, "falcon_grpc_calls_total") - series(before, "falcon_grpc_calls_total")
    assert added <= {(("code", "UNAUTHENTICATED"),
                      ("method", "/falcon.v1.ExperimentService/GetExp"))}
    assert value(after, "falcon_grpc_calls_total", code="UNAUTHENTICATED",
                 method="/falcon.v1.ExperimentService/GetExp") == value(
        before, "falcon_grpc_calls_total", code="UNAUTHENTICATED",
        method="/falcon.v1.ExperimentService/GetExp") + 1
    assert not any("Made" in str(labels) for labels in series(after, "falcon_grpc_calls_total"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str) -> str:
    # A deadline, not a wait: with --max-requests a request may wait for a new worker to import
    # Django, which on a loaded machine took more than 10 s.
    with urllib.request.urlopen(url, timeout=60) as res:
        return res.read().decode()


@pytest.mark.every_database  # gunicorn inherits DATABASE_URL: the app on each database
def test_several_gunicorn_workers_report_one_sum(tmp_path):
    """Two workers, each replaced after 5 requests (`--max-requests`): whichever process
    answers /metrics, it counts the requests of every worker, exited ones included."""
    port = free_port()
    folder = tmp_path / "prometheus"
    folder.mkdir()
    (folder / "counter_stale.db").write_bytes(b"from a previous run")
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(folder),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    log = open(tmp_path / "gunicorn.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "falcon_site.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "2", "--max-requests", "5", "--config", "gunicorn.conf.py"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        def started() -> bool:
            assert proc.poll() is None, (tmp_path / "gunicorn.log").read_text()
            try:
                get(f"{base}/healthz")
                return True
            except OSError:
                return False

        poll_until(started, timeout=120, what="gunicorn to start", every=0.1)
        assert not (folder / "counter_stale.db").exists()  # emptied at start
        for _ in range(40):
            get(f"{base}/healthz")
        for _ in range(3):
            found = samples(get(f"{base}/metrics"))
            total = value(found, "falcon_http_requests_total", route="healthz", method="GET",
                          status="200")
            assert total >= 41
        pids = {p.name.split("_")[-1] for p in folder.glob("counter_*.db")}
        assert len(pids) >= 5, f"the counts of {len(pids)} worker(s) only"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
