"""CreateExp, AbortExp, DeleteExp: the service layer that every interface calls."""
from __future__ import annotations

import re

import pytest
from django.db import IntegrityError

from artifacts.models import Artifact
from experiments.models import Experiment
from experiments.services import exp_abort, exp_create, exp_delete, exp_update_status
from experiments.tests.factories import make_exp, task_spec
from core.errors import Conflict, NotFound, PayloadTooLarge, ValidationFailed
from jobs.models import Job
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db


def create(user, **overrides):
    args = dict(creator=user, name="model-profiling-001", cluster_name="tpu-v5p-cluster-a",
                exp_type="profiling", role_to_task_spec={"main": task_spec()}, config="x: 1\n")
    args.update(overrides)
    return exp_create(**args)


def test_create_writes_exp_jobs_and_artifact(user, settings):
    config = "model: qwen/qwen3-32b\n# comment kept\n  odd indent: ok\nunicode: 试验 ✓\n"
    exp = create(user, role_to_task_spec={"main": task_spec(replica=2), "worker": task_spec()},
                 config=config)
    exp.refresh_from_db()
    assert exp.status == "Created" and exp.config == config
    assert re.fullmatch(re.escape(f"{settings.FALCON_ARTIFACT_ROOT}/model-profiling-001-")
                        + "[0-9a-f]{16}", exp.artifact_path)
    jobs = {j.role: j for j in exp.jobs.all()}
    assert set(jobs) == {"main", "worker"}
    assert all(j.status == "Pending" for j in jobs.values())
    assert jobs["main"].task_spec["replica"] == 2
    assert jobs["worker"].artifact_path == f"{exp.artifact_path}/worker"
    assert exp.artifact.status == "Created" and exp.artifact.path == exp.artifact_path


def test_create_gives_each_experiment_its_own_folder_even_under_the_same_name(user):
    first, second = create(user), create(user)
    assert first.artifact_path != second.artifact_path
    assert Artifact.objects.get(experiment=second).path == second.artifact_path


