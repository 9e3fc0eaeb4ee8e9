"""Hostile and edge-case input over HTTP and gRPC: every kind is refused with a named field or
problem (400/413, INVALID_ARGUMENT), never a 500 or a silent change (docs/limits.md)."""
from __future__ import annotations

import json

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework import serializers
from rest_framework.validators import ProhibitSurrogateCharactersValidator
from google.protobuf.timestamp_pb2 import Timestamp

from accounts.tests.factories import UserFactory
from core.errors import ValidationFailed
from core.grpc.errors import ERROR_FIELDS_KEY
from experiments.api.serializers import ProhibitSurrogates, StrictCharField
from experiments.models import Experiment
from experiments.services import exp_create, exp_delete, exp_update_status, job_create
from experiments.tests.factories import make_exp, task_spec
from falcon_proto.falcon.v1 import common_pb2, experiment_pb2, job_pb2
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    grpc_channel, grpc_server, stubs,
)
from jobs.specs import (
    MAX_ENVIRONMENT_BYTES, MAX_ROLES, MAX_TASK_SPECS_BYTES, MAX_TOTAL_REPLICAS,
)

BODY = {"name": "bench-1", "cluster_name": "local", "exp_type": "profiling",
        "role_to_task_spec": {"main": {"command": "echo hi", "replica": 1}}, "config": "a: 1\n"}


@pytest.fixture
def alice(db):
    """The user `auth_api` authenticates as (the local issuer's `sub` for her email)."""
    from accounts.issuer import local_subject

    return UserFactory(user_id=local_subject("alice@example.com"), email="alice@example.com")


def post(api, body):
    return api.post("/api/v1/exps", body, format="json")


def post_raw(api, text: str):
    return api.generic("POST", "/api/v1/exps", text.encode("utf-8"),
                       content_type="application/json")


def with_spec(**spec):
    return {**BODY, "role_to_task_spec": {"main": {"command": "echo hi", **spec}}}


# -- 1. integers against the narrowest of column and wire type -----------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("priority", [2**31, -2**31 - 1, 2**63, -2**63 - 1, 10**30])
def test_priority_outside_int32_is_400_with_the_range(auth_api, priority):
    res = post(auth_api, {**BODY, "priority": priority})
    assert res.status_code == 400, res.content
    assert "2147483647" in res.json()["priority"][0]
    assert not Experiment.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("priority", [2**31 - 1, -2**31])
def test_priority_at_the_int32_bounds_is_accepted(auth_api, priority):
    res = post(auth_api, {**BODY, "priority": priority})
    assert res.status_code == 201, res.content
    assert res.json()["priority"] == priority


@pytest.mark.django_db
def test_the_domain_checks_the_priority_range_for_every_caller():
    with pytest.raises(ValidationFailed) as info:
        exp_create(creator=UserFactory(), name="x", cluster_name="local", exp_type="t",
                   role_to_task_spec={"main": task_spec()}, priority=2**31)
    assert "2147483647" in info.value.errors["priority"][0]


@pytest.mark.django_db
@pytest.mark.parametrize("spec,field", [
    ({"replica": 2**63}, "replica"), ({"replica": 1025}, "replica"),
    ({"device_count": 2**64}, "device_count"), ({"device_count": 4097}, "device_count")])
def test_task_spec_integers_out_of_range_are_400(auth_api, spec, field):
    res = post(auth_api, with_spec(**spec))
    assert res.status_code == 400
    assert f"role_to_task_spec.main.{field}" in res.json()


# -- 2. deep JSON, lone surrogates, out-of-range timestamps ----------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("depth", [33, 2000, 100_000])
def test_deeply_nested_body_is_a_400_naming_the_depth(auth_api, depth):
    res = post_raw(auth_api, "[" * depth + "]" * depth)
    assert res.status_code == 400
    assert res.json()["code"] == "parse_error" and "32 levels" in res.json()["detail"]


