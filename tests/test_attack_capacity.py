"""Attacks on everyone's capacity (issue item 10), each performed and shown refused.

Filters: a multi-valued list filter with 100,000 values cost minutes of CPU (duplicates were
removed by a list scan per value); every such filter, over HTTP and gRPC, now takes at most
`core.filters.MAX_FILTER_VALUES` values, counted before any is parsed or a row read.
"""
from __future__ import annotations

import grpc
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.filters import MAX_FILTER_VALUES
from falcon_proto.falcon.v1 import (
    analysis_pb2, analysis_pb2_grpc, common_pb2, experiment_pb2, job_pb2,
)
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    INTERNAL_TOKEN, grpc_channel, grpc_server, stubs,
)

LIMIT = MAX_FILTER_VALUES


def _tables_read(queries) -> set[str]:
    """The domain tables a request's queries touched (authentication's are left out)."""
    return {table for query in queries for table in
            ("experiments", "jobs", "artifacts", "analysis_records", "experiment_labels")
            if table in query["sql"]}


def _ids(count: int, start: int = 1) -> str:
    return ",".join(str(start + index) for index in range(count))


# -- HTTP ------------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("path, name, values", [
    ("/api/v1/exps", "id", lambda n: _ids(n)),
    ("/api/v1/exps", "cluster_name", lambda n: ",".join(f"c{i}" for i in range(n))),
    ("/api/v1/exps", "exp_type", lambda n: ",".join(f"t{i}" for i in range(n))),
    ("/api/v1/exps", "status", lambda n: ",".join(["Running"] * n)),
    ("/api/v1/exps", "label", lambda n: ",".join(["team=a"] * n)),
    ("/api/v1/analyses", "exp", lambda n: _ids(n)),
    ("/api/v1/analyses", "plugin", lambda n: ",".join(f"p{i}" for i in range(n))),
    ("/api/v1/analyses", "status", lambda n: ",".join(["running"] * n)),
    ("/api/v1/analyses", "analysis_type", lambda n: ",".join(["online"] * n)),
])
def test_http_list_filter_takes_the_limit_and_refuses_one_more(auth_api, path, name, values):
    assert auth_api.get(path, {name: values(LIMIT)}).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        res = auth_api.get(path, {name: values(LIMIT + 1)})
    assert res.status_code == 400, res.content
    body = res.json()
    assert body["code"] == "invalid"
    message = " ".join(body[name])
    assert f"{LIMIT + 1} values" in message and f"at most {LIMIT}" in message
    assert _tables_read(queries.captured_queries) == set()


@pytest.mark.django_db
def test_http_repeated_and_comma_values_count_together(auth_api):
    # 500 repeated + 501 in one comma list: 1,001 values of one filter.
    query = "&".join(f"id={i}" for i in range(1, 501)) + "&id=" + _ids(501, start=501)
    res = auth_api.get(f"/api/v1/exps?{query}")
    assert res.status_code == 400 and "id" in res.json()


@pytest.mark.django_db
def test_http_huge_id_list_is_refused_before_any_id_is_parsed(auth_api):
    with CaptureQueriesContext(connection) as queries:
        res = auth_api.get("/api/v1/exps", {"id": _ids(100_000)})
    assert res.status_code == 400
    assert "100000 values" in res.json()["id"][0]
    assert _tables_read(queries.captured_queries) == set()


@pytest.mark.django_db
def test_http_diff_ids_are_capped_too(auth_api):
    res = auth_api.get("/api/v1/exps/diff", {"ids": _ids(LIMIT + 1)})
    assert res.status_code == 400 and f"at most {LIMIT}" in res.json()["ids"][0]


# -- gRPC ------------------------------------------------------------------------------------

def _refused(call, request, metadata) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=30, metadata=metadata)
    return info.value


LIST_FIELDS = {
    "ids": lambda n: list(range(1, n + 1)),
    "exp_ids": lambda n: list(range(1, n + 1)),
    "cluster_names": lambda n: [f"c{i}" for i in range(n)],
    "exp_types": lambda n: [f"t{i}" for i in range(n)],
    "statuses": lambda n: ["Succeeded"] * n,
}


@pytest.mark.parametrize("rpc, fields", [
    ("exps.ListExps", ("ids", "cluster_names", "exp_types", "statuses", "labels")),
    ("jobs.ListJobs", ("ids", "exp_ids", "cluster_names", "exp_types", "statuses")),
    ("artifacts.ListArtifacts", ("ids", "exp_ids", "cluster_names", "exp_types", "statuses")),
])
def test_grpc_list_filter_takes_the_limit_and_refuses_one_more(stubs, rpc, fields):
    group, method = rpc.split(".")
    call = getattr(getattr(stubs, group), method)
    values = dict(LIST_FIELDS, labels=lambda n: ["team=a"] * n)
    for field in fields:
        make = values[field]
        call(common_pb2.CommonListReq(**{field: make(LIMIT)}), timeout=30, metadata=stubs.md)
        err = _refused(call, common_pb2.CommonListReq(**{field: make(LIMIT + 1)}), stubs.md)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (rpc, field)
        assert field in err.details() and f"at most {LIMIT}" in err.details(), err.details()


def test_grpc_hundred_thousand_ids_are_refused_at_once(stubs):
    # The reported attack: 100,000 ids (85-150 s of CPU each before, 16 calls blocked the API).
    err = _refused(stubs.exps.ListExps, common_pb2.CommonListReq(ids=range(1, 100_001)),
                   stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ids" in err.details() and "100000 values" in err.details()
    # The server still answers the next call.
    stubs.exps.ListExps(common_pb2.CommonListReq(), timeout=30, metadata=stubs.md)


def test_grpc_state_reads_cap_their_repeated_fields(stubs):
    stubs.jobs.ListJobStates(job_pb2.ListJobStatesReq(
        statuses=["Pending"] * LIMIT, cluster_names=["c1"] * LIMIT), timeout=30,
        metadata=stubs.md)
    for request, field in ((job_pb2.ListJobStatesReq(statuses=["Pending"] * (LIMIT + 1)),
                            "statuses"),
                           (job_pb2.ListJobStatesReq(cluster_names=["c"] * (LIMIT + 1)),
                            "cluster_names")):
        err = _refused(stubs.jobs.ListJobStates, request, stubs.md)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.details()
    stubs.exps.ListExpStates(experiment_pb2.ListExpStatesReq(statuses=["Running"] * LIMIT),
                             timeout=30, metadata=stubs.md)
    err = _refused(stubs.exps.ListExpStates,
                   experiment_pb2.ListExpStatesReq(statuses=["Running"] * (LIMIT + 1)), stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "statuses" in err.details()


def test_grpc_analysis_records_cap_statuses(grpc_channel):
    from core.grpc.channel import auth_metadata

    records = analysis_pb2_grpc.AnalysisRecordServiceStub(grpc_channel)
    md = auth_metadata(INTERNAL_TOKEN)
    records.ListAnalysisRecords(analysis_pb2.ListAnalysisRecordsReq(
        statuses=["running"] * LIMIT), timeout=30, metadata=md)
    err = _refused(records.ListAnalysisRecords, analysis_pb2.ListAnalysisRecordsReq(
        statuses=["running"] * (LIMIT + 1)), md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "statuses" in err.details()
