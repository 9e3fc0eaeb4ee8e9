"""A run's start is the one its cluster reported (cluster-behaviours.md#cb-25).

A short run that went Pending -> Succeeded between two resource-manager ticks used to have no
`started_at` (it was set only when a controller saw the job Running), so every duration showed
`-`. Here the real controllers (resource manager on the local backend, exp controller) talk to
the in-process gRPC API server, and the results are read where users read them: the HTTP API
(`exp get`) and `falcon exp list`, against the live server.
"""
from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from core.testing import wait_until as poll_until
from artifacts.store import store_for
from cli.tests.conftest import EMAIL, falcon_cli, logged_in  # noqa: F401  (fixtures)
from controllers.cluster_backends.local import LocalBackend
from controllers.exp_controller import ExpController
from controllers.resource_manager import ResourceManager
from experiments.models import Experiment
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import falcon_api, grpc_server  # noqa: F401  (fixtures)
from jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE = 30.0  # seconds a replica of `true` may take to end on a loaded machine


@pytest.fixture
def alice(db):
    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory

    return UserFactory(user_id=local_subject(EMAIL), email=EMAIL)


@pytest.fixture
def local(falcon_api, tmp_path):
    """The resource manager on a local cluster and the exp controller, over gRPC."""
    backend = LocalBackend(tmp_path / "state", grace_seconds=0.5, stop_wait_seconds=0.2)
    rm = ResourceManager(falcon_api, {"local": backend})
    exps = ExpController(falcon_api, has_files=lambda url: store_for(url).has_files(url))
    return backend, rm, exps


def wait_for_file(path: Path) -> None:
    """Wait for `path` to exist (the replica's runner writes it), at most `DEADLINE` s."""
    poll_until(path.exists, timeout=DEADLINE, what=f"{path} to be written")


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_a_run_that_ends_between_two_ticks_has_its_start_and_a_duration(
        local, alice, logged_in):
    backend, rm, exps = local
    exp = make_exp(creator=alice, name="blink",
                   command='echo done > "$FALCON_ARTIFACT_PATH/out"')
    rm.tick()  # submits: the job is Pending with its cluster job
    job = Job.objects.get(experiment=exp)
    assert job.status == "Pending" and job.cluster_job_name
    folder = backend.state_dir / job.cluster_job_name
    wait_for_file(folder / "replica-0.exit")  # ended before the next tick saw it run
    replica_start = datetime.fromtimestamp((folder / "replica-0.started").stat().st_mtime,
                                           tz=timezone.utc)

    rm.tick()
    job.refresh_from_db()
    assert job.status == "Succeeded"
    assert job.started_at == replica_start  # the cluster's start, not the tick's
    assert job.created_at <= job.started_at <= job.finished_at
    exps.tick()
    exp.refresh_from_db()
    assert exp.status == "Succeeded", exp.message
    assert exp.started_at == job.started_at  # an experiment starts with its first job
    assert exp.started_at <= exp.finished_at

    res = logged_in("exp", "get", str(exp.pk), "-o", "json")
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    assert parse(shown["started_at"]) == exp.started_at
    assert parse(shown["jobs"][0]["started_at"]) == job.started_at
    listed = logged_in("exp", "list", "-o", "json")
    assert [parse(e["started_at"]) for e in json.loads(listed.stdout)] == [exp.started_at]
    table = logged_in("exp", "list").stdout
    header = next(line for line in table.splitlines() if "DURATION" in line)
    row = next(line for line in table.splitlines() if "blink" in line)
    cell = row[header.index("DURATION"):].split()[0]
    assert re.fullmatch(r"\d+s", cell), table  # a duration, not "-"
    detail = logged_in("exp", "get", str(exp.pk)).stdout
    assert re.search(r"^\s*duration\s+\d+s\s*$", detail, re.MULTILINE), detail


def test_an_experiment_starts_with_its_first_role(local, alice):
    """Two roles started apart: the experiment's start is the earlier one's."""
    backend, rm, exps = local
    exp = make_exp(creator=alice, name="pair", roles=("a", "b"),
                   command='echo done > "$FALCON_ARTIFACT_PATH/out-$FALCON_ROLE"')
    rm.tick()
    jobs = list(Job.objects.filter(experiment=exp).order_by("role"))
    for job in jobs:
        wait_for_file(backend.state_dir / job.cluster_job_name / "replica-0.exit")
    rm.tick()
    exps.tick()
    exp = Experiment.objects.get(pk=exp.pk)
    starts = sorted(Job.objects.filter(experiment=exp).values_list("started_at", flat=True))
    assert exp.status == "Succeeded" and None not in starts
    assert exp.started_at == starts[0]
