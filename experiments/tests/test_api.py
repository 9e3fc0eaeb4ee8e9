"""The HTTP API over the wire of DRF's test client, with real local-issuer JWTs."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from experiments.models import Experiment
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp, task_spec
from jobs.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(db):
    """The user `auth_api` authenticates as (the local issuer's `sub` for her email)."""
    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory

    return UserFactory(user_id=local_subject("alice@example.com"), email="alice@example.com")

BODY = {"name": "model-profiling-001", "cluster_name": "tpu-v5p-cluster-a",
        "exp_type": "profiling",
        "role_to_task_spec": {"main": {"command": "python -u bench.py", "replica": 1,
                                       "image": "gcr.io/primatrix/sglang_jax:dev",
                                       "device_count": 8, "device_type": "tpu-v5p",
                                       "device_topo": "2x2x2",
                                       "envs": {"JAX_PLATFORMS": "tpu", "LOG_LEVEL": "info"}}},
        "config": "model: qwen/qwen3-32b\nrandom_input_len: 16384 \n\n"}


def test_create_returns_exp_with_jobs_and_artifact(auth_api):
    res = auth_api.post("/api/v1/exps", BODY, format="json")
    assert res.status_code == 201, res.content
    data = res.json()
    assert data["status"] == "Created" and data["config"] == BODY["config"]
    assert data["creator"] == "alice@example.com" and data["creator_id"]
    assert [j["role"] for j in data["jobs"]] == ["main"]
    assert data["jobs"][0]["status"] == "Pending"
    assert data["artifact"]["status"] == "Created"
    assert Experiment.objects.get().config == BODY["config"]


def test_create_replies_what_get_reads_without_reading_it_back(auth_api, alice,
                                                              django_assert_max_num_queries):
    roles = {"worker": BODY["role_to_task_spec"]["main"],
             "main": {"command": "python -u bench.py", "replica": 2}}
    # The token's user (writes always read it), then the transaction's three INSERTs.
    with django_assert_max_num_queries(6) as ctx:
        res = auth_api.post("/api/v1/exps", {**BODY, "role_to_task_spec": roles}, format="json")
    assert res.status_code == 201, res.content
    assert [q["sql"].split()[0].upper() for q in ctx.captured_queries].count("SELECT") == 1
    created = res.json()
    assert [job["role"] for job in created["jobs"]] == ["main", "worker"]
    assert created == auth_api.get(f"/api/v1/exps/{created['id']}").json()


@pytest.mark.parametrize("patch,field", [
    ({"name": None}, "name"),
    ({"role_to_task_spec": {}}, "role_to_task_spec"),
    ({"role_to_task_spec": {"main": task_spec(replica=0)}}, "role_to_task_spec.main.replica"),
    ({"role_to_task_spec": {"Bad_Role": task_spec()}}, "role_to_task_spec.Bad_Role"),
    ({"role_to_task_spec": {"main": task_spec(envs={"X": [1]})}},
     "role_to_task_spec.main.envs.X"),
    ({"priority": "high"}, "priority"),
])
def test_create_bad_input_is_400_naming_the_field(auth_api, patch, field):
    body = {k: v for k, v in {**BODY, **patch}.items() if v is not None}
    res = auth_api.post("/api/v1/exps", body, format="json")
    assert res.status_code == 400
    assert field in res.json()
    assert not Experiment.objects.exists()


def test_create_missing_body_fields(auth_api):
    res = auth_api.post("/api/v1/exps", {}, format="json")
    assert res.status_code == 400
    assert {"name", "cluster_name", "exp_type", "role_to_task_spec"} <= set(res.json())


def test_create_config_too_large_is_413(auth_api):
    res = auth_api.post("/api/v1/exps", {**BODY, "config": "x" * (1024 * 1024 + 1)},
                        format="json")
    assert res.status_code == 413
    assert "config" in res.json() and res.json()["code"] == "too_large"
    assert not Experiment.objects.exists()


def test_create_malformed_json_is_400(auth_api):
    res = auth_api.generic("POST", "/api/v1/exps", "{not json", content_type="application/json")
    assert res.status_code == 400


def test_get_and_404(auth_api, user):
    exp = make_exp(creator=user)
    res = auth_api.get(f"/api/v1/exps/{exp.pk}")
    assert res.status_code == 200 and res.json()["id"] == exp.pk
    res = auth_api.get("/api/v1/exps/999999")
    assert res.status_code == 404 and res.json()["code"] == "not_found"
    assert "999999" in res.json()["detail"]


def test_abort_then_idempotent_then_conflict(auth_api, alice):
    exp = make_exp(creator=alice)
    res = auth_api.post(f"/api/v1/exps/{exp.pk}/abort")
    assert res.status_code == 200 and res.json()["status"] == "Aborting"
    assert res.json()["jobs"][0]["status"] == "Aborting"
    assert auth_api.post(f"/api/v1/exps/{exp.pk}/abort").status_code == 200
    done = make_exp(creator=alice, name="done")
    exp_update_status(exp_id=done.pk, status="Succeeded")
    res = auth_api.post(f"/api/v1/exps/{done.pk}/abort")
    assert res.status_code == 409 and res.json()["code"] == "conflict"
    assert auth_api.post("/api/v1/exps/999999/abort").status_code == 404


def test_delete_only_terminal(auth_api, alice):
    exp = make_exp(creator=alice)
    res = auth_api.delete(f"/api/v1/exps/{exp.pk}")
    assert res.status_code == 409 and "Abort it first" in res.json()["detail"]
    exp_update_status(exp_id=exp.pk, status="Failed")
    assert auth_api.delete(f"/api/v1/exps/{exp.pk}").status_code == 204
    assert not Job.objects.exists()
    assert auth_api.delete(f"/api/v1/exps/{exp.pk}").status_code == 404


def test_list_filters_search_ordering(auth_api, user):
    from accounts.tests.factories import UserFactory

    bob = UserFactory(email="bob@example.com")
    a = make_exp(creator=user, name="resnet-bench", exp_type="benchmark", cluster_name="gpu-a")
    b = make_exp(creator=bob, name="llama-profile", exp_type="profiling", cluster_name="tpu-a")
    c = make_exp(creator=bob, name="llama-bench", exp_type="benchmark", cluster_name="tpu-a")
    exp_update_status(exp_id=c.pk, status="Running")

    def ids(query):
        res = auth_api.get(f"/api/v1/exps?{query}")
        assert res.status_code == 200, res.content
        return [row["id"] for row in res.json()["results"]]

    assert ids("") == [c.pk, b.pk, a.pk]
    assert ids("status=Running") == [c.pk]
    assert ids("status=Running&status=Created") == [c.pk, b.pk, a.pk]
    assert ids("exp_type=benchmark") == [c.pk, a.pk]
    assert ids("cluster_name=tpu-a") == [c.pk, b.pk]
    assert ids("creator=bob@example.com") == [c.pk, b.pk]
    assert ids(f"creator={bob.user_id}") == [c.pk, b.pk]
    assert ids("search=LLAMA") == [c.pk, b.pk]
    assert ids("ordering=name") == [c.pk, b.pk, a.pk]
    assert ids("ordering=created_at") == [a.pk, b.pk, c.pk]
    res = auth_api.get("/api/v1/exps?status=Exploded")
    assert res.status_code == 400 and "status" in res.json()


def test_list_cursor_pages_have_no_gaps_or_duplicates(auth_api, user):
    made = [make_exp(creator=user, name=f"e{i}").pk for i in range(7)]
    seen, url = [], "/api/v1/exps?page_size=3"
    while url:
        body = auth_api.get(url).json()
        seen += [row["id"] for row in body["results"]]
        url = body["next"]
    assert sorted(seen) == sorted(made) and len(seen) == len(set(seen))


def test_list_runs_a_constant_number_of_queries(auth_api, user):
    auth_api.get("/api/v1/exps")  # registers the caller first; that insert happens once

    def count(n):
        Experiment.objects.all().delete()
        for i in range(n):
            make_exp(creator=user, name=f"q{i}", roles=("a", "b"))
        with CaptureQueriesContext(connection) as ctx:
            res = auth_api.get("/api/v1/exps?page_size=100")
        assert res.status_code == 200 and len(res.json()["results"]) == n
        return len(ctx.captured_queries)

    assert count(2) == count(20)


def test_every_endpoint_needs_authentication(api, user):
    exp = make_exp(creator=user)
    for method, url in [("get", "/api/v1/exps"), ("post", "/api/v1/exps"),
                        ("get", f"/api/v1/exps/{exp.pk}"), ("delete", f"/api/v1/exps/{exp.pk}"),
                        ("post", f"/api/v1/exps/{exp.pk}/abort")]:
        res = getattr(api, method)(url)
        assert res.status_code == 401, (method, url)
    assert Experiment.objects.get(pk=exp.pk).status == "Created"


def test_schema_and_docs_are_served(api):
    assert api.get("/api/schema/").status_code == 200
    assert api.get("/api/docs/").status_code == 200
    assert api.get("/healthz").status_code == 200
    assert api.get("/readyz").status_code == 200


def test_openapi_schema_validates_without_warnings():
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null")


def test_every_error_body_has_a_code(auth_api):
    from rest_framework.test import APIClient

    assert APIClient().get("/api/v1/exps").json()["code"] == "not_authenticated"
    res = auth_api.generic("POST", "/api/v1/exps", "{bad", content_type="application/json")
    assert res.json()["code"] == "parse_error"
    res = auth_api.post("/api/v1/exps", "name=x", content_type="application/x-www-form-urlencoded")
    assert res.status_code == 415 and res.json()["code"] == "unsupported_media_type"
    assert auth_api.put("/api/v1/exps").json()["code"] == "method_not_allowed"
    assert auth_api.post("/api/v1/exps", {}, format="json").json()["code"] == "invalid"


def test_unknown_api_path_is_a_json_404(auth_api):
    res = auth_api.get("/api/v1/nope")
    assert res.status_code == 404 and res.json()["code"] == "not_found"


def test_an_exp_id_that_is_not_a_number_is_a_json_400(auth_api):
    res = auth_api.get("/api/v1/exps/-5")
    assert res.status_code == 400 and res.json()["code"] == "invalid"
    assert "exp_id" in res.json()


def test_bad_cursor_and_ordering_are_400(auth_api, user):
    make_exp(creator=user)
    res = auth_api.get("/api/v1/exps?cursor=garbage")
    assert res.status_code == 400 and "cursor" in res.json()
    res = auth_api.get("/api/v1/exps?ordering=bogus")
    assert res.status_code == 400 and "bogus" in res.json()["ordering"][0]
    assert auth_api.get("/api/v1/exps?ordering=-name,id").status_code == 200


def test_swagger_ui_is_served_without_a_cdn(api):
    page = api.get("/api/docs/").content.decode()
    assert "cdn.jsdelivr" not in page and "swagger-ui" in page


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method,path,status", [
    ("DELETE", "/api/v1/exps/%C2%84", 400), ("POST", "/api/v1/exps/x/abort", 400),
    ("TRACE", "/api/v1/exps/0", 405), ("PUT", "/api/v1/exps/0/abort", 405),
])
def test_a_bad_id_in_the_path_answers_json_over_a_real_server(live_server, token_for, method,
                                                              path, status):
    """Through a real server (CSRF middleware on, a session cookie present): a bad id is a JSON
    400 for the route's own methods and 405 for others, never Django's HTML 403."""
    import httpx

    res = httpx.request(method, live_server.url + path, headers={
        "Authorization": f"Bearer {token_for('alice@example.com')}",
        "Cookie": "sessionid=abc"})
    assert res.status_code == status, res.text
    assert res.headers["content-type"] == "application/json"


def test_input_serializers_built_once_share_no_state():
    """`StrictSerializer` copies fields built once per class: each instance binds its own and
    one's errors are not another's."""
    from experiments.api.serializers import ExpCreateInputSerializer

    good = {"name": "ok", "cluster_name": "local", "exp_type": "benchmark",
            "role_to_task_spec": {"main": {"command": "true"}}}
    bad = ExpCreateInputSerializer(data={**good, "name": "-bad", "priority": "1"})
    fine = ExpCreateInputSerializer(data=good)
    assert bad.fields["name"] is not fine.fields["name"]
    assert bad.fields["name"].parent is bad and fine.fields["name"].parent is fine
    assert not bad.is_valid() and fine.is_valid()
    assert set(bad.errors) == {"name", "priority"} and not fine.errors
    assert fine.validated_data["priority"] == -1 and fine.validated_data["labels"] == {}
