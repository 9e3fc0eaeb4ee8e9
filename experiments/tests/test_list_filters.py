"""ListExps filters over the wire: the HTTP list and the gRPC list take the same filter names
(`ExperimentFilter`'s; gRPC's CommonListReq fields map onto them), return the same rows for the
same filters, and refuse a bad value with the same message naming the field."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from urllib.parse import urlencode

import grpc
import pytest

from core.grpc.errors import ERROR_CODE_KEY, ERROR_FIELDS_KEY
from core.grpc.from_proto import LIST_FILTER_NAMES, PROTO_FIELD_OF
from core.domain.statuses import ExpStatus
from experiments.filters import ExperimentFilter
from experiments.models import Experiment
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp
from falcon_proto.falcon.v1 import common_pb2
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    grpc_channel, grpc_server, stubs,
)

pytestmark = pytest.mark.django_db(transaction=True)

# The filters CommonListReq can carry for ListExps, by ExperimentFilter name.
GRPC_NAMES = {"status", "exp_type", "cluster_name", "id", "updated_since", "label"}


def http_ids(api, filters: dict, *, comma: bool) -> list[int]:
    """The ids HTTP ListExps returns; list values repeated, or as one comma list."""
    params: list[tuple[str, str]] = []
    for name, value in filters.items():
        if isinstance(value, datetime):
            params.append((name, value.isoformat()))
        elif comma:
            params.append((name, ",".join(map(str, value))))
        else:
            params.extend((name, str(item)) for item in value)
    res = api.get(f"/api/v1/exps?{urlencode(params)}")
    assert res.status_code == 200, res.content
    return sorted(row["id"] for row in res.json()["results"])


def grpc_request(filters: dict) -> common_pb2.CommonListReq:
    """The CommonListReq of `filters` (ExperimentFilter names), through the one name mapping."""
    request = common_pb2.CommonListReq()
    for name, value in filters.items():
        field = PROTO_FIELD_OF[name]
        if isinstance(value, datetime):
            getattr(request, field).FromDatetime(value)
        else:
            getattr(request, field).extend(value)
    return request


def grpc_ids(stubs, filters: dict) -> list[int]:
    resp = stubs.exps.ListExps(grpc_request(filters), metadata=stubs.md, timeout=10)
    return sorted(item.id for item in resp.exps)


def test_every_grpc_filter_is_a_filter_of_the_http_list():
    names = set(ExperimentFilter.filter_names())
    assert {LIST_FILTER_NAMES[field] for field in LIST_FILTER_NAMES} & names == GRPC_NAMES
    # HTTP has two more, which CommonListReq has no field for.
    assert names - GRPC_NAMES == {"creator", "search"}


def test_http_and_grpc_return_the_same_rows_for_the_same_filters(auth_api, stubs):
    a = make_exp(name="a", cluster_name="c1", exp_type="profiling")
    b = make_exp(name="b", cluster_name="c2", exp_type="benchmark")
    c = make_exp(name="c", cluster_name="c2", exp_type="profiling")
    d = make_exp(name="d", cluster_name="c1", exp_type="benchmark")
    exp_update_status(exp_id=b.pk, status=ExpStatus.RUNNING)
    exp_update_status(exp_id=d.pk, status=ExpStatus.FAILED)
    Experiment.objects.filter(pk=a.pk).update(updated_at=datetime(2020, 1, 1, tzinfo=timezone.utc))
    since = datetime.now(timezone.utc) - timedelta(hours=1)

    cases = [
        ({}, [a, b, c, d]),
        ({"status": ["Running"]}, [b]),
        ({"status": ["Created", "Running"]}, [a, b, c]),
        ({"exp_type": ["profiling"]}, [a, c]),
        ({"exp_type": ["profiling", "benchmark"]}, [a, b, c, d]),
        ({"cluster_name": ["c2"]}, [b, c]),
        ({"cluster_name": ["c2"], "exp_type": ["profiling"]}, [c]),
        ({"id": [a.pk, c.pk, d.pk], "status": ["Created", "Failed"]}, [a, c, d]),
        ({"updated_since": since}, [b, c, d]),
        ({"updated_since": since, "cluster_name": ["c1"], "status": ["Failed"]}, [d]),
        ({"cluster_name": ["nowhere"]}, []),
    ]
    for filters, expected in cases:
        want = sorted(exp.pk for exp in expected)
        assert set(filters) <= GRPC_NAMES
        assert grpc_ids(stubs, filters) == want, filters
        assert http_ids(auth_api, filters, comma=False) == want, filters
        assert http_ids(auth_api, filters, comma=True) == want, filters


def test_grpc_repeated_values_may_be_comma_lists_too(stubs):
    a = make_exp(name="a", cluster_name="c1")
    b = make_exp(name="b", cluster_name="c2")
    make_exp(name="c", cluster_name="local")
    resp = stubs.exps.ListExps(common_pb2.CommonListReq(cluster_names=["c1,c2"]),
                               metadata=stubs.md, timeout=10)
    assert [item.id for item in resp.exps] == [a.pk, b.pk]


@pytest.mark.parametrize("name,http_value,grpc_value", [
    ("status", "Exploded", ["Exploded"]),
    ("status", "Running,Pending", ["Running", "Pending"]),
    ("id", "0", [0]),
    ("id", "-4", [-4]),
    ("exp_type", "x" * 300, ["x" * 300]),
    ("cluster_name", "c1," + "y" * 256, ["c1", "y" * 256]),
])
def test_a_bad_value_is_400_and_invalid_argument_naming_the_field(auth_api, stubs, name,
                                                                  http_value, grpc_value):
    res = auth_api.get(f"/api/v1/exps?{urlencode({name: http_value})}")
    assert res.status_code == 400 and res.json()["code"] == "invalid"
    http_messages = res.json()[name]

    with pytest.raises(grpc.RpcError) as info:
        stubs.exps.ListExps(common_pb2.CommonListReq(**{PROTO_FIELD_OF[name]: grpc_value}),
                            metadata=stubs.md, timeout=10)
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    trailers = dict(err.trailing_metadata() or ())
    assert trailers[ERROR_CODE_KEY] == "invalid"
    grpc_messages = json.loads(trailers[ERROR_FIELDS_KEY])[PROTO_FIELD_OF[name]]
    # The same FilterSet checked both: the same words, under each API's name for the field.
    assert http_messages == grpc_messages
    assert PROTO_FIELD_OF[name] in err.details()


def test_bad_status_message_lists_the_allowed_values(auth_api):
    res = auth_api.get("/api/v1/exps?status=Running&status=Exploded")
    assert res.status_code == 400
    (message,) = res.json()["status"]
    assert "'Exploded'" in message and all(status in message for status in ExpStatus)


@pytest.mark.parametrize("value", [
    "yesterday", "9999-12-31T23:59:59-23:00", "0001-01-01T00:00:00+23:59"])
def test_bad_updated_since_is_400_naming_it(auth_api, value):
    """Not a date-time, or an instant outside years 1 to 9999 once in UTC."""
    res = auth_api.get("/api/v1/exps", {"updated_since": value})
    assert res.status_code == 400 and "ISO 8601" in res.json()["updated_since"][0]


def test_updated_since_with_an_offset_is_the_same_instant(auth_api, user):
    exp = make_exp(creator=user)
    moment = Experiment.objects.get(pk=exp.pk).updated_at
    local = moment.astimezone(timezone(timedelta(hours=-5))).isoformat()
    res = auth_api.get("/api/v1/exps", {"updated_since": local})
    assert [row["id"] for row in res.json()["results"]] == [exp.pk]


def test_http_only_filters_and_unknown_grpc_filters(auth_api, stubs, user):
    """`creator` and `search` are HTTP's (no CommonListReq field); an RPC refuses a filter
    its entity's FilterSet does not declare, naming the request field and the ones it takes."""
    mine = make_exp(creator=user, name="llama-bench")
    make_exp(name="resnet-bench")
    res = auth_api.get(f"/api/v1/exps?creator={user.email}&search=LLAMA")
    assert [row["id"] for row in res.json()["results"]] == [mine.pk]
    with pytest.raises(grpc.RpcError) as info:
        stubs.exps.ListExps(common_pb2.CommonListReq(exp_ids=[mine.pk],
                                                     exp_statuses=["Created"]),
                            metadata=stubs.md, timeout=10)
    fields = json.loads(dict(info.value.trailing_metadata())[ERROR_FIELDS_KEY])
    assert set(fields) == {"exp_ids", "exp_statuses"}
    assert "statuses" in fields["exp_ids"][0] and "updated_since" in fields["exp_ids"][0]