@pytest.mark.django_db
def test_deeply_nested_task_spec_is_a_400(auth_api):
    deep = "[" * 100_000 + "]" * 100_000
    text = json.dumps(BODY).replace('"echo hi"', deep)
    res = post_raw(auth_api, text)
    assert res.status_code == 400 and "levels" in res.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("text", [
    '{"name": "a", "name": "b"}',
    '{"role_to_task_spec": {"main": {"command": "x"}, "main": {"command": "y"}}}',
])
def test_duplicate_keys_are_refused(auth_api, text):
    res = post_raw(auth_api, text)
    assert res.status_code == 400 and "appears twice" in res.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("text", ['{"priority": NaN}', '{"priority": Infinity}'])
def test_nan_and_infinity_are_refused(auth_api, text):
    res = post_raw(auth_api, text)
    assert res.status_code == 400 and res.json()["code"] == "parse_error"


SURROGATE = "\\ud800"
SURROGATE_BODIES = [
    ("command", '{"command": "echo %s"}' % SURROGATE, "main.command"),
    ("role", '{"r%s": {"command": "x"}}' % SURROGATE, "role_to_task_spec"),
    ("env name", '{"command": "x", "envs": {"A%s": "1"}}' % SURROGATE, "envs"),
    ("env value", '{"command": "x", "envs": {"A": "%s"}}' % SURROGATE, "envs.A"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("what,spec,where", SURROGATE_BODIES)
def test_lone_surrogates_in_task_specs_are_400(auth_api, what, spec, where):
    body = json.dumps(BODY)
    if what == "role":
        body = body.replace('{"main": {"command": "echo hi", "replica": 1}}', spec)
    else:
        body = body.replace('{"command": "echo hi", "replica": 1}', spec)
    res = post_raw(auth_api, body)
    assert res.status_code == 400, res.content
    assert "surrogate" in res.json()["detail"] and where in res.json()["detail"]
    assert not Experiment.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["name", "config", "cluster_name", "exp_type"])
def test_lone_surrogates_in_top_level_strings_are_400(auth_api, field):
    body = json.dumps({**BODY, field: "PLACEHOLDER"}).replace("PLACEHOLDER", SURROGATE)
    res = post_raw(auth_api, body)
    assert res.status_code == 400 and field in res.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["command", "env", "config", "image"])
def test_the_domain_refuses_surrogates_for_every_caller(where):
    spec = task_spec()
    config = "a: 1\n"
    if where == "command":
        spec["command"] = "echo \ud800"
    elif where == "env":
        spec["envs"] = {"A": "\udfff"}
    elif where == "image":
        spec["image"] = "img\ud800"
    else:
        config = "\ud800"
    with pytest.raises(ValidationFailed) as info:
        exp_create(creator=UserFactory(), name="x", cluster_name="local", exp_type="t",
                   role_to_task_spec={"main": spec}, config=config)
    assert "surrogate" in str(info.value)
    json.dumps(info.value.errors).encode("utf-8")  # the error itself can be sent


