"""The analyzer's structured logs (core.observability.logs): every line about an analysis carries its
`analysis_id` and `exp_id` as fields, as the exp controller's lines carry `exp_id`
(controllers/tests/test_exp_controller.py); AnalyzerService serves and logs each call under a
request id that it returns, as rungrpc does.

The controller runs over the in-memory record API and the real local backend (real runner
processes); AnalyzerService over a real gRPC server.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from controllers.analyzer.server import build_analyzer_server
from core.observability.context import reset_request_id, set_request_id
from core.grpc.channel import auth_metadata
from core.observability.logs import ContextFilter, json_formatter
from falcon_proto.falcon.v1 import analysis_pb2, analysis_pb2_grpc

from .fake_records import FakeRecordAPI
from .helpers import CATALOG, artifact, make_controller, until

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "analyzer-test-token-0123456789abcdef0123"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
EXP_ID = 7


@pytest.fixture
def analyzer_lines(caplog):
    """The analyzer's records at INFO, each as the JSON object the `json` format writes."""
    caplog.handler.addFilter(ContextFilter())
    formatter = json_formatter()
    with caplog.at_level(logging.INFO, logger="falcon.controllers.analyzer"):
        yield lambda: [json.loads(formatter.format(r)) for r in caplog.records
                       if r.name.startswith("falcon.controllers.analyzer")]


def _about(lines: list[dict], analysis_id: str) -> list[dict]:
    return [line for line in lines if analysis_id in line["message"]]


def test_lines_about_an_analysis_carry_its_ids_as_fields(tmp_path, analyzer_lines):
    api = FakeRecordAPI()
    api.artifact_paths[EXP_ID] = artifact(tmp_path)
    controller = make_controller(api, tmp_path)
    created = [api.create_record(exp_id=EXP_ID, analysis_type="online", plugin_name=name,
                                 command=CATALOG[name].command,
                                 result_root=(tmp_path / "results").as_uri())
               for name in ("echo-ok", "no-results")]
    ok, bad = (rec.analysis_id for rec in created)
    until(lambda: all(api.get_record(a).status in ("succeeded", "failed") for a in (ok, bad))
          and not controller.active, tick=controller.tick)
    assert (api.get_record(ok).status, api.get_record(bad).status) == ("succeeded", "failed")

    lines = analyzer_lines()
    for analysis_id in (ok, bad):
        mine = _about(lines, analysis_id)
        # The controller's and the local backend's lines, from start to end.
        assert any(line["logger"] == "falcon.controllers.analyzer.local"
                   and "started its runner" in line["message"] for line in mine)
        assert any("run analysis-" in line["message"] and "started" in line["message"]
                   for line in mine)
        assert any(line["message"].endswith("succeeded" if analysis_id == ok
                                             else "its run failed (NoResults)")
                   for line in mine)
        for line in mine:
            assert (line.get("analysis_id"), line.get("exp_id")) == (analysis_id, EXP_ID), line
    # No line names one analysis while carrying the other's id.
    assert not [line for line in lines if line.get("analysis_id") == ok and bad in
                line["message"]]


def test_offline_discovery_lines_carry_the_new_analysis_id(tmp_path, analyzer_lines):
    from controllers.analyzer.contract import AwaitingView

    api = FakeRecordAPI()
    api.awaiting.append(AwaitingView(exp_id=EXP_ID, exp_name="bench", exp_type="profiling",
                                     artifact_id=3, artifact_type="profiling",
                                     plugin_name="echo-ok",
                                     artifact_path=artifact(tmp_path),
                                     creator_email="a@example.com"))
    controller = make_controller(api, tmp_path)
    controller.tick()
    [record] = api.records.values()
    [line] = [line for line in analyzer_lines() if "created offline" in line["message"]]
    assert (line["analysis_id"], line["exp_id"], line["artifact_id"]) == (
        record.analysis_id, EXP_ID, 3)
    until(lambda: api.get_record(record.analysis_id).status == "succeeded"
          and not controller.active, tick=controller.tick)


