"""AnalyzerService's rules, each over a real gRPC server (real sockets, the token interceptor)."""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from artifacts.store import local_path
from controllers.analyzer.server import build_analyzer_server
from falcon_proto.falcon.v1 import analysis_pb2, analysis_pb2_grpc

from .fake_records import FakeRecordAPI
from .helpers import artifact, make_controller, until

TOKEN = "analyzer-test-token-0123456789abcdef0123"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture
def env(tmp_path):
    api = FakeRecordAPI()
    api.artifact_paths[1] = artifact(tmp_path)
    controller = make_controller(api, tmp_path)
    leader = {"yes": True}
    server = build_analyzer_server("127.0.0.1:0", controller, TOKEN,
                                   is_leader=lambda: leader["yes"])
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    yield api, controller, analysis_pb2_grpc.AnalyzerServiceStub(channel), channel, leader
    channel.close()
    server.stop(0)
    for analysis_id in list(controller.active):
        until(lambda: controller.backend.stop(analysis_id))


def code_of(call, *args, **kwargs):
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kwargs)
    return info.value.code(), info.value.details()


def test_token_required_but_not_for_health(env):
    _, _, stub, channel, _ = env
    code, _ = code_of(stub.ListPlugins, analysis_pb2.ListPluginsReq())
    assert code == grpc.StatusCode.UNAUTHENTICATED
    code, _ = code_of(stub.ListPlugins, analysis_pb2.ListPluginsReq(),
                      metadata=(("authorization", "Bearer wrong"),))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    names = [p.name for p in stub.ListPlugins(analysis_pb2.ListPluginsReq(),
                                              metadata=AUTH).plugins]
    assert "echo-ok" in names
    assert stub.GetPlugin(analysis_pb2.GetPluginReq(name="slow"), metadata=AUTH).timeout_seconds
    code, _ = code_of(stub.GetPlugin, analysis_pb2.GetPluginReq(name="nope"), metadata=AUTH)
    assert code == grpc.StatusCode.NOT_FOUND


def test_create_rules(env):
    api, controller, stub, _, _ = env
    code, details = code_of(stub.CreateAnalysis, analysis_pb2.CreateAnalysisReq(exp_id=1),
                            metadata=AUTH)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "plugin_name" in details
    code, details = code_of(stub.CreateAnalysis, analysis_pb2.CreateAnalysisReq(
        exp_id=1, plugin_name="nope"), metadata=AUTH)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "echo-ok" in details
    code, details = code_of(stub.CreateAnalysis, analysis_pb2.CreateAnalysisReq(
        exp_id=1, command="true", script_content="x" * ((1 << 20) + 1)), metadata=AUTH)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "script_content" in details
    code, details = code_of(stub.CreateAnalysis, analysis_pb2.CreateAnalysisReq(
        exp_id=1, command="true", resource_override=analysis_pb2.ResourceOverride(
            cpu_limit="lots")), metadata=AUTH)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "resource_override.cpu_limit" in details
    # A pattern check is on the whole value: "$" alone would let a trailing newline through.
    code, details = code_of(stub.CreateAnalysis, analysis_pb2.CreateAnalysisReq(
        exp_id=1, command="true", resource_override=analysis_pb2.ResourceOverride(
            memory_limit="2Gi\n")), metadata=AUTH)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "resource_override.memory_limit" in details
    for plugin, override, field, says in (
            ("echo-ok", {"memory_request": "4Gi"}, "memory_request", "the plugin's memory_limit"),
            ("echo-ok", {"cpu_limit": "50m"}, "cpu_limit", "below the plugin's cpu_request"),
            ("", {"cpu_limit": "0"}, "cpu_limit", "above 0"),
            ("", {"memory_request": "20Ti"}, "memory_request", "more than 16Ti"),
            ("", {"cpu_request": "2", "cpu_limit": "1"}, "cpu_request", "above cpu_limit 1")):
        code, details = code_of(stub.CreateAnalysis, analysis_pb2.CreateAnalysisReq(
            exp_id=1, plugin_name=plugin, command="" if plugin else "true",
            resource_override=analysis_pb2.ResourceOverride(**override)), metadata=AUTH)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (override, details)
        assert f"resource_override.{field}: " in details and says in details, details
    for name in ("../run.py", "..", "a/b", "x" * 256):
        code, details = code_of(stub.CreateAnalysis, analysis_pb2.CreateAnalysisReq(
            exp_id=1, command="true", script_content="x", script_name=name), metadata=AUTH)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "script_name" in details, name
    code, details = code_of(stub.CreateAnalysis, analysis_pb2.CreateAnalysisReq(
        exp_id=1, command="true", script_name="run.py"), metadata=AUTH)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "no script was sent" in details
    assert not api.records
    code, details = code_of(stub.CreateAnalysis, analysis_pb2.CreateAnalysisReq(
        exp_id=1, plugin_name="echo-ok", script_content="print(1)"), metadata=AUTH)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("script_content: a script goes with a command")
    ok = stub.CreateAnalysis(analysis_pb2.CreateAnalysisReq(
        exp_id=1, command="sh script", script_content="y" * (1 << 20),
        resource_override=analysis_pb2.ResourceOverride(cpu_limit="3")), metadata=AUTH)
    rec = api.get_record(ok.analysis_id, with_script=True)
    assert rec.script_bytes == 1 << 20
    ok = stub.CreateAnalysis(analysis_pb2.CreateAnalysisReq(
        exp_id=1, plugin_name="echo-ok",
        resource_override=analysis_pb2.ResourceOverride(cpu_limit="3")), metadata=AUTH)
    rec = api.get_record(ok.analysis_id, with_script=True)
    assert rec.command == controller.catalog["echo-ok"].command  # from the catalog
    assert rec.status == "pending" and controller.queues.is_pending(ok.analysis_id)
    assert controller.overrides[ok.analysis_id] == {"cpu_limit": "3"}  # memory only
    assert controller.spec_for(rec, 1).resources["cpu_limit"] == "3"