@pytest.mark.django_db(transaction=True)
def test_grpc_deep_json_surrogates_and_duplicates_are_invalid_argument(stubs):
    UserFactory(email="carol@example.com")
    for text, needle in [("[" * 100_000 + "]" * 100_000, "levels"),
                         ('{"main": {"command": "echo \\ud800"}}', "surrogate"),
                         ('{"main": {"command": "a"}, "main": {"command": "b"}}', "twice")]:
        req = experiment_pb2.CreateExpReq(name="b", cluster_name="local", exp_type="t",
                                          role_to_task_spec_json=text,
                                          creator_email="carol@example.com")
        with pytest.raises(grpc.RpcError) as info:
            stubs.exps.CreateExp(req, metadata=stubs.md, timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "role_to_task_spec_json" in info.value.details() and needle in \
            info.value.details()
    assert not Experiment.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("seconds,nanos", [
    (-62_135_596_801, 0), (253_402_300_800, 0), (-10**15, 0), (0, -1), (0, 10**9)])
def test_grpc_updated_since_out_of_range_is_invalid_argument(stubs, seconds, nanos):
    req = common_pb2.CommonListReq(updated_since=Timestamp(seconds=seconds, nanos=nanos))
    for call in (stubs.exps.ListExps, stubs.jobs.ListJobs):
        with pytest.raises(grpc.RpcError) as info:
            call(req, metadata=stubs.md, timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "updated_since" in json.loads(dict(info.value.trailing_metadata())
                                             [ERROR_FIELDS_KEY])


# -- 3. the body size -------------------------------------------------------------------------

@pytest.mark.django_db
def test_body_over_the_limit_is_a_json_413(auth_api, settings):
    big = json.dumps({**BODY, "config": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})
    res = post_raw(auth_api, big)
    assert res.status_code == 413
    assert res["Content-Type"] == "application/json"
    assert res.json()["code"] == "too_large"
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in res.json()["detail"]


def test_the_parser_stops_reading_at_the_limit(settings):
    from io import BytesIO

    from core.http.parsers import RequestTooLarge, StrictJSONParser

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    stream = BytesIO(b"[" + b" " * 5000 + b"]")
    with pytest.raises(RequestTooLarge):
        StrictJSONParser().parse(stream, parser_context={})
    assert stream.tell() == 1001


def test_the_largest_valid_experiment_fits_in_the_body_limit(settings):
    from django.conf import settings as live

    # TaskSpec text and config, with room for JSON quoting and the keys of 64 roles.
    assert MAX_TASK_SPECS_BYTES + live.FALCON_CONFIG_MAX_BYTES + 1024 * 1024 \
        <= live.DATA_UPLOAD_MAX_MEMORY_SIZE


# -- 4. limits of one experiment as a whole ----------------------------------------------------

@pytest.mark.django_db
def test_environment_over_one_mib_is_refused_with_the_excess(auth_api):
    envs = {f"V{i}": "x" * 60_000 for i in range(40)}
    res = post(auth_api, with_spec(envs=envs))
    assert res.status_code == 400, res.content
    message = res.json()["role_to_task_spec.main"][0]
    assert str(MAX_ENVIRONMENT_BYTES) in message and "bytes over" in message


@pytest.mark.django_db
def test_environment_counts_the_config(auth_api, settings):
    envs = {f"V{i}": "x" * 60_000 for i in range(16)}
    ok = post(auth_api, with_spec(envs=envs))
    assert ok.status_code == 201, ok.content
    res = post(auth_api, {**with_spec(envs=envs), "name": "b2",
                          "config": "y" * settings.FALCON_CONFIG_MAX_BYTES})
    assert res.status_code == 400 and "role_to_task_spec.main" in res.json()


@pytest.mark.django_db
def test_too_many_roles_is_400(auth_api):
    specs = {f"r{i}": {"command": "x"} for i in range(MAX_ROLES + 1)}
    res = post(auth_api, {**BODY, "role_to_task_spec": specs})
    assert res.status_code == 400
    assert "1 too many" in res.json()["role_to_task_spec"][0]
    specs.pop("r0")
    assert post(auth_api, {**BODY, "role_to_task_spec": specs}).status_code == 201


@pytest.mark.django_db
def test_too_many_replicas_in_all_is_400(auth_api):
    specs = {f"r{i}": {"command": "x", "replica": 1024} for i in range(5)}
    res = post(auth_api, {**BODY, "role_to_task_spec": specs})
    assert res.status_code == 400
    over = 5 * 1024 - MAX_TOTAL_REPLICAS
    assert f"{over} too many" in res.json()["role_to_task_spec"][0]


@pytest.mark.django_db
def test_create_job_keeps_the_experiment_limits():
    exp = make_exp(roles=[f"r{i}" for i in range(MAX_ROLES)])
    with pytest.raises(ValidationFailed) as info:
        job_create(exp_id=exp.pk, role="extra", task_spec=task_spec())
    assert "too many" in info.value.errors["task_spec"][0]
    small = make_exp(name="small", config="c" * 100_000)
    with pytest.raises(ValidationFailed) as info:
        job_create(exp_id=small.pk, role="big",
                   task_spec=task_spec(envs={f"V{i}": "x" * 60_000 for i in range(16)}))
    assert "bytes over" in info.value.errors["task_spec"][0]


# -- 5. no silent leniency ------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("extra", [{"creator": "mallory@example.com"}, {"status": "Succeeded"},
                                   {"id": 7}, {"": 1}])
