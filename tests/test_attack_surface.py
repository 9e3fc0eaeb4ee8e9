"""Attacks on Falcon's surface, each performed through the public interface and shown refused.

- Forged log lines: an unauthenticated request whose path and user agent carry `%0a`, `%0d`,
  ESC, NEL or U+2028 must not write a line of its own into the text log of the real servers
  (`manage.py runserver`, gunicorn), nor break the JSON log's one object per line.
- A stalled login: an idle and a half-sent connection to `falcon auth login`'s loopback
  listener must not keep the real browser callback out.
- Unhardened task Pods: the Job a Kubernetes cluster gets for a user's experiment runs without
  a service-account token and under the "restricted" Pod Security Standard unless the
  cluster's entry of the clusters file relaxes it.
"""
from __future__ import annotations

import json
import re
import socket
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit, parse_qs

import pytest

from core.testing import wait_until as poll_until
from controllers.tests.fake_k8s import fake_kube  # noqa: F401  (a fixture)
from tests.test_e2e import free_port
from tests.test_json_server_logs import ROOT, _env, _gunicorn, _served

pytestmark = pytest.mark.django_db(transaction=True)

# -- forged log lines ---------------------------------------------------------------------------

# What an attacker puts in a path: a line break to start a forged record, a bare carriage return
# to overwrite the line on a terminal, an ANSI colour, C1's NEL and the Unicode line separator.
FORGED_PATH = ("/no-such-{n}%0a2026-01-01%2000:00:00,000%20INFO%20falcon.http%20FORGED-{n}"
               "%0d%1b[31mred%c2%85nel%e2%80%a8ls")
# gunicorn refuses ESC and DEL in a header (400), but not bytes >= 0x80, which WSGI decodes as
# Latin-1: NEL's UTF-8 (c2 85) gives U+0085, U+2028's (e2 80 a8) gives U+0080.
FORGED_AGENT = b"agent-\xc2\x85-\xe2\x80\xa8-end"
RAW_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")
PROBES = 3


def _send_forged(port: int) -> list[str]:
    """Send PROBES unauthenticated requests with forged paths and user agents; return the
    marker each carries (`no-such-<n>`)."""
    markers = []
    for n in range(PROBES):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(f"GET {FORGED_PATH.format(n=n)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Connection: close\r\nUser-Agent: ".encode() + FORGED_AGENT
                         + b"\r\n\r\n")
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 404") or reply.startswith(b"HTTP/1.0 404"), reply[:80]
        markers.append(f"no-such-{n}")
    return markers


def _wait_for_lines(log: Path, markers: list[str], per_request: int,
                    deadline_s: float = 30.0) -> str:
    """Return the log's text once every marker is on `per_request` lines (the server writes
    its lines after answering); fail at the deadline, showing the log."""
    def complete() -> str | None:
        text = log.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
        return text if all(sum(m in line for line in lines) >= per_request
                           for m in markers) else None

    try:
        return poll_until(complete, timeout=max(deadline_s, 60.0), what="the log lines")
    except AssertionError as exc:
        raise AssertionError(f"{exc}:\n{log.read_text(encoding='utf-8', errors='replace')}") \
            from None


def _assert_not_forged(text: str, markers: list[str], per_request: int, starts: re.Pattern):
    # `splitlines` breaks on every line boundary a viewer may honour (NEL, U+2028 included).
    lines = text.splitlines()
    assert not RAW_CONTROLS.search(text), [line for line in lines if RAW_CONTROLS.search(line)]
    for line in lines:
        if "FORGED" in line:  # the attacker's text sits inside a record of the server
            assert starts.match(line), f"a line that does not start like a record: {line!r}"
    for n, marker in enumerate(markers):
        mine = [line for line in lines if marker in line]
        assert len(mine) == per_request, mine
        assert not any(line.lstrip().startswith("2026-01-01") for line in lines)
        # Decoded and escaped (the application's lines), or as sent (an access line's raw path).
        assert all(f"FORGED-{n}\\r\\x1b[31mred\\x85nel\\u2028ls" in line
                   or f"FORGED-{n}%0d%1b[31mred%c2%85nel%e2%80%a8ls" in line for line in mine), mine
        assert any(f"FORGED-{n}\\r\\x1b[31mred\\x85nel\\u2028ls" in line for line in mine)


def _stop_when_written(log: Path, per_request: int):
    def client(port: int) -> tuple[list[str], str]:
        markers = _send_forged(port)
        return markers, _wait_for_lines(log, markers, per_request)
    return client