def test_create_is_three_inserts_in_one_transaction(user, django_assert_max_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    roles = {"main": task_spec(), "worker": task_spec(), "eval": task_spec()}
    with CaptureQueriesContext(connection) as ctx, django_assert_max_num_queries(5):
        exp = create(user, role_to_task_spec=roles)
    statements = [q["sql"].split()[0].upper() for q in ctx.captured_queries]
    # The test runs inside a transaction, so atomic() is a savepoint here, BEGIN/COMMIT live.
    assert statements == ["SAVEPOINT", "INSERT", "INSERT", "INSERT", "RELEASE"]
    assert not any(q["sql"].upper().startswith(("UPDATE", "SELECT")) for q in ctx.captured_queries)
    # The returned experiment carries what a reply shows, as stored.
    assert [job.role for job in exp.created_jobs] == ["eval", "main", "worker"]
    assert all(job.pk for job in exp.created_jobs) and exp.artifact.pk
    stored = Experiment.objects.get(pk=exp.pk)
    assert stored.artifact_path == exp.artifact_path
    assert {j.pk: j.artifact_path for j in stored.jobs.all()} == {
        j.pk: f"{exp.artifact_path}/{j.role}" for j in exp.created_jobs}


def test_create_normalises_envs(user):
    exp = create(user, role_to_task_spec={"main": task_spec(envs={
        "LOG_LEVEL": "info", "STEPS": 10, "RATIO": 1.5, "DEBUG": True})})
    assert exp.jobs.get().task_spec["envs"] == {
        "LOG_LEVEL": "info", "STEPS": "10", "RATIO": "1.5", "DEBUG": "true"}


@pytest.mark.parametrize("overrides,field", [
    ({"name": ""}, "name"),
    ({"name": "has space"}, "name"),
    ({"cluster_name": None}, "cluster_name"),
    ({"exp_type": "Profiling!"}, "exp_type"),
    ({"role_to_task_spec": {}}, "role_to_task_spec"),
    ({"role_to_task_spec": ["main"]}, "role_to_task_spec"),
    ({"role_to_task_spec": {"Main_Role": task_spec()}}, "role_to_task_spec.Main_Role"),
    ({"role_to_task_spec": {"a" * 64: task_spec()}}, "role_to_task_spec." + "a" * 64),
    ({"role_to_task_spec": {"main": "echo"}}, "role_to_task_spec.main"),
    ({"role_to_task_spec": {"main": {"replica": 1}}}, "role_to_task_spec.main.command"),
    ({"role_to_task_spec": {"main": task_spec(replica=0)}}, "role_to_task_spec.main.replica"),
    ({"role_to_task_spec": {"main": task_spec(replica="2")}}, "role_to_task_spec.main.replica"),
    ({"role_to_task_spec": {"main": task_spec(replica=True)}}, "role_to_task_spec.main.replica"),
    ({"role_to_task_spec": {"main": task_spec(envs=[])}}, "role_to_task_spec.main.envs"),
    ({"role_to_task_spec": {"main": task_spec(envs="")}}, "role_to_task_spec.main.envs"),
    ({"role_to_task_spec": {"main": task_spec(envs=0)}}, "role_to_task_spec.main.envs"),
    ({"role_to_task_spec": {"main": task_spec(device_count=0)}},
     "role_to_task_spec.main.device_count"),
    ({"role_to_task_spec": {"main": task_spec(device_type="tpu-v5p")}},
     "role_to_task_spec.main.device_count"),
    ({"role_to_task_spec": {"main": task_spec(device_topo="2by2")}},
     "role_to_task_spec.main.device_topo"),
    ({"role_to_task_spec": {"main": task_spec(replicas=2)}}, "role_to_task_spec.main.replicas"),
    ({"role_to_task_spec": {"main": task_spec(envs={"1BAD": "x"})}},
     "role_to_task_spec.main.envs.1BAD"),
    ({"role_to_task_spec": {"main": task_spec(envs={"CUSTOM_CONFIG_KEY": "x"})}},
     "role_to_task_spec.main.envs.CUSTOM_CONFIG_KEY"),
    ({"role_to_task_spec": {"main": task_spec(envs={"FALCON_EXP_ID": "1"})}},
     "role_to_task_spec.main.envs.FALCON_EXP_ID"),
    ({"role_to_task_spec": {"main": task_spec(envs={"OPTS": {"a": 1}})}},
     "role_to_task_spec.main.envs.OPTS"),
    ({"role_to_task_spec": {"main": task_spec(envs={"LIST": [1, 2]})}},
     "role_to_task_spec.main.envs.LIST"),
    ({"role_to_task_spec": {"main": task_spec(envs=["A=1"])}}, "role_to_task_spec.main.envs"),
    ({"config": {"model": "x"}}, "config"),
    ({"priority": "high"}, "priority"),
])
def test_create_refuses_bad_input_and_writes_nothing(user, overrides, field):
    with pytest.raises(ValidationFailed) as err:
        create(user, **overrides)
    assert field in err.value.errors
    assert all(msg for msg in err.value.errors[field])
    assert not Experiment.objects.exists() and not Job.objects.exists()
    assert not Artifact.objects.exists()


def test_create_reports_every_bad_field_at_once(user):
    with pytest.raises(ValidationFailed) as err:
        create(user, name="", role_to_task_spec={"main": task_spec(replica=0, envs={"1X": 1})})
    assert {"name", "role_to_task_spec.main.replica",
            "role_to_task_spec.main.envs.1X"} <= set(err.value.errors)


def test_config_over_the_environment_string_limit_is_too_large(user, settings):
    limit = settings.FALCON_CONFIG_MAX_BYTES
    assert len(f"CUSTOM_CONFIG_KEY={'x' * limit}".encode()) + 1 == 128 * 1024  # MAX_ARG_STRLEN
    create(user, config="x" * limit)  # exactly the limit is allowed
    with pytest.raises(PayloadTooLarge) as err:
        create(user, config="é" * (limit // 2 + 1))  # 2 bytes each in UTF-8
    assert "128 KiB" in err.value.errors["config"][0]
    assert Experiment.objects.count() == 1


def test_create_rolls_back_when_a_row_fails(user, monkeypatch):
    """A failure while writing the artifact (the last row) leaves no experiment and no job."""
    from experiments import services

    written = services.insert_one

    def fail(obj, **kwargs):
        if isinstance(obj, Artifact):
            raise IntegrityError("simulated failure writing the artifact row")
        written(obj, **kwargs)

    monkeypatch.setattr(services, "insert_one", fail)
    with pytest.raises(IntegrityError):
        create(user, role_to_task_spec={"a": task_spec(), "b": task_spec()})
    assert not Experiment.objects.exists() and not Job.objects.exists()


def test_abort_moves_exp_and_non_terminal_jobs(user):
    exp = make_exp(creator=user, roles=("a", "b", "c"))
    a, b, c = exp.jobs.order_by("role")
    job_update_status(job_id=a.pk, status="Running")
    job_update_status(job_id=b.pk, status="Failed")
    aborted = exp_abort(exp_id=exp.pk, actor=user)
    assert aborted.status == "Aborting" and aborted.aborting_at is not None
    assert f"Abort requested by {user.email}" in aborted.message
    statuses = dict(exp.jobs.values_list("role", "status"))
    assert statuses == {"a": "Aborting", "b": "Failed", "c": "Aborting"}
    assert all(j.aborting_at for j in exp.jobs.filter(status="Aborting"))


def test_abort_is_idempotent(user):
    exp = make_exp(creator=user)
    first = exp_abort(exp_id=exp.pk, actor=user)
    second = exp_abort(exp_id=exp.pk, actor=user)
    assert second.status == "Aborting" and second.aborting_at == first.aborting_at
    exp_update_status(exp_id=exp.pk, status="Aborted")
    assert exp_abort(exp_id=exp.pk, actor=user).status == "Aborted"


@pytest.mark.parametrize("final", ["Succeeded", "Failed"])
def test_abort_of_finished_exp_conflicts(user, final):
    exp = make_exp(creator=user)
    exp_update_status(exp_id=exp.pk, status=final)
    with pytest.raises(Conflict):
        exp_abort(exp_id=exp.pk, actor=user)
    assert Experiment.objects.get(pk=exp.pk).status == final


def test_abort_unknown(user):
    with pytest.raises(NotFound):
        exp_abort(exp_id=424242, actor=user)


@pytest.mark.parametrize("status", ["Created", "Running", "Aborting"])
def test_delete_refuses_non_terminal(user, status):
    exp = make_exp(creator=user)
    Experiment.objects.filter(pk=exp.pk).update(status=status)  # test set-up only
    with pytest.raises(Conflict):
        exp_delete(exp_id=exp.pk, actor=user)
    assert Experiment.objects.filter(pk=exp.pk).exists() and Job.objects.exists()


@pytest.mark.parametrize("status", ["Succeeded", "Failed", "Aborted"])
def test_delete_removes_exp_jobs_and_artifact(user, status):
    exp = make_exp(creator=user, roles=("a", "b"))
    other = make_exp(creator=user, name="other")
    Experiment.objects.filter(pk=exp.pk).update(status=status)  # test set-up only
    exp_delete(exp_id=exp.pk, actor=user)
    assert not Experiment.objects.filter(pk=exp.pk).exists()
    assert not Job.objects.filter(experiment_id=exp.pk).exists()
    assert not Artifact.objects.filter(experiment_id=exp.pk).exists()
    assert Job.objects.filter(experiment=other).count() == 1
    with pytest.raises(NotFound):
        exp_delete(exp_id=exp.pk, actor=user)


@pytest.mark.parametrize("spec,field,words", [
    (task_spec(replica=100_000_000_000), "role_to_task_spec.main.replica", "1024"),
    (task_spec(device_count=10**9, device_type="gpu"), "role_to_task_spec.main.device_count",
     "4096"),
    (task_spec(command="x" * (64 * 1024 + 1)), "role_to_task_spec.main.command", "bytes"),
    (task_spec(command=["echo", "hi"]), "role_to_task_spec.main.command", "got a list"),
    (task_spec(envs={"A": "x\x00y"}), "role_to_task_spec.main.envs.A", "NUL"),
    (task_spec(envs={"A": None}), "role_to_task_spec.main.envs.A", "got null"),
    (task_spec(envs={f"V{i}": "1" for i in range(257)}), "role_to_task_spec.main.envs", "256"),
])
def test_limits_that_keep_one_request_from_exhausting_the_cluster(user, spec, field, words):
    with pytest.raises(ValidationFailed) as err:
        create(user, role_to_task_spec={"main": spec})
    assert words in " ".join(err.value.errors[field])
    assert not Experiment.objects.exists()


def test_config_with_a_nul_character_is_refused(user):
    with pytest.raises(ValidationFailed) as err:
        create(user, config="a: 1\x00")
    assert "NUL" in err.value.errors["config"][0]


def test_a_spec_read_back_can_be_sent_again(user):
    first = create(user)
    spec = first.jobs.get().task_spec
    assert spec["device_count"] is None
    again = create(user, role_to_task_spec={"main": spec})
    assert again.jobs.get().task_spec == spec
