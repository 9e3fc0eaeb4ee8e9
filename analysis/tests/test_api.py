"""The HTTP API of analyses and plugins, against a real fake AnalyzerService (a grpc server on a
port) or none at all (a closed port: 503 at once, and the database and store fallbacks)."""
from __future__ import annotations

import json
import threading
import time

import grpc
import pytest
from rest_framework.test import APIClient

from accounts.models import User
from analysis import analyzer_client
from analysis.outputs import parse_results, read_results
from analysis.models import SCRIPT_MAX_BYTES, AnalysisRecord
from analysis.tests.factories import make_analysis, make_finished_exp
from analysis.tests.fake_analyzer import LOG, closed_port, running_fake_analyzer
from core.errors import NotFound
from artifacts.store import local_path
from experiments.tests.factories import make_exp

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _analysis_root(settings, tmp_path):
    settings.FALCON_ANALYSIS_ROOT = (tmp_path / "store").as_uri()
    settings.FALCON_ANALYZER_TOKEN = "analyzer-token-0123456789abcdef0123456789"
    yield
    analyzer_client.close()


@pytest.fixture
def analyzer(settings):
    with running_fake_analyzer() as (fake, target):
        settings.FALCON_ANALYZER_TARGET = target
        yield fake


@pytest.fixture
def no_analyzer(settings):
    settings.FALCON_ANALYZER_TARGET = closed_port()


def client_for(token_for, email: str) -> tuple[APIClient, User]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_for(email)}")
    assert client.get("/api/v1/analyses").status_code == 200  # registers the user
    return client, User.objects.get(email=email)


@pytest.fixture
def alice(token_for):
    return client_for(token_for, "alice@example.com")


def test_create_through_the_analyzer(alice, analyzer):
    client, user = alice
    exp = make_finished_exp(creator=user)
    resp = client.post("/api/v1/analyses", {
        "exp_id": exp.pk, "command": "python script", "script": "print(1)", "name": "mine",
        "resources": {"cpu_request": "500m", "memory_limit": "2Gi"}}, format="json")
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    assert body["status"] == "pending" and body["queue_position"] == 1
    assert body["creator"] == "alice@example.com" and body["has_script"] is True
    assert body["script_bytes"] == 8 and body["exp_id"] == exp.pk and body["name"] == "mine"
    method, request, metadata = analyzer.calls[-1]
    assert method == "CreateAnalysis" and request.analysis_type == "online"
    assert request.creator_email == "alice@example.com"
    assert request.resource_override.cpu_request == "500m"
    assert metadata["authorization"] == "Bearer analyzer-token-0123456789abcdef0123456789"
    got = client.get(f"/api/v1/analyses/{body['id']}").json()
    assert got["id"] == body["id"] and got["queue_position"] == 1


