"""The transition history: written by the engine with every status change, read over HTTP."""
from __future__ import annotations

import pytest
from django.db import transaction

from accounts.tests.factories import UserFactory
from analysis.models import AnalysisRecord
from analysis.tests.factories import RESULT_ROOT, make_finished_exp
from analysis.services import analysis_record_create
from core.observability.context import acting_as
from core.domain.history import exp_events
from core.models import TransitionEvent
from core.domain.statuses import AnalysisStatus, ExpStatus, JobStatus
from experiments.services import exp_abort, exp_update_status
from experiments.tests.factories import make_exp
from jobs.models import Job
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db


def _rows(exp_id):
    return [(e.entity_type, e.from_status, e.to_status, e.reason, e.actor)
            for e in exp_events(exp_id=exp_id)]


def test_each_change_is_one_event_with_the_time_of_the_change_to_the_microsecond():
    exp = make_exp(roles=("main",))
    job = exp.created_jobs[0]
    assert list(exp_events(exp_id=exp.pk)) == []  # creating is not a change
    with acting_as("service exp-controller"):
        job_update_status(job_id=job.pk, status=JobStatus.RUNNING, reason="PodsRunning",
                          message="1/1 replicas running")
        exp_update_status(exp_id=exp.pk, status=ExpStatus.RUNNING)
        # Repeating a transition already applied changes nothing and records nothing.
        exp_update_status(exp_id=exp.pk, status=ExpStatus.RUNNING)
        job_update_status(job_id=job.pk, status=JobStatus.RUNNING, reason="PodsRunning",
                          message="refreshed detail")
    assert _rows(exp.pk) == [
        ("job", "Pending", "Running", "PodsRunning", "service exp-controller"),
        ("experiment", "Created", "Running", "", "service exp-controller"),
    ]
    first = exp_events(exp_id=exp.pk)[0]
    job.refresh_from_db()
    assert first.entity_id == str(job.pk) and first.message == "1/1 replicas running"
    # The event's time is the row's started_at, read back from the database to the microsecond
    # (DATETIME(6) on MariaDB, text on SQLite).
    assert first.at == job.started_at
    assert TransitionEvent.objects.get(pk=first.pk).at.microsecond == job.started_at.microsecond


def test_event_is_written_in_the_transaction_of_the_change():
    exp = make_exp()
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            exp_update_status(exp_id=exp.pk, status=ExpStatus.RUNNING)
            assert len(_rows(exp.pk)) == 1
            raise RuntimeError("rolled back")
    exp.refresh_from_db()
    assert exp.status == ExpStatus.CREATED and _rows(exp.pk) == []


def test_abort_records_the_experiment_and_every_job_in_one_batch_with_the_user():
    owner = UserFactory(email="owner@example.com")
    exp = make_exp(creator=owner, roles=("a", "b", "c"))
    jobs = {job.role: job for job in exp.created_jobs}
    job_update_status(job_id=jobs["c"].pk, status=JobStatus.FAILED, reason="Exit1")
    with acting_as(owner.email):
        exp_abort(exp_id=exp.pk, actor=owner)
    rows = _rows(exp.pk)
    assert rows[0] == ("job", "Pending", "Failed", "Exit1", "system")
    assert ("experiment", "Created", "Aborting", "AbortRequested", "owner@example.com") in rows
    moved = {e.entity_id for e in exp_events(exp_id=exp.pk) if e.to_status == "Aborting"
             and e.entity_type == "job"}
    # The failed job does not move, so it has no Aborting event.
    assert moved == {str(jobs["a"].pk), str(jobs["b"].pk)}
    aborting = [e for e in exp_events(exp_id=exp.pk) if e.to_status == "Aborting"]
    assert all(e.message == "Abort requested by owner@example.com." for e in aborting)
    assert len({e.at for e in aborting}) == 2  # the experiment's UPDATE, then the jobs' batch