def test_a_forged_path_writes_no_line_of_its_own_in_runserver_s_text_log(tmp_path):
    port = free_port()
    log = tmp_path / "runserver.log"
    markers, text = _served(
        [sys.executable, str(ROOT / "manage.py"), "runserver", "--noreload", "--insecure",
         f"127.0.0.1:{port}"], dict(_env(tmp_path), FALCON_LOG_FORMAT="text"), port, log,
        _stop_when_written(log, per_request=3))
    # Per request: falcon.http's line, django.request's "Not Found" and django.server's
    # access line.
    starts = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+ \[")
    _assert_not_forged(text, markers, 3, starts)
    for marker in markers:
        assert any("falcon.http" in line and marker in line for line in text.splitlines())


def test_a_forged_path_and_agent_write_no_line_in_gunicorn_s_text_access_log(tmp_path):
    port = free_port()
    log = tmp_path / "gunicorn.log"
    markers, text = _served(_gunicorn(port), dict(_env(tmp_path), FALCON_LOG_FORMAT="text"),
                            port, log, _stop_when_written(log, per_request=3))
    # gunicorn's error log lines start with `[date]`, its access lines with the client address,
    # the application's with the date.
    starts = re.compile(r"\[\d{4}-|127\.0\.0\.1 |\d{4}-\d\d-\d\d ")
    _assert_not_forged(text, markers, 3, starts)
    access = [line for line in text.splitlines()
              if line.startswith("127.0.0.1 ") and "no-such-" in line]
    assert len(access) == PROBES
    assert all("agent-\u00c2\\x85-\u00e2\\x80\u00a8-end" in line for line in access), access


def test_a_forged_path_stays_inside_one_json_object_per_line(tmp_path):
    port = free_port()
    log = tmp_path / "runserver.log"
    markers, text = _served(
        [sys.executable, str(ROOT / "manage.py"), "runserver", "--noreload", "--insecure",
         f"127.0.0.1:{port}"], _env(tmp_path), port, log, _stop_when_written(log, 3))
    assert not RAW_CONTROLS.search(text)
    records = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(r, dict) for r in records)
    [app] = [r for r in records if r["logger"] == "falcon.http" and markers[0] in r["path"]]
    # The JSON line keeps the exact path (decoded), its controls escaped by JSON itself.
    assert app["path"].endswith("FORGED-0\r\x1b[31mred\x85nel\u2028ls")


# -- a stalled login ------------------------------------------------------------------------------

class StallingBrowser:
    """A local attacker, then the user's browser: before the browser follows the redirect to the
    CLI's listener, one connection sits idle on the listener and another sends half a request
    line and stops. Both stay open until the login is over."""

    def __init__(self, browser):
        self.browser = browser
        self.stalled: list[socket.socket] = []

    def __call__(self, url: str) -> bool:
        port = int(parse_qs(urlsplit(url).query)["port"][0])
        idle = socket.create_connection(("127.0.0.1", port), timeout=10)
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        slow.sendall(b"GET /callback?state=")
        self.stalled += [idle, slow]
        return self.browser(url)

    def close(self) -> None:
        for sock in self.stalled:
            sock.close()


def test_an_idle_and_a_slow_connection_do_not_keep_the_login_callback_out(
        live_server, tmp_path, cloudflare, monkeypatch):
    from cli import loopback
    from cli.tests.test_cloudflare_login import FakeBrowser, run_cli
    from cli.token_cache import CredentialStore

    # Stalled connections are dropped after a few seconds; here they may stay longer than the
    # login's deadline, so it is not their expiry that lets the callback in.
    monkeypatch.setattr(loopback, "CONNECTION_TIMEOUT", 120.0, raising=False)
    token = cloudflare.sign(sub="cf-sub-bob", email="bob@example.com")
    browser = FakeBrowser(token)
    attacker = StallingBrowser(browser)
    outcome = []
    login = threading.Thread(target=lambda: outcome.append(run_cli(
        live_server.url, tmp_path, "auth", "login", browser=attacker, login_timeout=30.0)),
        daemon=True)
    try:
        login.start()
        # A listener held by one connection never stops (its shutdown waits for the handler):
        # fail instead of hanging.
        login.join(90)
        assert not login.is_alive(), "falcon auth login hung on a stalled connection"
        [(result, _)] = outcome
        assert result.exit_code == 0, result.output
        assert browser.callback_status == [200]
        for sock in attacker.stalled:  # still open: the listener served around them
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        attacker.close()
    assert CredentialStore(tmp_path).get(live_server.url).token == token


# -- unhardened task Pods -----------------------------------------------------------------------

K8S_VERSION = "1.37.0"


def _cluster_backend(kubeconfig: Path, extra: str = ""):
    """The backend the resource manager builds for a kubernetes entry of a clusters file."""
    from clusters.config import parse_clusters
    from controllers.cluster_backends.kubernetes import KubernetesBackend
    from controllers.cluster_backends.loading import kubernetes_config

    text = (f"clusters:\n  k8s-a:\n    backend: kubernetes\n    namespace: falcon-jobs\n"
            f"    kubeconfig: {kubeconfig}\n    retries: 0\n{extra}")
    return KubernetesBackend("k8s-a", kubernetes_config("k8s-a", parse_clusters(text)["k8s-a"]))


