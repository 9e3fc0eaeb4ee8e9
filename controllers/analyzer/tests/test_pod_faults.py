"""The analyzer acts only on what it knows, on the Pod backend: a lagging Pod LIST, a failed
LIST, a create refused for a few seconds and a Pod garbage-collected before the controller read
it never fail, delete or re-run healthy work.

End to end like test_pod_end_to_end.py: the API server's real AnalysisRecordService over gRPC,
the fake Kubernetes API with the real `kubernetes` client, a fake clock; each tick checks that
no analysis ever has two Pods. "Under load" is a Pod LIST that lags behind the writes
(`FakePodKube.freeze_list`: the snapshot of an earlier moment, at that moment's version).
"""
from __future__ import annotations

import threading

import pytest
from prometheus_client import REGISTRY

from controllers.management.commands.runcontroller import _is_transient
from controllers.runner import run_loop
from falcon_site.grpc.testing import grpc_server  # noqa: F401  (fixture)

from .test_pod_end_to_end import NS, Cluster, exp, kube, kubelet_run  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

RESULT = 'echo "hello"; echo \'{"ops": 1}\' > "$FALCON_RESULT_FILE"'


def posts(kube) -> int:
    return kube.count("POST", "pods")


def gets_of(kube, name: str) -> int:
    with kube.lock:
        return sum(1 for r in kube.requests if r.method == "GET" and r.name == name)


def tick_errors() -> float:
    return REGISTRY.get_sample_value("falcon_controller_tick_errors_total",
                                     {"controller": "analyzer"}) or 0.0


# -- item 2: a Pod this process created exists until a newer read says otherwise -------------

def test_a_pod_the_lagging_list_does_not_show_yet_is_not_created_again(
        grpc_server, kube, exp, tmp_path):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    first = c.create()
    ctl = c.controller()
    kube.freeze_list()  # every LIST answers the moment before the create
    c.tick(ctl)
    assert c.status(first).status == "running" and posts(kube) == 1
    for _ in range(4):  # well past the recovery back-off (2 s, capped at 3 s)
        c.clock.now += 3.1
        c.tick(ctl)
    rec = c.status(first)
    assert (rec.status, rec.attempts) == ("running", 1), rec.error_message
    assert posts(kube) == 1  # never "attempt 2" under the same name
    # Its state comes from a direct read meanwhile: running, then succeeded.
    kube.run(NS, c.pod(first))
    c.tick(ctl)
    kube.succeed(NS, c.pod(first))
    c.tick(ctl)
    assert c.status(first).status == "succeeded"
    assert posts(kube) == 1


def test_a_list_newer_than_the_create_decides_without_a_read(
        grpc_server, kube, exp, tmp_path):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    first = c.create()
    ctl = c.controller()
    c.tick(ctl)
    kube.run(NS, c.pod(first))
    c.tick(ctl)
    kube.kubectl_delete(NS, c.pod(first))
    before = gets_of(kube, c.pod(first))
    c.tick(ctl)
    rec = c.status(first)
    assert (rec.status, rec.reason) == ("failed", "PodDeleted")
    assert "did not finish" in rec.error_message
    # The LIST's resourceVersion is newer than the Pod's: no GET was needed to conclude.
    assert gets_of(kube, c.pod(first)) - before <= 1  # the stop's own read only


# -- item 3: a failed LIST is a failed tick, never a dead controller ---------------------------

@pytest.mark.parametrize("status", [500, 410])
def test_a_failing_pod_list_fails_ticks_and_the_controller_stays_up(
        grpc_server, kube, exp, tmp_path, status):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    first = c.create()
    ctl = c.controller()
    c.tick(ctl)
    kube.run(NS, c.pod(first))
    c.tick(ctl)
    kube.inject("GET", "pods", status=status, reason="Expired" if status == 410 else "",
                times=10_000)
    errors = tick_errors()
    # The real loop, with the command's transient rule: it must not raise.
    assert run_loop(ctl, interval=0.0, stop=threading.Event(), is_transient=_is_transient,
                    max_ticks=1) == 1
    assert tick_errors() == errors + 1  # counted as a failed tick
    lists = kube.count("GET", "pods")
    stats = ctl.tick()  # inside the back-off (2 s): no call at all
    assert stats["cluster_errors"] == 0 and kube.count("GET", "pods") == lists
    c.clock.now += 2.1
    assert ctl.tick()["cluster_errors"] == 1  # still down: the back-off doubles (cap 3 s)
    lists = kube.count("GET", "pods")
    c.clock.now += 2.1
    assert ctl.tick()["cluster_errors"] == 0 and kube.count("GET", "pods") == lists
    assert c.status(first).status == "running"  # nothing concluded from a failed list
    assert kube.get("pods", NS, c.pod(first)) is not None
    # The Pod vanishes during the outage; once the API answers, a fresh read says so.
    kube.kubectl_delete(NS, c.pod(first))
    kube.end_faults()
    c.clock.now += 3.1
    c.tick(ctl)
    rec = c.status(first)
    assert (rec.status, rec.reason) == ("failed", "PodDisappeared")
    assert rec.error_message.startswith("Pod disappeared")
    assert posts(kube) == 1  # not run again silently


