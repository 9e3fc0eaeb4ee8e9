"""AnalysisRecordService over a real gRPC server: every RPC, FieldMask rules, ALREADY_EXISTS
with the existing id, keyset pages, and the controller-only RPCs refused to a user's token."""
from __future__ import annotations

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask

from analysis.tests.factories import RESULT_ROOT, make_analysis, make_finished_exp
from core.grpc.channel import auth_metadata
from core.grpc.errors import ERROR_CODE_KEY, error_from_rpc_error
from core.errors import AlreadyExists
from falcon_proto.falcon.v1 import analysis_pb2 as pb, analysis_pb2_grpc
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    INTERNAL_TOKEN, grpc_channel, grpc_server,
)

pytestmark = pytest.mark.django_db(transaction=True)
MD = auth_metadata(INTERNAL_TOKEN)


@pytest.fixture
def records(grpc_channel):
    return analysis_pb2_grpc.AnalysisRecordServiceStub(grpc_channel)


def rpc_error(call, request, metadata=MD) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=10, metadata=metadata)
    return info.value


def create_req(exp, **overrides) -> pb.CreateAnalysisRecordReq:
    fields = {"exp_id": exp.pk, "analysis_type": "offline", "plugin_name": "summary",
              "creator_email": exp.creator.email, "result_root": RESULT_ROOT}
    fields.update(overrides)
    return pb.CreateAnalysisRecordReq(**fields)


def test_create_get_and_duplicate(records):
    exp = make_finished_exp()
    resp = records.CreateAnalysisRecord(create_req(exp, script_content="print(1)"), timeout=10,
                                        metadata=MD)
    record = resp.record
    assert resp.changed and record.status == "pending" and record.exp_id == exp.pk
    assert record.artifact_id == exp.artifact.pk and record.script_bytes == 8
    assert record.script_content == ""
    got = records.GetAnalysisRecord(pb.GetAnalysisRecordReq(analysis_id=record.analysis_id,
                                                            with_script=True),
                                    timeout=10, metadata=MD)
    assert got.script_content == "print(1)" and got.creator_email == exp.creator.email
    err = rpc_error(records.CreateAnalysisRecord, create_req(exp))
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    trailers = dict(err.trailing_metadata())
    assert trailers["falcon-analysis-id"] == record.analysis_id
    assert trailers[ERROR_CODE_KEY] == "already_exists"
    rebuilt = error_from_rpc_error(err)
    assert isinstance(rebuilt, AlreadyExists)
    assert rebuilt.metadata["falcon-analysis-id"] == record.analysis_id
    # Two online ones are fine.
    for _ in range(2):
        records.CreateAnalysisRecord(create_req(exp, analysis_type="online"), timeout=10,
                                     metadata=MD)


