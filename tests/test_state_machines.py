"""Every allowed and every refused transition of the three state machines, on a real row."""
from __future__ import annotations

import itertools

import pytest

from artifacts.models import Artifact
from core.domain.statuses import ArtifactStatus
from artifacts.services import artifact_update_status
from experiments.models import Experiment
from core.domain.statuses import ExpStatus
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp
from core.errors import InvalidTransition, NotFound, TransitionRace
from jobs.models import Job
from core.domain.statuses import JobStatus
from jobs.services import job_update_status

# (machine, model, states, update function, id kwarg, row getter)
MACHINES = {
    "exp": (Experiment.machine, Experiment, ExpStatus,
            lambda pk, **kw: exp_update_status(exp_id=pk, **kw), lambda e: e),
    "job": (Job.machine, Job, JobStatus,
            lambda pk, **kw: job_update_status(job_id=pk, **kw), lambda e: e.jobs.get()),
    "artifact": (Artifact.machine, Artifact, ArtifactStatus,
                 lambda pk, **kw: artifact_update_status(artifact_id=pk, **kw),
                 lambda e: e.artifact),
}

# The state machines of docs/architecture.md, written out independently of the code under test.
EXPECTED_ALLOWED = {
    "exp": {("Created", "Running"), ("Created", "Succeeded"), ("Created", "Failed"),
            ("Running", "Succeeded"), ("Running", "Failed"), ("Created", "Aborting"),
            ("Running", "Aborting"), ("Aborting", "Aborted")},
    "job": {("Pending", "Running"), ("Pending", "Succeeded"), ("Pending", "Failed"),
            ("Running", "Succeeded"), ("Running", "Failed"), ("Pending", "Aborting"),
            ("Running", "Aborting"), ("Aborting", "Aborted")},
    "artifact": {("Created", "Succeeded"), ("Created", "Failed")},
}


def cases():
    for kind, (_m, _model, states, _f, _g) in MACHINES.items():
        for source, target in itertools.product(list(states), list(states)):
            if source != target:
                yield pytest.param(kind, source.value, target.value,
                                   id=f"{kind}:{source.value}->{target.value}")


@pytest.mark.django_db
@pytest.mark.parametrize("kind,source,target", list(cases()))
def test_transition_table(kind, source, target):
    machine, model, _states, update, get_row = MACHINES[kind]
    row = get_row(make_exp())
    model.objects.filter(pk=row.pk).update(status=source)  # test set-up only
    if (source, target) in EXPECTED_ALLOWED[kind]:
        updated, changed = update(row.pk, status=target, reason="R", message="m")
        assert changed and updated.status == target
        assert updated.reason == "R" and updated.message == "m"
        # Repeating an applied transition is a no-op.
        again, changed_again = update(row.pk, status=target)
        assert not changed_again and again.status == target
    else:
        with pytest.raises(InvalidTransition):
            update(row.pk, status=target)
        assert model.objects.get(pk=row.pk).status == source


@pytest.mark.parametrize("kind", list(MACHINES))
def test_terminal_states_have_no_way_out(kind):
    machine = MACHINES[kind][0]
    for target, sources in machine.transitions.items():
        assert not (sources & machine.terminal), f"{kind}: {target} reachable from a terminal"


@pytest.mark.django_db
def test_timestamps_follow_transitions():
    exp = make_exp()
    job = exp.jobs.get()
    job, _ = job_update_status(job_id=job.pk, status="Running")
    started = job.started_at
    assert started is not None and job.finished_at is None
    job, _ = job_update_status(job_id=job.pk, status="Running", message="still running")
    assert job.started_at == started and job.message == "still running"
    job, _ = job_update_status(job_id=job.pk, status="Succeeded")
    assert job.finished_at is not None and job.started_at == started


@pytest.mark.django_db
def test_terminal_row_keeps_its_message():
    exp = make_exp()
    job = exp.jobs.get()
    job_update_status(job_id=job.pk, status="Failed", reason="Error", message="exit 1")
    job, changed = job_update_status(job_id=job.pk, status="Failed", message="other")
    assert not changed and job.message == "exit 1"


@pytest.mark.django_db
def test_unknown_target_and_unknown_row():
    exp = make_exp()
    with pytest.raises(InvalidTransition):
        exp_update_status(exp_id=exp.pk, status="Exploded")
    with pytest.raises(NotFound):
        exp_update_status(exp_id=exp.pk + 1000, status="Running")


@pytest.mark.django_db
def test_expected_status_reports_a_race():
    exp = make_exp()
    job = exp.jobs.get()
    job_update_status(job_id=job.pk, status="Running")
    with pytest.raises(TransitionRace):
        job_update_status(job_id=job.pk, status="Succeeded", expected="Pending")
    assert Job.objects.get(pk=job.pk).status == "Running"


@pytest.mark.django_db
def test_the_models_state_machine_methods_are_guarded_transitions():
    exp = make_exp()
    job = exp.jobs.get()
    assert job.mark_running(reason="Running", message="2/2 running")
    assert job.status == JobStatus.RUNNING and job.started_at is not None
    assert not job.mark_running()  # repeating a transition is a no-op
    assert job.request_abort(reason="AbortRequested", message="by a test")
    assert Job.objects.get(pk=job.pk).status == JobStatus.ABORTING
    with pytest.raises(InvalidTransition):
        job.mark_succeeded()  # Aborting may only end Aborted
    assert job.mark_aborted(reason="Aborted") and job.is_terminal
    artifact = exp.artifact
    assert artifact.mark_failed(reason="ArtifactEmpty", message="no files")
    assert Artifact.objects.get(pk=artifact.pk).finished_at is not None
    assert exp.request_abort(message="by a test") and exp.aborting_at is not None
    assert exp.mark_aborted() and exp.status == ExpStatus.ABORTED


@pytest.mark.django_db
def test_a_stale_instance_cannot_overwrite_a_newer_status():
    exp = make_exp()
    stale = Job.objects.get(pk=exp.jobs.get().pk)
    fresh = Job.objects.get(pk=stale.pk)
    assert fresh.mark_failed(reason="Error")
    with pytest.raises(InvalidTransition):
        stale.mark_running()  # the guard reads the row, not the stale instance
    assert Job.objects.get(pk=stale.pk).status == JobStatus.FAILED


@pytest.mark.django_db
def test_a_queryset_moves_only_the_rows_its_table_allows():
    exp = make_exp(roles=("a", "b"))
    first, second = exp.jobs.order_by("pk")
    first.mark_succeeded()
    assert Job.objects.filter(experiment=exp).transition(JobStatus.ABORTING, reason="R") == 1
    assert Job.objects.get(pk=second.pk).status == JobStatus.ABORTING
    assert Job.objects.get(pk=first.pk).status == JobStatus.SUCCEEDED