def test_unknown_fields_are_refused(auth_api, extra):
    res = post(auth_api, {**BODY, **extra})
    assert res.status_code == 400
    key = next(iter(extra)) or '""'
    assert "is not a field" in res.json()[key][0]
    assert not Experiment.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("patch,field", [
    ({"name": 123}, "name"), ({"priority": "5"}, "priority"), ({"priority": True}, "priority"),
    ({"priority": 5.0}, "priority"), ({"config": 1}, "config"), ({"exp_type": False}, "exp_type"),
])
def test_types_are_not_coerced(auth_api, patch, field):
    res = post(auth_api, {**BODY, **patch})
    assert res.status_code == 400 and field in res.json(), res.content


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["0", "-1", "abc", "100000", "1.5", "9" * 5000])  # "": empty
def test_bad_page_size_is_400_with_the_range(auth_api, value):
    res = auth_api.get("/api/v1/exps", {"page_size": value})
    assert res.status_code == 400
    assert "from 1 to 500" in res.json()["page_size"][0]


@pytest.mark.django_db
def test_good_page_size_is_used(auth_api, alice):
    for i in range(3):
        make_exp(creator=alice, name=f"e{i}")
    res = auth_api.get("/api/v1/exps", {"page_size": "2"})
    assert res.status_code == 200 and len(res.json()["results"]) == 2


@pytest.mark.django_db
@pytest.mark.parametrize("param", ["ids", "limit", "statuses", "page"])
def test_unknown_query_parameters_are_refused(auth_api, param):
    res = auth_api.get("/api/v1/exps", {param: "1"})
    assert res.status_code == 400
    message = res.json()[param][0]
    assert "is not a query parameter" in message
    for accepted in ("status", "id", "ordering", "page_size", "cursor", "format"):
        assert accepted in message


@pytest.mark.django_db
@pytest.mark.parametrize("query,param", [
    ("search=llama&search=my", "search"), ("creator=a@x.io&creator=b@x.io", "creator"),
    ("page_size=1&page_size=2", "page_size"), ("ordering=name&ordering=-name", "ordering"),
    ("updated_since=2026-01-01&updated_since=2026-02-01", "updated_since"),
])
def test_a_single_value_parameter_given_twice_is_refused(auth_api, query, param):
    """Read as its last value, the other would be dropped without a word."""
    res = auth_api.get(f"/api/v1/exps?{query}")
    assert res.status_code == 400 and "more than once" in res.json()[param][0]


@pytest.mark.django_db
def test_list_filters_take_several_values(auth_api, alice):
    make_exp(creator=alice, name="a")
    res = auth_api.get("/api/v1/exps?status=Created&status=Running&id=1&id=2&label=a&label=b")
    assert res.status_code == 200


@pytest.mark.django_db
def test_known_query_parameters_are_accepted(auth_api):
    res = auth_api.get("/api/v1/exps", {"id": "1", "status": "Created", "ordering": "-id",
                                        "page_size": "5", "search": "x", "format": "json"})
    assert res.status_code == 200, res.content


@pytest.mark.django_db
def test_huge_ids_in_filters_are_400_not_500(auth_api):
    res = auth_api.get("/api/v1/exps", {"id": str(2**63)})
    assert res.status_code == 400 and "id" in res.json()


@pytest.mark.django_db
def test_huge_id_in_the_path_is_400_not_500(auth_api):
    assert auth_api.get(f"/api/v1/exps/{2**63}").status_code == 400
    assert auth_api.get(f"/api/v1/exps/{10**40}").status_code == 400
    assert auth_api.get(f"/api/v1/exps/{2**63 - 1}").status_code == 404  # an id, no such row


# -- 6. messages that say what is wrong and what to do -----------------------------------------

@pytest.mark.django_db
def test_deleting_an_aborting_experiment_says_to_wait(auth_api, alice):
    exp = make_exp(creator=alice)
    assert auth_api.post(f"/api/v1/exps/{exp.pk}/abort").status_code == 200
    res = auth_api.delete(f"/api/v1/exps/{exp.pk}")
    assert res.status_code == 409
    assert "wait until it is Aborted" in res.json()["detail"]
    assert "Abort it first" not in res.json()["detail"]
    with pytest.raises(Exception) as info:
        exp_delete(exp_id=exp.pk, actor=alice)
    assert "wait until it is Aborted" in str(info.value)


