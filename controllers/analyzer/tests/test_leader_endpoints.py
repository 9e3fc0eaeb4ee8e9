"""The API server reaches whichever analyzer replica leads: two real AnalyzerService servers,
one a follower (UNAVAILABLE "not the leader"), and `analysis.analyzer_client` with both
endpoints in FALCON_ANALYZER_TARGET."""
from __future__ import annotations

import threading

import pytest

from analysis import analyzer_client
from core.errors import Conflict
from controllers.analyzer.server import build_analyzer_server

from .fake_records import FakeRecordAPI
from .helpers import artifact, make_controller

TOKEN = "analyzer-test-token-0123456789abcdef0123"


@pytest.fixture
def replicas(tmp_path, settings):
    api = FakeRecordAPI()
    api.artifact_paths[1] = artifact(tmp_path)
    leading = {"a": False, "b": True}
    servers = {}
    for name in ("a", "b"):
        controller = make_controller(api, tmp_path / name)
        servers[name] = build_analyzer_server("127.0.0.1:0", controller, TOKEN,
                                              is_leader=lambda n=name: leading[n])
        servers[name].start()
    settings.FALCON_ANALYZER_TOKEN = TOKEN
    settings.FALCON_ANALYZER_TARGET = ",".join(
        f"127.0.0.1:{servers[n].port}" for n in ("a", "b"))
    analyzer_client.close()
    yield api, leading, servers
    analyzer_client.close()
    for server in servers.values():
        server.stop(0)


def test_a_call_reaches_the_leader_whichever_replica_it_is(replicas):
    api, leading, _ = replicas
    made = analyzer_client.create_analysis(exp_id=1, creator_email="u@x.org", command="true")
    assert api.records[made.analysis_id].status == "pending"  # b (the leader) created it
    assert len(api.records) == 1  # the follower did nothing
    leading.update(a=True, b=False)  # failover: a leads now
    analyzer_client.cancel_analysis(analysis_id=made.analysis_id, requester_email="u@x.org")
    assert api.records[made.analysis_id].status == "cancelled"
    assert len(analyzer_client.list_plugins().plugins) >= 1


def test_no_leader_answers_service_unavailable(replicas):
    _, leading, _ = replicas
    leading.update(a=False, b=False)
    with pytest.raises(analyzer_client.ServiceUnavailable, match="not the leader"):
        analyzer_client.create_analysis(exp_id=1, creator_email="u@x.org", command="true")


def test_a_replica_that_is_down_is_skipped(replicas, settings):
    _, leading, servers = replicas
    servers["b"].stop(0)
    leading.update(a=True)
    settings.FALCON_ANALYZER_TARGET = (f"127.0.0.1:{servers['b'].port},"
                                       f"127.0.0.1:{servers['a'].port}")
    made = analyzer_client.create_analysis(exp_id=1, creator_email="u@x.org", command="true")
    assert made.analysis_id


class FrozenRecordAPI:
    """The record API as a frozen replica sees it: `create_record` waits for `wake`, before
    writing (frozen before its write) or after (wrote, then froze before answering)."""

    def __init__(self, api: FakeRecordAPI, wake: threading.Event, write_first: bool):
        self._api, self._wake, self._write_first = api, wake, write_first
        self.entered, self.left = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self._api, name)

    def create_record(self, **fields):
        self.entered.set()
        try:
            if self._write_first:
                record = self._api.create_record(**fields)
                self._wake.wait()
                return record
            self._wake.wait()
            return self._api.create_record(**fields)
        finally:
            self.left.set()


@pytest.mark.parametrize("write_first", [False, True], ids=["froze-before-writing",
                                                           "wrote-then-froze"])
def test_a_frozen_leader_is_left_after_a_deadline_and_the_create_is_made_once(
        tmp_path, settings, monkeypatch, write_first):
    """The old leader accepted CreateAnalysis and froze (SIGSTOP) inside it; replica b took
    over. The API server leaves a after the attempt timeout and b answers the same analysis:
    made by b (a wakes, finds it, makes none) or made by a before it froze (b recognises the
    retry by its analysis_id and queues that record)."""
    api = FakeRecordAPI()
    api.artifact_paths[1] = artifact(tmp_path)
    wake = threading.Event()
    frozen_api = FrozenRecordAPI(api, wake, write_first)
    controllers = {"a": make_controller(frozen_api, tmp_path / "a"),
                   "b": make_controller(api, tmp_path / "b")}
    servers = {name: build_analyzer_server("127.0.0.1:0", controllers[name], TOKEN)
               for name in ("a", "b")}
    for server in servers.values():
        server.start()
    settings.FALCON_ANALYZER_TOKEN = TOKEN
    settings.FALCON_ANALYZER_TARGET = ",".join(
        f"127.0.0.1:{servers[n].port}" for n in ("a", "b"))
    monkeypatch.setattr(analyzer_client, "ATTEMPT_TIMEOUT_SECONDS", 0.5)
    analyzer_client.close()
    try:
        made = analyzer_client.create_analysis(exp_id=1, creator_email="u@x.org",
                                               command="true")
        assert frozen_api.entered.is_set()  # a got the call first, and froze in it
        assert controllers["b"].queues.position(made.analysis_id) == 1  # b will run it
    finally:
        wake.set()
        assert frozen_api.left.wait(30), "the frozen replica never finished its create"
        analyzer_client.close()
        for server in servers.values():
            server.stop(0)
    assert list(api.records) == [made.analysis_id]
    assert api.records[made.analysis_id].status == "pending"


def test_a_create_that_reuses_another_requests_id_is_refused(replicas):
    api, _, _ = replicas
    made = analyzer_client.create_analysis(exp_id=1, creator_email="u@x.org", command="true")
    with pytest.raises(Conflict):
        analyzer_client.create_analysis(exp_id=1, creator_email="other@x.org", command="true",
                                        analysis_id=made.analysis_id)
    assert list(api.records) == [made.analysis_id]


def test_endpoints_are_parsed_and_an_empty_target_is_refused():
    assert analyzer_client.endpoints(" a:1, ,dns:///svc:2 ") == ["a:1", "dns:///svc:2"]
    with pytest.raises(ValueError, match="FALCON_ANALYZER_TARGET"):
        analyzer_client.endpoints(" , ")