@pytest.mark.parametrize("body, field", [
    ({}, "exp_id"),
    ({"exp_id": 1}, "plugin"),
    ({"exp_id": 1, "plugin": "", "command": "  "}, "command"),
    ({"exp_id": 1, "command": ""}, "command"),
    ({"exp_id": 1, "command": "c", "script": "x" * (SCRIPT_MAX_BYTES + 1)}, "script"),
    ({"exp_id": 1, "command": "c", "script": "é" * (SCRIPT_MAX_BYTES // 2 + 1)}, "script"),
    ({"exp_id": 1, "plugin": "p", "script": "print(1)"}, "script"),
    ({"exp_id": 1, "plugin": "p", "resources": {"gpu": "1"}}, "resources.gpu"),
    ({"exp_id": 1, "plugin": "p", "resources": {"cpu_limit": "lots"}}, "resources.cpu_limit"),
    ({"exp_id": 1, "plugin": "p", "command": "a\x00b"}, "command"),
    ({"exp_id": "1", "plugin": "p"}, "exp_id"),
    ({"exp_id": 1, "plugin": "p", "extra": 1}, "extra"),
])
def test_create_field_errors(alice, analyzer, body, field):
    client, _ = alice
    resp = client.post("/api/v1/analyses", body, format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.json()
    assert not analyzer.calls


@pytest.mark.parametrize("script_name, says", [
    ("../run.py", "without '/'"), ("dir/run.py", "without '/'"), (".", "not '.'"),
    ("..", "not '..'"), ("x" * 256, "at most 255"),
    ("output", "work folder uses itself"),
])
def test_create_refuses_a_script_name_that_is_not_a_plain_file_name(alice, analyzer, script_name,
                                                                    says):
    client, _ = alice
    resp = client.post("/api/v1/analyses", {"exp_id": 1, "command": "python run.py",
                                            "script": "print(1)", "script_name": script_name},
                       format="json")
    assert resp.status_code == 400, resp.json()
    assert list(resp.json()) == ["script_name"] or set(resp.json()) == {"script_name", "code"}, \
        resp.json()
    assert says in " ".join(resp.json()["script_name"])
    assert not analyzer.calls


@pytest.mark.parametrize("resources, field, says", [
    ({"cpu_request": "0"}, "resources.cpu_request", "above 0"),
    ({"memory_limit": "0Mi"}, "resources.memory_limit", "above 0"),
    ({"cpu_request": "3", "cpu_limit": "2"}, "resources.cpu_request",
     "above cpu_limit 2; a request may not exceed its limit"),
    ({"memory_request": "2Gi", "memory_limit": "1Gi"}, "resources.memory_request",
     "lower memory_request or raise memory_limit"),
    ({"cpu_limit": "2000"}, "resources.cpu_limit", "more than 1024 cores"),
    ({"memory_limit": "17Ti"}, "resources.memory_limit", "more than 16Ti"),
])
def test_create_refuses_resources_that_cannot_work(alice, analyzer, resources, field, says):
    client, _ = alice
    resp = client.post("/api/v1/analyses", {"exp_id": 1, "command": "true",
                                            "resources": resources}, format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.json()
    assert says in resp.json()[field][0]
    assert not analyzer.calls


def test_create_sends_the_script_name_and_stores_it(alice, analyzer):
    client, user = alice
    exp = make_finished_exp(creator=user)
    resp = client.post("/api/v1/analyses", {"exp_id": exp.pk, "command": "python run.py",
                                            "script": "print(1)", "script_name": "run.py"},
                       format="json")
    assert resp.status_code == 201, resp.json()
    assert resp.json()["script_name"] == "run.py"
    assert analyzer.calls[-1][1].script_name == "run.py"
    assert AnalysisRecord.objects.get(pk=resp.json()["id"]).script_name == "run.py"
    resp = client.post("/api/v1/analyses", {"exp_id": exp.pk, "command": "python run.py",
                                            "script_name": "run.py"}, format="json")
    assert resp.status_code == 400 and "no script was sent" in resp.json()["script_name"][0]


def test_a_script_with_a_plugin_is_refused_not_ignored(alice, analyzer):
    client, _ = alice
    resp = client.post("/api/v1/analyses", {"exp_id": 1, "plugin": "summary",
                                            "script": "print(1)"}, format="json")
    assert resp.status_code == 400, resp.json()
    assert resp.json()["script"] == [
        "a script goes with a command, and a plugin runs its catalog command; drop script, or "
        "send command instead of plugin."]
    assert not analyzer.calls


@pytest.mark.parametrize("field, hint", [
    ("command", "send a shell command"), ("script", "send a text script"),
    ("name", "send plain text"), ("script_name", "send the script's plain file name, e.g. run.py"),
])
def test_a_nul_character_is_one_error(alice, analyzer, field, hint):
    client, _ = alice
    body = {"exp_id": 1, "command": "true", "script": "x", field: "a\x00b"}
    resp = client.post("/api/v1/analyses", body, format="json")
    assert resp.status_code == 400
    assert resp.json()[field] == [f"contains a NUL character; {hint}."]


def test_an_empty_command_is_named_as_such(alice, analyzer):
    client, _ = alice
    resp = client.post("/api/v1/analyses", {"exp_id": 1, "command": ""}, format="json")
    assert resp.status_code == 400
    assert resp.json() == {"command": ["is empty; give the shell command to run (or a catalog "
                                       "plugin instead)."], "code": "invalid"}


def test_errors_of_the_analyzer_controller_use_the_request_field_names(alice, analyzer):
    client, user = alice
    exp = make_finished_exp(creator=user)
    analyzer.refuse_create = {"plugin_name": ["unknown plugin 'nope'"],
                              "script_content": ["too big"],
                              "resource_override.memory_request": ["above the plugin's limit"],
                              "creator_email": ["has never logged in"]}
    resp = client.post("/api/v1/analyses", {"exp_id": exp.pk, "plugin": "nope",
                                            "resources": {"memory_request": "4Gi"}},
                       format="json")
    assert resp.status_code == 400, resp.json()
    assert resp.json() == {"plugin": ["unknown plugin 'nope'"], "script": ["too big"],
                           "resources.memory_request": ["above the plugin's limit"],
                           "detail": ["creator_email: has never logged in"], "code": "invalid"}


def test_script_of_exactly_one_mib_is_accepted(alice, analyzer):
    client, user = alice
    exp = make_finished_exp(creator=user)
    resp = client.post("/api/v1/analyses", {"exp_id": exp.pk, "command": "python s.py",
                                            "script": "x" * SCRIPT_MAX_BYTES}, format="json")
    assert resp.status_code == 201 and resp.json()["script_bytes"] == SCRIPT_MAX_BYTES


def test_create_404_and_409(alice, analyzer):
    client, user = alice
    assert client.post("/api/v1/analyses", {"exp_id": 999999, "plugin": "p"},
                       format="json").status_code == 404
    running = make_exp(creator=user)
    resp = client.post("/api/v1/analyses", {"exp_id": running.pk, "plugin": "p"}, format="json")
    assert resp.status_code == 409 and "not finished" in resp.json()["detail"]


class _RecordedStub:
    """An AnalyzerService stub that records each attempt: the method, the `timeout` and
    `wait_for_ready` it was given and the status code it ended with."""

    def __init__(self, stub, attempts: list[tuple[str, float, bool, grpc.StatusCode]]):
        self._stub, self._attempts = stub, attempts

    def __getattr__(self, method: str):
        def call(request, *, timeout, wait_for_ready, **kwargs):
            code = grpc.StatusCode.OK
            try:
                return getattr(self._stub, method)(request, timeout=timeout,
                                                   wait_for_ready=wait_for_ready, **kwargs)
            except grpc.RpcError as exc:
                code = exc.code()
                raise
            finally:
                self._attempts.append((method, timeout, wait_for_ready, code))
        return call


def test_create_without_analyzer_is_503_at_once(alice, no_analyzer, monkeypatch):
    """"At once": each call makes its bounded number of tries (two, for one endpoint), none
    waits for the controller to become ready, each ends UNAVAILABLE (refused, not a deadline
    run out), and nothing sleeps between them: no back-off, no retry loop."""
    client, user = alice
    exp = make_finished_exp(creator=user)
    attempts: list[tuple[str, float, bool, grpc.StatusCode]] = []
    real_stubs = analyzer_client._stubs
    monkeypatch.setattr(analyzer_client, "_stubs", lambda: [
        (index, _RecordedStub(stub, attempts)) for index, stub in real_stubs()])
    slept: list[float] = []
    real_sleep, caller = time.sleep, threading.get_ident()

    def sleep(seconds: float) -> None:
        if threading.get_ident() == caller:
            slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    resp = client.post("/api/v1/analyses", {"exp_id": exp.pk, "plugin": "summary"},
                       format="json")
    assert resp.status_code == 503
    body = resp.json()
    assert body["code"] == "unavailable"
    assert body["detail"].startswith("the analyzer controller is unavailable")
    assert client.get("/api/v1/plugins").status_code == 503
    assert client.get("/api/v1/plugins/summary").status_code == 503
    assert [(method, ready, code) for method, _, ready, code in attempts] == [
        (method, False, grpc.StatusCode.UNAVAILABLE)
        for method in ("CreateAnalysis", "ListPlugins", "GetPlugin") for _ in range(2)]
    # Every try carries a deadline within the call's budget: none can wait unbounded.
    assert all(0 < timeout <= analyzer_client.CALL_TIMEOUT_SECONDS
               for _, timeout, _, _ in attempts)
    assert slept == []


def test_a_frozen_replica_does_not_block_creation_nor_create_twice(alice, settings,
                                                                   monkeypatch):
    """A replica that accepts the call and never answers (SIGSTOPped, its connection open) is
    left after the attempt timeout, the create goes to the leader, and the frozen replica's
    late attempt of the same create, once it wakes, makes no second analysis."""
    client, user = alice
    exp = make_finished_exp(creator=user)
    monkeypatch.setattr(analyzer_client, "ATTEMPT_TIMEOUT_SECONDS", 0.5)
    wake = threading.Event()
    with running_fake_analyzer(hold=wake) as (frozen, frozen_target), \
            running_fake_analyzer() as (leader, leader_target):
        settings.FALCON_ANALYZER_TARGET = f"{frozen_target},{leader_target}"
        try:
            first = client.post("/api/v1/analyses", {"exp_id": exp.pk, "plugin": "summary"},
                                format="json")
            assert first.status_code == 201, first.json()
            # The endpoint that answered is tried first from now on: no more waiting.
            second = client.post("/api/v1/analyses", {"exp_id": exp.pk, "plugin": "summary"},
                                 format="json")
            assert second.status_code == 201, second.json()
        finally:
            wake.set()
        assert frozen.served.acquire(timeout=30), "the frozen replica never finished its call"
        [(_, sent_frozen, _)] = frozen.calls
        sent = [request for method, request, _ in leader.calls if method == "CreateAnalysis"]
        assert [r.analysis_id for r in sent] == [first.json()["id"], second.json()["id"]]
        assert sent_frozen.analysis_id == first.json()["id"]
    assert sorted(AnalysisRecord.objects.values_list("pk", flat=True)) == \
        sorted([first.json()["id"], second.json()["id"]])


def test_list_and_filters(alice):
    client, user = alice
    exp = make_finished_exp(creator=user)
    a = make_analysis(exp=exp, plugin_name="p1", analysis_type="online")
    b = make_analysis(exp=exp, plugin_name="p2")
    make_analysis()
    body = client.get(f"/api/v1/analyses?exp={exp.pk}").json()
    assert {r["id"] for r in body["results"]} == {a.analysis_id, b.analysis_id}
    assert set(body) == {"next", "previous", "results"}
    body = client.get("/api/v1/analyses?plugin=p2").json()
    assert [r["id"] for r in body["results"]] == [b.analysis_id]
    body = client.get("/api/v1/analyses?analysis_type=online&status=pending").json()
    assert [r["id"] for r in body["results"]] == [a.analysis_id]
    assert client.get("/api/v1/analyses?status=Running").status_code == 400
    assert client.get("/api/v1/analyses?bogus=1").status_code == 400
    page = client.get("/api/v1/analyses?page_size=2").json()
    rest = client.get(page["next"]).json()
    assert len(page["results"]) == 2 and len(rest["results"]) == 1


def test_queue_position_and_404(alice):
    client, user = alice
    exp = make_finished_exp(creator=user)
    records = [make_analysis(exp=exp, analysis_type="online") for _ in range(3)]
    assert [client.get(f"/api/v1/analyses/{r.analysis_id}").json()["queue_position"]
            for r in records] == [1, 2, 3]
    assert client.get("/api/v1/analyses/an-missing").status_code == 404
    assert client.get("/api/v1/analyses/NOT_AN_ID").status_code == 404


def test_cancel_permissions_and_fallback(alice, token_for, no_analyzer):
    client, user = alice
    record = make_analysis(exp=make_finished_exp(creator=user), analysis_type="online")
    bob, _ = client_for(token_for, "bob@example.com")
    assert bob.post(f"/api/v1/analyses/{record.analysis_id}/cancel").status_code == 403
    resp = client.post(f"/api/v1/analyses/{record.analysis_id}/cancel")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    assert resp.json()["reason"] == "Cancelled"
    # Already terminal: OK, unchanged.
    assert client.post(f"/api/v1/analyses/{record.analysis_id}/cancel").status_code == 200
    staff, staff_user = client_for(token_for, "ops@example.com")
    User.objects.filter(pk=staff_user.pk).update(is_staff=True)
    other = make_analysis()
    assert staff.post(f"/api/v1/analyses/{other.analysis_id}/cancel").json()["status"] == \
        "cancelled"


def test_cancel_through_the_analyzer(alice, analyzer):
    client, user = alice
    record = make_analysis(exp=make_finished_exp(creator=user))
    resp = client.post(f"/api/v1/analyses/{record.analysis_id}/cancel")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    assert analyzer.calls[-1][0] == "CancelAnalysis"
    assert analyzer.calls[-1][1].requester_email == "alice@example.com"


def test_delete(alice, token_for, analyzer, settings):
    client, user = alice
    record = make_analysis(exp=make_finished_exp(creator=user))
    url = f"/api/v1/analyses/{record.analysis_id}"
    assert client.delete(url).status_code == 409
    bob, _ = client_for(token_for, "bob@example.com")
    assert bob.delete(url).status_code == 403
    client.post(url + "/cancel")
    assert client.delete(url + "?purge=maybe").status_code == 400
    assert client.delete(url + "?purge=true").status_code == 204
    assert analyzer.calls[-1][0] == "DeleteAnalysis" and analyzer.calls[-1][1].purge_gcs
    assert not AnalysisRecord.objects.filter(pk=record.analysis_id).exists()


def test_delete_without_analyzer(alice, no_analyzer):
    client, user = alice
    record = make_analysis(exp=make_finished_exp(creator=user))
    url = f"/api/v1/analyses/{record.analysis_id}"
    client.post(url + "/cancel")
    resp = client.delete(url + "?purge=true")
    assert resp.status_code == 503 and resp.json()["code"] == "unavailable"
    assert client.delete(url).status_code == 204
    assert not AnalysisRecord.objects.filter(pk=record.analysis_id).exists()


def _write(url: str, data: bytes) -> None:
    path = local_path(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_logs_live_and_from_the_store(alice, settings):
    client, user = alice
    record = make_analysis(exp=make_finished_exp(creator=user))
    url = f"/api/v1/analyses/{record.analysis_id}/logs"
    with running_fake_analyzer() as (fake, target):
        settings.FALCON_ANALYZER_TARGET = target
        body = client.get(url + "?offset=5&limit=3").json()
        assert body == {"content": LOG[5:8].decode(), "next_offset": 8, "complete": False,
                        "note": "live"}
        assert fake.calls[-1][1].limit_bytes == 3
    settings.FALCON_ANALYZER_TARGET = closed_port()
    body = client.get(url).json()
    assert body["content"] == "" and body["complete"] is False
    # Pending: nothing ran yet, and the note says where it stands and when the log starts.
    assert body["note"] == ("the analysis is pending (queue position 1); its log starts when "
                            "it runs")
    AnalysisRecord.transition_pk(record.analysis_id, "running")
    body = client.get(url).json()
    assert body["content"] == "" and "no log has been written yet" in body["note"]
    _write(record.result_path + "output.log", b"hello from the store\n")
    AnalysisRecord.transition_pk(record.analysis_id, "cancelled")
    body = client.get(url + "?offset=6").json()
    assert body["content"] == "from the store\n" and body["complete"] is True
    assert body["next_offset"] == 21
    assert client.get(url + "?offset=-1").status_code == 400
    assert client.get(url + "?limit=0").status_code == 400


def test_results(alice):
    client, user = alice
    record = make_analysis(exp=make_finished_exp(creator=user), plugin_name="summary")
    url = f"/api/v1/analyses/{record.analysis_id}/results"
    resp = client.get(url)
    assert resp.json()["detail"] == (f"Analysis {record.analysis_id} has no results yet: "
                                     f"{record.result_path}summary.jsonl does not exist; it is "
                                     "pending.")
    _write(record.result_path + "summary.jsonl",
           b'{"a": 1}\nnot json\n\n[1, 2]\n{"b": NaN}\n{"c": "\xc3\xa9"}\n\xff\xfe\n'
           b'{"kind": "unparsable", "line": 2}\n{"d": \n')
    body = client.get(url).json()
    assert body["file"] == record.result_path + "summary.jsonl"
    assert body["truncated"] is False
    # A record of any shape is the plugin's; the lines that are not records are apart.
    assert body["records"] == [{"a": 1}, {"c": "é"}, {"kind": "unparsable", "line": 2}]
    assert body["unparsable"] == [
        {"line": 2, "error": "not JSON: Expecting value at column 1"},
        {"line": 4, "error": "not a JSON object (an array)"},
        {"line": 5, "error": "NaN is not a JSON number; send a finite number or a string."},
        {"line": 7, "error": "not UTF-8"},
        {"line": 9, "error": "not JSON: Expecting value at column 7"}]


def test_a_results_line_nested_past_the_stack_is_one_unparsable_line(alice):
    """A plugin's line of 200,000 `[` (any user's script can write one) is reported as
    unparsable; it never fails the results endpoint for everyone reading it."""
    client, user = alice
    record = make_analysis(exp=make_finished_exp(creator=user), plugin_name="summary")
    _write(record.result_path + "summary.jsonl", b'{"a": 1}\n' + b"[" * 200_000 + b"\n")
    resp = client.get(f"/api/v1/analyses/{record.analysis_id}/results")
    assert resp.status_code == 200
    body = resp.json()
    assert body["records"] == [{"a": 1}]
    [bad] = body["unparsable"]
    assert bad == {"line": 2, "error": "The JSON is nested more than 32 levels deep; flatten it."}


def test_results_caps(db):
    records, unparsable, truncated = parse_results(
        b"".join(b'{"i": %d}\n' % i for i in range(20)), max_records=10)
    assert len(records) == 10 and truncated and unparsable == []
    records, unparsable, truncated = parse_results(b"x\n" * 5, max_unparsable=3)
    assert records == [] and [u["line"] for u in unparsable] == [1, 2, 3] and truncated
    record = make_analysis(analysis_type="online", plugin_name="", command="run")
    _write(record.result_path + "result.jsonl",
           b"".join(json.dumps({"i": i}).encode() + b"\n" for i in range(100)))
    out = read_results(record, max_bytes=50)
    assert out["truncated"] and out["file"].endswith("/result.jsonl")
    AnalysisRecord.transition_pk(record.analysis_id, "cancelled")
    record.refresh_from_db()
    (local_path(record.result_path) / "result.jsonl").unlink()
    with pytest.raises(NotFound) as info:
        read_results(record)
    assert info.value.message == (f"Analysis {record.analysis_id} has no results: "
                                  f"{record.result_path}result.jsonl does not exist; it is "
                                  "cancelled.")
    assert out["records"] == [{"i": i} for i in range(len(out["records"]))]


def test_plugins(alice, analyzer):
    client, _ = alice
    body = client.get("/api/v1/plugins").json()
    assert [p["name"] for p in body["plugins"]] == ["summary", "trace"]
    assert body["plugins"][0]["resources"]["cpu_request"] == "500m"
    assert client.get("/api/v1/plugins/trace").json()["artifact_types"] == [
        "profiling", "benchmark"]
    assert client.get("/api/v1/plugins/nope").status_code == 404


def test_log_pages_end_on_whole_characters(alice, settings):
    """A page never ends inside a UTF-8 character: its bytes are left to the next page, so the
    pages put together are the log (a follower reading a log as it grows sees no U+FFFD). An
    ended analysis' log read from the store is complete only at its last page."""
    client, user = alice
    record = make_analysis(exp=make_finished_exp(creator=user))
    url = f"/api/v1/analyses/{record.analysis_id}/logs"
    text = "größe ✓ 終わり 🎉 done\n"
    _write(record.result_path + "output.log", text.encode())
    settings.FALCON_ANALYZER_TARGET = closed_port()
    def read_all(limit: int) -> str:
        pages, offset, complete = [], 0, False
        while not complete:
            body = client.get(f"{url}?offset={offset}&limit={limit}").json()
            assert body["next_offset"] > offset or body["complete"], body
            pages.append(body["content"])
            offset, complete = body["next_offset"], body["complete"]
            assert offset <= len(text.encode())
            if not record.is_terminal and offset == len(text.encode()):
                break
        return "".join(pages)

    for limit in (4, 5, 6, 7):
        assert read_all(limit) == text, limit
    # Ended: complete only once the last page is read, also with the controller down.
    AnalysisRecord.transition_pk(record.analysis_id, "cancelled")
    record.refresh_from_db()
    for limit in (4, 5, 6, 7, 1000):
        assert read_all(limit) == text, limit
    # A page too small for one character holds that whole character.
    at = text.encode().index("🎉".encode())
    body = client.get(f"{url}?offset={at}&limit=2").json()
    assert body["content"] == "🎉" and body["next_offset"] == at + 4


def test_what_works_while_the_analyzer_is_down_is_what_the_cli_docs_say(alice, no_analyzer):
    from pathlib import Path

    client, user = alice
    exp = make_finished_exp(creator=user)
    done = make_analysis(exp=exp, plugin_name="summary")
    AnalysisRecord.transition_pk(done.analysis_id, "running")
    AnalysisRecord.transition_pk(done.analysis_id, "succeeded")
    _write(done.result_path + "summary.jsonl", b'{"a": 1}\n')
    _write(done.result_path + "output.log", b"ran\n")
    base = f"/api/v1/analyses/{done.analysis_id}"
    # Fail at once: create, delete with purge, the catalog.
    assert client.post("/api/v1/analyses", {"exp_id": exp.pk, "plugin": "summary"},
                       format="json").status_code == 503
    assert client.delete(base + "?purge=true").status_code == 503
    assert client.get("/api/v1/plugins").status_code == 503
    # Read from the store; the note says so.
    logs = client.get(base + "/logs").json()
    assert logs["content"] == "ran\n" and logs["note"].startswith("read from the store")
    # Keep working.
    assert client.get("/api/v1/analyses").status_code == 200
    assert client.get(base).status_code == 200
    assert client.get(base + "/results").json()["records"] == [{"a": 1}]
    # Fall back to the database: cancel, then a plain delete.
    running = make_analysis(exp=exp, analysis_type="online")
    assert client.post(f"/api/v1/analyses/{running.analysis_id}/cancel").json()["status"] \
        == "cancelled"
    assert client.delete(f"/api/v1/analyses/{running.analysis_id}").status_code == 204
    readme = " ".join(
        (Path(__file__).resolve().parents[2] / "docs/cli.md").read_text(encoding="utf-8").split())
    assert ("While the analyzer controller is down, `analysis create`, `analysis delete --purge` "
            "and `plugins list`/`get` fail at once (the API answers 503; exit code 9)") in readme
    assert ("`analysis cancel` and a plain `analysis delete` fall back to the database" in readme)
    assert "`analysis logs` reads the log from the store" in readme
    assert "wait for it" not in readme