def test_batch_transition_keeps_each_rows_own_reason_when_none_is_given():
    exp = make_exp(roles=("a", "b"))
    for job in exp.created_jobs:
        job_update_status(job_id=job.pk, status=JobStatus.RUNNING, reason=f"why-{job.role}")
    Job.objects.filter(experiment=exp).transition(JobStatus.ABORTING)
    events = [e for e in exp_events(exp_id=exp.pk) if e.to_status == "Aborting"]
    assert sorted(e.reason for e in events) == ["why-a", "why-b"]


def test_analysis_changes_are_in_their_experiments_history():
    exp = make_finished_exp()
    before = len(_rows(exp.pk))
    record = analysis_record_create(exp_id=exp.pk, analysis_type="online", name="n",
                                    command="true", creator_email=exp.creator.email,
                                    result_root=RESULT_ROOT)
    AnalysisRecord.objects.get(pk=record.pk).mark_running()
    rows = _rows(exp.pk)[before:]
    assert rows == [("analysis", AnalysisStatus.PENDING, AnalysisStatus.RUNNING, "", "system")]
    assert exp_events(exp_id=exp.pk)[before].entity_id == record.analysis_id


def test_history_is_kept_after_the_experiment_is_deleted():
    from experiments.services import exp_delete

    exp = make_finished_exp()
    count = len(_rows(exp.pk))
    staff = UserFactory(is_staff=True)
    exp_delete(exp_id=exp.pk, actor=staff)
    assert count > 0 and len(_rows(exp.pk)) == count


def test_http_serves_the_events_of_a_deleted_experiment_and_refuses_query_parameters(
        auth_api):
    from experiments.services import exp_delete

    exp = make_finished_exp()
    count = len(_rows(exp.pk))
    exp_delete(exp_id=exp.pk, actor=UserFactory(is_staff=True))
    res = auth_api.get(f"/api/v1/exps/{exp.pk}/events")
    assert res.status_code == 200, res.content
    assert len(res.json()["events"]) == count > 0
    res = auth_api.get(f"/api/v1/exps/{exp.pk}/events", {"x": "1"})
    assert res.status_code == 400 and "takes none" in res.json()["x"][0]


def test_http_events_name_the_user_and_return_the_request_id(auth_api, token_for):
    from accounts.issuer import local_subject

    alice = UserFactory(user_id=local_subject("alice@example.com"), email="alice@example.com")
    exp = make_exp(creator=alice, roles=("main",))
    res = auth_api.post(f"/api/v1/exps/{exp.pk}/abort", HTTP_X_REQUEST_ID="req-abc-123")
    assert res.status_code == 200, res.content
    assert res["X-Request-ID"] == "req-abc-123"
    res = auth_api.get(f"/api/v1/exps/{exp.pk}/events")
    assert res.status_code == 200, res.content
    body = res.json()
    assert body["exp_id"] == exp.pk
    assert [(e["entity_type"], e["from_status"], e["to_status"], e["actor"])
            for e in body["events"]] == [
        ("experiment", "Created", "Aborting", "alice@example.com"),
        ("job", "Pending", "Aborting", "alice@example.com"),
    ]
    assert body["events"][0]["at"].endswith("Z") and "." in body["events"][0]["at"]
    # A request id that is not a short token is replaced by a new one.
    res = auth_api.get(f"/api/v1/exps/{exp.pk}/events", HTTP_X_REQUEST_ID="bad id\twith spaces")
    assert len(res["X-Request-ID"]) == 32 and res["X-Request-ID"] != "bad id\twith spaces"
    assert auth_api.get("/api/v1/exps/999999/events").status_code == 404
    assert auth_api.get("/api/schema/").content.count(b"/api/v1/exps/{exp_id}/events") == 1


def test_event_time_column_keeps_microseconds():
    """DATETIME(6) on MariaDB (Django's DateTimeField), text with microseconds on SQLite."""
    from django.db import connection

    exp = make_exp()
    exp_update_status(exp_id=exp.pk, status=ExpStatus.RUNNING)
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT DATETIME_PRECISION FROM information_schema.COLUMNS WHERE "
                           "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'transition_events' "
                           "AND COLUMN_NAME = 'at'")
            assert cursor.fetchone()[0] == 6
    stored = TransitionEvent.objects.get().at
    exp.refresh_from_db()
    assert stored == exp.updated_at == exp.started_at