def test_cancel_is_idempotent_and_delete_purges(env):
    api, controller, stub, _, _ = env
    ok = stub.CreateAnalysis(analysis_pb2.CreateAnalysisReq(exp_id=1, plugin_name="slow"),
                             metadata=AUTH)
    until(lambda: api.get_record(ok.analysis_id).status == "running", tick=controller.tick)
    folder = local_path(api.get_record(ok.analysis_id).result_path)
    until(lambda: (folder / "output.log").exists())
    code, details = code_of(stub.DeleteAnalysis, analysis_pb2.DeleteAnalysisReq(
        analysis_id=ok.analysis_id), metadata=AUTH)
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "cancel it first" in details
    first = stub.CancelAnalysis(analysis_pb2.CancelAnalysisReq(analysis_id=ok.analysis_id),
                                metadata=AUTH)
    assert first.record.status == "cancelled"
    again = stub.CancelAnalysis(analysis_pb2.CancelAnalysisReq(analysis_id=ok.analysis_id),
                                metadata=AUTH)
    assert again.record.status == "cancelled"
    until(lambda: not controller.queues.holds(ok.analysis_id), tick=controller.tick)
    assert (folder / "output.log").exists()
    resp = stub.DeleteAnalysis(analysis_pb2.DeleteAnalysisReq(analysis_id=ok.analysis_id,
                                                              purge_gcs=True), metadata=AUTH)
    assert resp.purged_files >= 1 and not folder.exists()
    code, _ = code_of(stub.CancelAnalysis, analysis_pb2.CancelAnalysisReq(
        analysis_id=ok.analysis_id), metadata=AUTH)
    assert code == grpc.StatusCode.NOT_FOUND  # the API server's error passes through


def test_logs_offset_paging_and_complete(env):
    api, controller, stub, _, _ = env
    ok = stub.CreateAnalysis(analysis_pb2.CreateAnalysisReq(
        exp_id=1, command="for i in 1 2 3 4 5; do echo line-$i; done"), metadata=AUTH)
    until(lambda: api.get_record(ok.analysis_id).status == "succeeded", tick=controller.tick)
    until(lambda: not controller.queues.holds(ok.analysis_id), tick=controller.tick)
    whole, offset = b"", 0
    while True:
        page = stub.GetAnalysisLogs(analysis_pb2.GetAnalysisLogsReq(
            analysis_id=ok.analysis_id, offset=offset, limit_bytes=10), metadata=AUTH)
        whole += page.content
        assert page.next_offset == offset + len(page.content)
        offset = page.next_offset
        if page.complete:
            break
    assert b"line-1\nline-2" in whole and b"line-5" in whole
    code, _ = code_of(stub.GetAnalysisLogs, analysis_pb2.GetAnalysisLogsReq(
        analysis_id=ok.analysis_id, limit_bytes=(4 << 20) + 1), metadata=AUTH)
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_follower_answers_unavailable(env):
    _, _, stub, _, leader = env
    leader["yes"] = False
    code, details = code_of(stub.CreateAnalysis, analysis_pb2.CreateAnalysisReq(
        exp_id=1, command="true"), metadata=AUTH)
    assert code == grpc.StatusCode.UNAVAILABLE and "not the leader" in details