@pytest.mark.django_db
def test_empty_role_name_has_a_clear_path(auth_api):
    res = post(auth_api, {**BODY, "role_to_task_spec": {"": {"command": "x"}}})
    assert res.status_code == 400
    assert 'role_to_task_spec.""' in res.json()
    assert "is empty" in res.json()['role_to_task_spec.""'][0]


@pytest.mark.django_db
@pytest.mark.parametrize("value,needle", [([{"command": "x"}], "got a list"),
                                           ("main", "got a str"), ({}, "is empty")])
def test_role_to_task_spec_of_the_wrong_kind_says_so(auth_api, value, needle):
    res = post(auth_api, {**BODY, "role_to_task_spec": value})
    assert res.status_code == 400
    message = res.json()["role_to_task_spec"][0]
    assert needle in message and "is required" not in message


@pytest.mark.django_db
def test_moving_back_to_the_initial_state_says_it_is_initial():
    from core.errors import InvalidTransition

    exp = make_exp()
    exp_update_status(exp_id=exp.pk, status="Running")
    with pytest.raises(InvalidTransition) as info:
        exp_update_status(exp_id=exp.pk, status="Created")
    assert "only the initial state" in str(info.value)
    assert "reachable only from ." not in str(info.value)


@pytest.mark.django_db(transaction=True)
def test_grpc_create_job_with_an_empty_role_is_named(stubs):
    exp = make_exp()
    req = job_pb2.CreateJobReq(exp_id=exp.pk, role="", task_spec_json='{"command": "x"}')
    with pytest.raises(grpc.RpcError) as info:
        stubs.jobs.CreateJob(req, metadata=stubs.md, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "is empty" in info.value.details()


@pytest.mark.django_db
@pytest.mark.parametrize("specs,field", [
    ({"main\n": {"command": "x"}}, 'role_to_task_spec."main\\n"'),
    ({"main": {"command": "x", "envs": {"FOO\n": "1"}}}, 'role_to_task_spec.main.envs."FOO\\n"'),
    ({"main": {"command": "x", "envs": {"F" * 257: "1"}}}, "role_to_task_spec.main.envs.FFF"),
])
def test_names_are_matched_whole(auth_api, specs, field):
    res = post(auth_api, {**BODY, "role_to_task_spec": specs})
    assert res.status_code == 400
    assert any(key.startswith(field) for key in res.json()), res.json()


def test_the_openapi_schema_states_the_limits():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    props = schema["components"]["schemas"]["ExpCreateInputRequest"]["properties"]
    assert props["priority"]["maximum"] == 2**31 - 1 and props["priority"]["minimum"] == -2**31
    assert props["exp_type"]["maxLength"] == 63 and "pattern" in props["name"]
    assert props["role_to_task_spec"]["maxProperties"] == MAX_ROLES
    task = props["role_to_task_spec"]["additionalProperties"]
    assert task["properties"]["replica"]["maximum"] == 1024


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.one_of(st.characters(), st.characters(categories=["Cs"])),
               max_size=40))
def test_the_surrogate_check_answers_as_drfs_own(text):
    """`ProhibitSurrogates` (one regex search) refuses exactly what DRF's validator refuses,
    with the same message: the first surrogate's code point."""
    def answer(validator):
        try:
            validator(text)
        except serializers.ValidationError as exc:
            return exc.detail
        return None

    assert answer(ProhibitSurrogates()) == answer(ProhibitSurrogateCharactersValidator())


def test_a_string_field_checks_surrogates_with_the_regex_validator():
    field = StrictCharField()
    assert not any(type(v) is ProhibitSurrogateCharactersValidator for v in field.validators)
    with pytest.raises(serializers.ValidationError) as info:
        field.run_validation("ok \udc80 \ud800")
    assert info.value.detail == ["Surrogate characters are not allowed: U+DC80."]