def test_create_errors(records):
    exp = make_finished_exp()
    err = rpc_error(records.CreateAnalysisRecord, create_req(exp, plugin_name=""))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "plugin_name" in err.details()
    err = rpc_error(records.CreateAnalysisRecord, create_req(exp, exp_id=424242))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    running = make_finished_exp(status="Running", artifact_status=None)
    err = rpc_error(records.CreateAnalysisRecord, create_req(running, analysis_type="online"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert rpc_error(records.GetAnalysisRecord, pb.GetAnalysisRecordReq(
        analysis_id="an-nope")).code() == grpc.StatusCode.NOT_FOUND


def test_create_refuses_a_plugin_of_another_artifact_type_before_any_record(records):
    from analysis.models import AnalysisRecord

    exp = make_finished_exp(exp_type="benchmark")
    err = rpc_error(records.CreateAnalysisRecord, create_req(
        exp, analysis_type="online", plugin_name="hlo-stats",
        plugin_artifact_types=["profiling"]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "plugin_name" in err.details() and "'hlo-stats'" in err.details()
    assert "'profiling'" in err.details() and "'benchmark'" in err.details()
    assert not AnalysisRecord.objects.filter(experiment=exp).exists()
    made = records.CreateAnalysisRecord(create_req(
        exp, analysis_type="online", plugin_name="bench-summary",
        plugin_artifact_types=["benchmark"]), timeout=10, metadata=MD)
    assert made.record.status == "pending"


def update(records, analysis_id, paths, expected=None, **record):
    req = pb.UpdateAnalysisRecordReq(analysis_id=analysis_id, record=pb.AnalysisRecord(**record),
                                     update_mask=FieldMask(paths=paths))
    if expected is not None:
        req.expected_status = expected
    return req


def test_update_with_field_mask(records):
    record = make_analysis()
    resp = records.UpdateAnalysisRecord(update(
        records, record.analysis_id, ["status", "attempts", "cluster_object_name"],
        expected="pending", status="running", attempts=1, cluster_object_name="pod-a",
        reason="ignored-not-masked", error_message="not masked"), timeout=10, metadata=MD)
    assert resp.changed and resp.record.status == "running" and resp.record.attempts == 1
    assert resp.record.reason == "" and resp.record.error_message == ""
    assert resp.record.started_at.seconds > 0
    resp = records.UpdateAnalysisRecord(update(
        records, record.analysis_id, ["record.error_message", "reason"], error_message="oops",
        reason="Slow"), timeout=10, metadata=MD)
    assert not resp.changed and resp.record.error_message == "oops"
    assert resp.record.status == "running"
    for path in ("name", "exp_id", "command", "result_path", "script_content"):
        err = rpc_error(records.UpdateAnalysisRecord,
                        update(records, record.analysis_id, [path]))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert path in err.details() and "read-only" in err.details()
    err = rpc_error(records.UpdateAnalysisRecord,
                    update(records, record.analysis_id, ["bogus"]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "bogus" in err.details()
    err = rpc_error(records.UpdateAnalysisRecord, update(records, record.analysis_id, []))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = rpc_error(records.UpdateAnalysisRecord, update(
        records, record.analysis_id, ["status"], expected="pending", status="failed"))
    assert err.code() == grpc.StatusCode.ABORTED
    err = rpc_error(records.UpdateAnalysisRecord, update(
        records, record.analysis_id, ["status"], status="pending"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_delete(records):
    record = make_analysis()
    err = rpc_error(records.DeleteAnalysisRecord,
                    pb.DeleteAnalysisRecordReq(analysis_id=record.analysis_id))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    records.UpdateAnalysisRecord(update(records, record.analysis_id, ["status"],
                                        status="cancelled"), timeout=10, metadata=MD)
    records.DeleteAnalysisRecord(pb.DeleteAnalysisRecordReq(analysis_id=record.analysis_id),
                                 timeout=10, metadata=MD)


def test_list_pages_and_running(records):
    exp = make_finished_exp()
    created = [make_analysis(exp=exp, analysis_type="online") for _ in range(5)]
    other = make_analysis()
    seen, token = [], ""
    while True:
        page = records.ListAnalysisRecords(pb.ListAnalysisRecordsReq(
            exp_id=exp.pk, page_size=2, page_token=token), timeout=10, metadata=MD)
        seen += [r.analysis_id for r in page.records]
        token = page.next_page_token
        if not token:
            break
    assert seen == [r.analysis_id for r in created]
    page = records.ListAnalysisRecords(pb.ListAnalysisRecordsReq(), timeout=10, metadata=MD)
    assert len(page.records) == 6
    records.UpdateAnalysisRecord(update(records, other.analysis_id, ["status"],
                                        status="running"), timeout=10, metadata=MD)
    running = records.ListRunningAnalyses(pb.ListRunningAnalysesReq(), timeout=10, metadata=MD)
    assert [r.analysis_id for r in running.records] == [other.analysis_id]
    page = records.ListAnalysisRecords(pb.ListAnalysisRecordsReq(statuses=["running"]),
                                       timeout=10, metadata=MD)
    assert [r.analysis_id for r in page.records] == [other.analysis_id]
    err = rpc_error(records.ListAnalysisRecords, pb.ListAnalysisRecordsReq(statuses=["Running"]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "statuses" in err.details()
    err = rpc_error(records.ListAnalysisRecords, pb.ListAnalysisRecordsReq(page_token="junk"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in err.details()


def test_exps_awaiting(records):
    exp = make_finished_exp()
    req = pb.ListExpsAwaitingAnalysisReq(limit=10, plugins=[
        pb.PluginArtifactTypes(plugin_name="summary", artifact_types=["profiling"])])
    items = records.ListExpsAwaitingAnalysis(req, timeout=10, metadata=MD).items
    assert [(i.exp_id, i.artifact_id, i.plugin_name, i.creator_email) for i in items] == [
        (exp.pk, exp.artifact.pk, "summary", exp.creator.email)]
    assert items[0].finished_at.seconds > 0 and items[0].artifact_type == "profiling"
    make_analysis(exp=exp)
    assert not records.ListExpsAwaitingAnalysis(req, timeout=10, metadata=MD).items


CONTROLLER_ONLY = [
    ("CreateAnalysisRecord", pb.CreateAnalysisRecordReq()),
    ("UpdateAnalysisRecord", pb.UpdateAnalysisRecordReq()),
    ("DeleteAnalysisRecord", pb.DeleteAnalysisRecordReq()),
    ("ListExpsAwaitingAnalysis", pb.ListExpsAwaitingAnalysisReq()),
    ("ListRunningAnalyses", pb.ListRunningAnalysesReq()),
]


def test_controller_only_rpcs_refuse_a_user_token(records, token_for):
    user_md = auth_metadata(token_for("dora@example.com"))
    for method, request in CONTROLLER_ONLY:
        err = rpc_error(getattr(records, method), request, metadata=user_md)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, method
    # Users read records as they read experiments.
    record = make_analysis()
    got = records.GetAnalysisRecord(pb.GetAnalysisRecordReq(analysis_id=record.analysis_id),
                                    timeout=10, metadata=user_md)
    assert got.analysis_id == record.analysis_id
    assert records.ListAnalysisRecords(pb.ListAnalysisRecordsReq(), timeout=10,
                                       metadata=user_md).records


def test_health_and_reflection_know_the_service(grpc_channel):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    status = health_pb2_grpc.HealthStub(grpc_channel).Check(
        health_pb2.HealthCheckRequest(service="falcon.v1.AnalysisRecordService"), timeout=10)
    assert status.status == health_pb2.HealthCheckResponse.SERVING