def test_the_runner_writes_json_lines_with_the_ids_of_its_analysis(tmp_path):
    """The runner's own lines (runner.log locally, the container log of a Pod)."""
    work = tmp_path / "run"
    spec = {"analysis_id": "an-logs-1", "exp_id": EXP_ID, "command": "echo hi; exit 3",
            "artifact_path": artifact(tmp_path),
            "result_path": (tmp_path / "results").as_uri() + "/", "plugin_name": "",
            "work_dir": str(work / "work"), "exit_file": str(work / "exit.json"),
            "child_file": str(work / "child.json"), "timeout_seconds": 10}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, FALCON_LOG_FORMAT="json", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "controllers.analyzer.runner", "--spec",
                          str(tmp_path / "spec.json")], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads((work / "exit.json").read_text())["reason"] == "NonZeroExit"
    lines = [json.loads(line) for line in (out.stdout + out.stderr).splitlines()]
    assert [line["message"] for line in lines] == [
        "analysis an-logs-1: run started (attempt 1)",
        "analysis an-logs-1: run ended: NonZeroExit (exit code 3)"]
    assert all((line["analysis_id"], line["exp_id"]) == ("an-logs-1", EXP_ID) for line in lines)


@pytest.fixture
def service(tmp_path):
    api = FakeRecordAPI()
    api.artifact_paths[EXP_ID] = artifact(tmp_path)
    controller = make_controller(api, tmp_path)
    server = build_analyzer_server("127.0.0.1:0", controller, TOKEN)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    yield api, controller, analysis_pb2_grpc.AnalyzerServiceStub(channel)
    channel.close()
    server.stop(0)
    until(lambda: not controller.active, tick=controller.tick)


def _trailer(call, key: str = "x-request-id") -> str | None:
    return dict(call.trailing_metadata() or ()).get(key)


def test_analyzer_service_serves_each_call_under_a_request_id_it_returns(service,
                                                                        analyzer_lines):
    api, controller, stub = service
    reply, call = stub.CreateAnalysis.with_call(
        analysis_pb2.CreateAnalysisReq(exp_id=EXP_ID, plugin_name="echo-ok"),
        metadata=(*AUTH, ("x-request-id", "req-from-the-api-1")))
    assert _trailer(call) == "req-from-the-api-1"
    analysis_id = reply.analysis_id
    # An invalid id is replaced; refusals (a field error, a bad token) return theirs too.
    _, call = stub.ListPlugins.with_call(analysis_pb2.ListPluginsReq(),
                                         metadata=(*AUTH, ("x-request-id", "bad id")))
    assert _trailer(call) not in (None, "bad id")
    for request, metadata in ((analysis_pb2.CreateAnalysisReq(exp_id=EXP_ID), AUTH),
                              (analysis_pb2.ListPluginsReq(), ())):
        method = (stub.CreateAnalysis if isinstance(request, analysis_pb2.CreateAnalysisReq)
                  else stub.ListPlugins)
        with pytest.raises(grpc.RpcError) as refused:
            method(request, metadata=(*metadata, ("x-request-id", "req-refused-1")))
        assert _trailer(refused.value) == "req-refused-1"
    until(lambda: api.get_record(analysis_id).status == "succeeded", tick=controller.tick)
    reply, call = stub.CancelAnalysis.with_call(
        analysis_pb2.CancelAnalysisReq(analysis_id=analysis_id),
        metadata=(*AUTH, ("x-request-id", "req-cancel-1")))
    assert _trailer(call) == "req-cancel-1"

    lines = analyzer_lines()
    served = [line for line in lines if line["request_id"] == "req-from-the-api-1"]
    assert any(line["message"].startswith(f"analysis {analysis_id}: created online")
               for line in served)
    [call_line] = [line for line in served if line["message"].startswith(
        "gRPC /falcon.v1.AnalyzerService/CreateAnalysis OK ")]
    assert (call_line["analysis_id"], call_line["exp_id"]) == (analysis_id, EXP_ID)
    [cancel_line] = [line for line in lines if line["request_id"] == "req-cancel-1"
                     and line["message"].startswith("gRPC ")]
    assert cancel_line["message"].startswith("gRPC /falcon.v1.AnalyzerService/CancelAnalysis OK")
    assert (cancel_line["analysis_id"], cancel_line["exp_id"]) == (analysis_id, EXP_ID)
    assert any(line["request_id"] == "req-refused-1" and "UNAUTHENTICATED" in line["message"]
               for line in lines)


def test_calls_made_while_serving_a_request_carry_its_id():
    """The API server's calls to AnalyzerService (and the analyzer's to the API server) are
    served under the request id of what they serve."""
    assert "x-request-id" not in dict(auth_metadata("t" * 32))
    token = set_request_id("req-outer-1")
    try:
        assert dict(auth_metadata("t" * 32))["x-request-id"] == "req-outer-1"
    finally:
        reset_request_id(token)
