"""AbortExp against completion is decided once (decisions.md#dec-abort-finished).

An abort that arrives after every job of the experiment has succeeded is refused with a 409
saying the experiment has finished, and the experiment and its artifact end as the jobs and
the files say; an abort that arrives earlier (before any job ended, after some ended) always
ends the experiment Aborted with its artifact Failed. Each case runs twice on identical inputs
and must end the same way both times, including an abort that lands inside the exp
controller's tick (after it wrote the artifact, before it wrote the experiment).
"""
from __future__ import annotations

import pytest

from accounts.issuer import local_subject
from accounts.tests.factories import UserFactory
from artifacts.models import Artifact
from artifacts.store import local_path, store_for
from controllers.exp_controller import ExpController
from core.errors import Conflict
from experiments.models import Experiment
from experiments.services import exp_abort
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    INTERNAL_TOKEN, channel_to, falcon_api, grpc_server, running_server,
)
from jobs.models import Job
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db(transaction=True)

ROLES = ("main", "worker", "ps")
ABORTED = ("Aborted", "Failed")


class AbortInsideTick:
    """A `FalconAPI` that sends AbortExp just before the controller's first experiment write
    (one UpdateExpStatus, or the tick's UpdateExpStatuses batch)."""

    def __init__(self, inner, exp: Experiment):
        self.inner, self.exp, self.abort_outcome = inner, exp, None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def update_exp_status(self, **kwargs):
        if self.abort_outcome is None:
            self.abort_outcome = _try_abort(self.exp)
        return self.inner.update_exp_status(**kwargs)

    def update_exp_statuses(self, updates):
        # The controller sends a tick's experiment transitions together (UpdateExpStatuses).
        if self.abort_outcome is None:
            self.abort_outcome = _try_abort(self.exp)
        return self.inner.update_exp_statuses(updates)


def _try_abort(exp: Experiment) -> str:
    try:
        exp_abort(exp_id=exp.pk, actor=exp.creator)
    except Conflict as exc:
        assert "has finished" in exc.message and "succeeded" in exc.message, exc.message
        return "409"
    return "200"


def _finish_cluster_side(exp: Experiment) -> None:
    """What the resource manager does next: every Aborting job's cluster job is deleted."""
    for job in Job.objects.filter(experiment=exp, status="Aborting"):
        job_update_status(job_id=job.pk, status="Aborted", reason="Aborted")


def _run(api, run: int, succeeded_before_abort: int, files: bool, abort_in_tick: bool):
    """One experiment of 3 roles: `succeeded_before_abort` jobs succeed, then the abort arrives
    (before the controller's tick, or inside it); the controller ticks until it is terminal.

    Returns `(abort answer, exp status, artifact status)`.
    """
    exp = make_exp(creator=UserFactory(), name=f"r{run}-{succeeded_before_abort}", roles=ROLES)
    jobs = list(Job.objects.filter(experiment=exp).order_by("pk"))
    for job in jobs:
        job_update_status(job_id=job.pk, status="Running")
    for job in jobs[:succeeded_before_abort]:
        job_update_status(job_id=job.pk, status="Succeeded", reason="Completed")
    if files:
        folder = local_path(exp.artifact_path) / "main"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "result.json").write_text("{}\n")
    outcome = None
    if not abort_in_tick:
        outcome = _try_abort(exp)
    tick_api = AbortInsideTick(api, exp) if abort_in_tick else api
    controller = ExpController(tick_api, has_files=lambda url: store_for(url).has_files(url))
    for _ in range(4):
        controller.tick()
        _finish_cluster_side(exp)
        if Experiment.objects.get(pk=exp.pk).is_terminal:
            break
    if abort_in_tick:
        outcome = tick_api.abort_outcome
    return (outcome, Experiment.objects.get(pk=exp.pk).status,
            Artifact.objects.get(experiment=exp).status)


@pytest.mark.parametrize("succeeded_before_abort", [0, 1, 2])
def test_abort_before_every_job_succeeded_ends_aborted_with_a_failed_artifact(
        falcon_api, succeeded_before_abort):
    outcomes = {_run(falcon_api, run, succeeded_before_abort, files=True, abort_in_tick=False)
                for run in range(2)}
    assert outcomes == {("200", *ABORTED)}


@pytest.mark.parametrize("files, expected", [(True, ("Succeeded", "Succeeded")),
                                             (False, ("Failed", "Failed"))])
@pytest.mark.parametrize("abort_in_tick", [False, True])
def test_abort_after_every_job_succeeded_is_refused_and_the_jobs_and_files_decide(
        falcon_api, files, expected, abort_in_tick):
    outcomes = {_run(falcon_api, run, len(ROLES), files=files, abort_in_tick=abort_in_tick)
                for run in range(2)}
    assert outcomes == {("409", *expected)}


def test_abort_of_a_finished_experiment_is_a_409_over_http(auth_api):
    alice = UserFactory(user_id=local_subject("alice@example.com"), email="alice@example.com")
    exp = make_exp(creator=alice, roles=("main",))
    job = exp.jobs.get()
    job_update_status(job_id=job.pk, status="Succeeded")
    res = auth_api.post(f"/api/v1/exps/{exp.pk}/abort")
    assert res.status_code == 409 and res.json()["code"] == "conflict"
    assert "has finished" in res.json()["detail"]
    assert Experiment.objects.get(pk=exp.pk).status == "Created"