def test_a_failing_list_at_start_up_retries_recovery(
        grpc_server, kube, exp, tmp_path):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    first = c.create()
    kube.inject("GET", "pods", status=503, times=10_000)
    ctl = c.controller()
    assert ctl.tick()["cluster_errors"] == 1 and not ctl.recovered
    assert c.status(first).status == "pending" and posts(kube) == 0
    kube.end_faults()
    c.clock.now += 2.1
    c.tick(ctl)
    assert ctl.recovered and c.status(first).status == "running" and posts(kube) == 1


# -- item 4: a create refused for a few seconds is tried again ---------------------------------

def test_a_pod_create_refused_for_seconds_is_retried_without_burning_attempts(
        grpc_server, kube, exp, tmp_path):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    first = c.create()
    ctl = c.controller()
    kube.freeze_list()  # under load too
    kube.inject("POST", "pods", status=500, times=6)  # about 3 s of an etcd timeout
    c.tick(ctl)  # two tries per start (the client retries once)
    assert c.status(first).status == "running" and posts(kube) == 2
    c.tick(ctl)
    assert posts(kube) == 2  # waiting out the back-off
    for _ in range(3):
        c.clock.now += 3.1
        c.tick(ctl)
    rec = c.status(first)
    assert (rec.status, rec.attempts) == ("running", 1), rec.error_message
    assert posts(kube) == 7 and kube.get("pods", NS, c.pod(first)) is not None
    c.tick(ctl)
    assert posts(kube) == 7


@pytest.mark.parametrize("status,reason", [(422, "Invalid"), (403, "Forbidden")])
def test_a_permanent_refusal_fails_the_analysis_at_once(
        grpc_server, kube, exp, tmp_path, status, reason):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    first = c.create()
    ctl = c.controller()
    kube.inject("POST", "pods", status=status, reason=reason)
    c.tick(ctl)
    rec = c.status(first)
    assert (rec.status, rec.reason) == ("failed", "StartFailed")
    assert str(status) in rec.error_message and posts(kube) == 1


def test_transient_refusals_give_up_after_max_start_retries(
        grpc_server, kube, exp, tmp_path):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    first = c.create()
    ctl = c.controller()
    ctl.config = ctl.config.__class__(**{**ctl.config.__dict__, "max_start_retries": 2})
    kube.inject("POST", "pods", status=503, times=10_000)
    c.tick(ctl)
    for _ in range(3):
        c.clock.now += 3.1
        c.tick(ctl)
    rec = c.status(first)
    assert (rec.status, rec.reason, rec.attempts) == ("failed", "StartFailed", 1)
    assert "3 tries" in rec.error_message and "503" in rec.error_message


# -- item 5: the run's own outcome decides when the Pod GC was quicker ------------------------

@pytest.mark.parametrize("lagging", [False, True])
def test_a_run_that_succeeded_is_not_reported_killed_when_pod_gc_is_quicker(
        grpc_server, kube, exp, tmp_path, lagging):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    good = c.create(RESULT)
    ctl = c.controller()
    c.tick(ctl)
    kube.run(NS, c.pod(good))
    c.tick(ctl)
    if lagging:
        kube.freeze_list()  # the list still shows it Running after the Pod is gone
    kubelet_run(kube, c.pod(good), tmp_path / "pod-good")  # the runner in Pod mode
    kube.gc_pods(NS)  # before the controller's next LIST
    c.tick(ctl)
    if lagging:
        assert c.status(good).status == "running"  # the lagging list says so: wait
        kube.thaw_list()
        c.tick(ctl)
    rec = c.status(good)
    assert (rec.status, rec.reason) == ("succeeded", ""), rec.error_message
    assert (tmp_path / "results" / "analysis" / str(exp.pk) / good / "result.jsonl").exists()
    assert posts(kube) == 1


def test_a_failed_run_collected_by_pod_gc_keeps_its_exit_code(
        grpc_server, kube, exp, tmp_path):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    bad = c.create('echo "about to fail"; exit 3')
    ctl = c.controller()
    c.tick(ctl)
    kube.run(NS, c.pod(bad))
    c.tick(ctl)
    kubelet_run(kube, c.pod(bad), tmp_path / "pod-bad")
    kube.gc_pods(NS)
    c.tick(ctl)
    rec = c.status(bad)
    assert (rec.status, rec.reason) == ("failed", "NonZeroExit")
    assert "exited with code 3" in rec.error_message and "about to fail" in rec.error_message


def test_a_finished_run_whose_pod_was_collected_while_no_controller_ran_is_not_run_again(
        grpc_server, kube, exp, tmp_path):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    good = c.create(RESULT)
    ctl = c.controller()
    c.tick(ctl)
    del ctl  # the controller dies; the run finishes and its Pod is collected meanwhile
    kubelet_run(kube, c.pod(good), tmp_path / "pod-good")
    kube.gc_pods(NS)
    ctl = c.controller()
    for _ in range(2):
        c.clock.now += 3.1
        c.tick(ctl)
    rec = c.status(good)
    assert (rec.status, rec.attempts) == ("succeeded", 1), rec.error_message
    assert posts(kube) == 1