def _submitted_pod(fake_kube, tmp_path, extra: str = "", **spec) -> dict:
    import kubernetes_validate

    from controllers.tests.test_k8s_backend import job_view

    backend = _cluster_backend(fake_kube.kubeconfig(tmp_path / "kubeconfig"), extra)
    view = job_view(**spec)
    name = backend.submit(view).cluster_job_name
    job = fake_kube.get("jobs", "falcon-jobs", name)
    stored = {k: v for k, v in job.items() if k != "status"}
    stored["metadata"] = {k: v for k, v in job["metadata"].items()
                          if k in ("name", "namespace", "labels", "annotations", "finalizers")}
    kubernetes_validate.validate(stored, K8S_VERSION, strict=True)
    return job["spec"]["template"]["spec"]


@pytest.mark.parametrize("spec", [
    {},
    {"device_type": "h100", "device_count": 8},
    {"device_type": "tpu-v5p", "device_count": 8, "device_topo": "2x2x2"},
], ids=["cpu", "gpu", "tpu"])
def test_a_task_pod_gets_no_token_and_runs_restricted_by_default(fake_kube, tmp_path, spec):
    pod = _submitted_pod(fake_kube, tmp_path, **spec)
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
    assert "runAsUser" not in sc  # the image's own non-root USER


def test_a_cluster_relaxes_the_pod_security_of_its_own_task_pods(fake_kube, tmp_path):
    baseline = _submitted_pod(fake_kube, tmp_path, "    pod_security: baseline\n")
    assert baseline["automountServiceAccountToken"] is False
    assert "runAsNonRoot" not in baseline["securityContext"]
    sc = baseline["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and "capabilities" not in sc
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}

    privileged = _submitted_pod(fake_kube, tmp_path, "    pod_security: privileged\n",
                                job_id=8, role="tpu")
    assert privileged["automountServiceAccountToken"] is False
    assert privileged["containers"][0]["securityContext"] == {"privileged": True}

    uid = _submitted_pod(fake_kube, tmp_path, "    run_as_user: 1000\n", job_id=9, role="uid")
    assert uid["securityContext"]["runAsUser"] == 1000
    assert uid["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("extra, field", [
    ("    pod_security: unconfined\n", "clusters.k8s-a.pod_security"),
    ("    run_as_user: 0\n", "clusters.k8s-a.run_as_user"),
    ("    run_as_user: root\n", "clusters.k8s-a.run_as_user"),
])
def test_an_unknown_pod_security_setting_is_refused_naming_the_field(tmp_path, extra, field):
    from clusters.config import ClusterConfigError

    with pytest.raises(ClusterConfigError, match=re.escape(field)):
        _cluster_backend(tmp_path / "kubeconfig", extra)


def test_a_task_pod_or_an_analysis_pod_cannot_reach_falcon_s_ports_or_the_database():
    """NetworkPolicies of k8s/base: a user's task Pod (its labels as built, in its cluster
    namespace) and an analysis Pod (in Falcon's namespace) reach no API, analyzer or metrics
    port; the analysis Pod's only ways out are DNS, public HTTPS and the metadata server."""
    import ipaddress

    from controllers.analyzer.backends.kubernetes import COMPONENT
    from controllers.tests.test_deploy import NAMESPACE, falcon_pods, policies, reaches
    from controllers.tests.test_k8s_backend import job_view, make_backend

    job = make_backend().build_job(job_view())
    task_labels = job.spec.template.metadata.labels
    task_ns = {"kubernetes.io/metadata.name": "falcon-jobs"}
    for name, (labels, ports) in falcon_pods().items():
        for port in ports:
            assert not reaches(task_labels, task_ns, labels, port), (name, port)
            assert not reaches(COMPONENT, NAMESPACE, labels, port), (name, port)
    [egress] = [p for p in policies() if p["spec"]["podSelector"].get("matchLabels") == {
        "app.kubernetes.io/name": COMPONENT["app.kubernetes.io/name"]}]
    assert egress["spec"]["policyTypes"] == ["Egress"]
    allowed_ports = {p["port"] for rule in egress["spec"]["egress"] for p in rule["ports"]}
    assert allowed_ports == {53, 443, 80, 988}  # no 3306/5432 (a database), no 8000/50051
    for rule in egress["spec"]["egress"]:
        if {p["port"] for p in rule["ports"]} & {80, 443, 988}:
            [peer] = rule["to"]
            block = peer["ipBlock"]
            if block["cidr"] == "0.0.0.0/0":  # public HTTPS: never the cluster's addresses
                private = {ipaddress.ip_network(c) for c in block["except"]}
                assert ipaddress.ip_network("10.0.0.0/8") in private
                assert ipaddress.ip_network("192.168.0.0/16") in private
            else:
                assert block == {"cidr": "169.254.169.254/32"}
