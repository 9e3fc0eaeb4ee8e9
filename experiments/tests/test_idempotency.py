"""Safe retries of CreateExp: an idempotency key makes a repeat return the first experiment,
never a second one, also when the repeats race on separate connections."""
from __future__ import annotations

import pytest

from accounts.tests.factories import UserFactory
from core.errors import ValidationFailed
from experiments.models import Experiment, IdempotencyKey
from experiments.idempotency import IdempotencyKeyReused
from experiments.services import exp_create, exp_delete, exp_update_status
from experiments.tests.factories import task_spec
from jobs.models import Job
from tests.test_concurrency import race

BODY = {"name": "e", "cluster_name": "local", "exp_type": "profiling",
        "role_to_task_spec": {"main": {"command": "python x.py"}}, "config": "a: 1\n"}


def create(user, key, **overrides):
    fields = {**BODY, "role_to_task_spec": {"main": task_spec(command="python x.py")}}
    fields.update(overrides)
    return exp_create(creator=user, idempotency_key=key, **fields)


@pytest.mark.django_db
def test_a_repeated_key_returns_the_first_experiment(user):
    first = create(user, "key-1")
    again = create(user, "key-1")
    assert not first.replayed and again.replayed and again.pk == first.pk
    assert [job.role for job in again.created_jobs] == ["main"]
    assert Experiment.objects.count() == 1 and Job.objects.count() == 1


@pytest.mark.django_db
def test_keys_are_per_creator_and_absent_keys_never_match(user):
    other = UserFactory()
    assert create(user, "k").pk != create(other, "k").pk
    assert create(user, None).pk != create(user, None).pk
    assert Experiment.objects.count() == 4


@pytest.mark.django_db
def test_the_same_key_with_another_body_is_refused(user):
    create(user, "k")
    with pytest.raises(IdempotencyKeyReused, match="Idempotency-Key 'k'") as info:
        create(user, "k", priority=5)
    assert info.value.http_status == 409
    assert Experiment.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", " ", "x" * 256, "é", "a\nb", "a\x00"])
def test_a_malformed_key_is_refused(user, key):
    with pytest.raises(ValidationFailed) as info:
        create(user, key)
    assert "idempotency_key" in info.value.errors


@pytest.mark.django_db
def test_a_deleted_experiment_frees_its_key(user):
    first = create(user, "k")
    exp_update_status(exp_id=first.pk, status="Running")
    exp_update_status(exp_id=first.pk, status="Failed")
    exp_delete(exp_id=first.pk, actor=user)
    assert not IdempotencyKey.objects.exists()
    assert create(user, "k").pk != first.pk


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_make_one_experiment():
    user = UserFactory()
    for attempt in range(5):
        key = f"race-{attempt}"
        outcomes = race(*[lambda: create(user, key) for _ in range(3)])
        assert all(isinstance(o, Experiment) for o in outcomes), outcomes
        assert len({o.pk for o in outcomes}) == 1, outcomes
        assert sorted(o.replayed for o in outcomes) == [False, True, True], outcomes
    assert Experiment.objects.count() == 5 and Job.objects.count() == 5


# -- HTTP ---------------------------------------------------------------------------------------

def test_http_idempotency_key_header(auth_api, user):
    first = auth_api.post("/api/v1/exps", BODY, format="json", HTTP_IDEMPOTENCY_KEY="abc")
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    again = auth_api.post("/api/v1/exps", BODY, format="json", HTTP_IDEMPOTENCY_KEY="abc")
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["jobs"] == first.json()["jobs"]
    other = auth_api.post("/api/v1/exps", {**BODY, "name": "f"}, format="json",
                          HTTP_IDEMPOTENCY_KEY="abc")
    assert other.status_code == 409
    assert other.json()["code"] == "idempotency_key_reused"
    assert "Idempotency-Key" in other.json()["detail"]
    assert Experiment.objects.count() == 1


@pytest.mark.django_db
def test_a_key_in_another_case_is_another_key(user):
    """Idempotency keys compare exactly on every database (MariaDB's default collation made
    `K-1` replay or refuse the experiment of `k-1`)."""
    first = create(user, "k-1", name="first")
    second = create(user, "K-1", name="second")
    assert first.pk != second.pk and not second.replayed
    assert create(user, "K-1", name="second").pk == second.pk
