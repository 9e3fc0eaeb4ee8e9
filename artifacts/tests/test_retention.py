"""Retention on its django-celery-beat schedule (`artifacts.retention`, `manage.py
runretention`): the policy read from the task's arguments, runs only when due and enabled, one
claim per interval, and a due run really pruning old files."""
from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from artifacts.models import Artifact, PruneState
from artifacts.retention import RetentionPolicy, read_policy, run_if_due
from artifacts.tests.test_prune import files_of, finished_exp
from core.errors import ValidationFailed

pytestmark = pytest.mark.django_db


def set_task(**fields) -> PeriodicTask:
    PeriodicTask.objects.filter(name="retention").update(**fields)
    return PeriodicTask.objects.get(name="retention")


def test_the_policy_is_read_from_the_arguments_and_bad_ones_name_the_key():
    assert read_policy("{}") == RetentionPolicy(None)
    assert read_policy('{"older_than": "90d", "type": "profiling", "status": ["Failed"]}') \
        == RetentionPolicy("90d", ("profiling",), ("Failed",))
    for text, key in (('{"older": "1d"}', "kwargs"), ("[1]", "kwargs"), ("{", "kwargs"),
                      ('{"older_than": "soon"}', "kwargs.older_than"),
                      ('{"older_than": 30}', "kwargs.older_than"),
                      ('{"older_than": "99999999999d"}', "kwargs.older_than"),
                      ('{"older_than": "1d", "status": ["Running"]}', "kwargs.status"),
                      ('{"older_than": "1d", "type": [1]}', "kwargs.type")):
        with pytest.raises(ValidationFailed) as info:
            read_policy(text)
        assert key in info.value.errors, text


def test_without_older_than_a_due_run_is_claimed_and_prunes_nothing(tmp_path):
    old = finished_exp("old", tmp_path, days_ago=400)
    now = timezone.now()
    run = run_if_due(now=now)
    assert run.ran and run.report is None and run.note == "no older_than set"
    assert files_of(old)[0] == 2
    task = PeriodicTask.objects.get(name="retention")
    assert task.last_run_at == now and task.total_run_count == 1
    again = run_if_due(now=now + timedelta(seconds=10))
    assert not again.ran and again.next_in == pytest.approx(86400 - 10)


def test_a_due_run_prunes_by_the_policy_and_keeps_the_rows(tmp_path):
    old = finished_exp("old", tmp_path, days_ago=40)
    young = finished_exp("young", tmp_path, days_ago=1)
    set_task(kwargs='{"older_than": "30d"}')
    run = run_if_due()
    assert run.ran and [a[1] for a in run.report.artifacts] == [old.pk]
    assert Artifact.objects.get(pk=old.artifact.pk).prune_state == PruneState.PRUNED
    assert files_of(old)[0] == 0 and files_of(young)[0] == 2


def test_a_paused_schedule_runs_nothing(tmp_path):
    old = finished_exp("old", tmp_path, days_ago=40)
    set_task(kwargs='{"older_than": "30d"}', enabled=False)
    run = run_if_due()
    assert not run.ran and run.note == "paused"
    assert files_of(old)[0] == 2


def test_two_runners_that_read_the_same_schedule_prune_once(monkeypatch, tmp_path):
    """The claim is a conditional UPDATE of last_run_at: the second runner, which read the
    schedule before the first claimed it, finds it moved and does nothing."""
    set_task(kwargs='{"older_than": "30d"}')
    from schedules import selectors as schedules

    stale = schedules.schedule_get("retention")
    assert run_if_due().ran
    monkeypatch.setattr(schedules, "schedule_get", lambda name: stale)
    run = run_if_due()
    assert not run.ran and run.report is None


def test_the_command_once_reports_and_a_bad_policy_is_an_error(tmp_path):
    set_task(kwargs='{"older_than": "30d"}')
    out = StringIO()
    call_command("runretention", "--once", stdout=out)
    assert "retention: 0 artifacts, 0 files, 0 bytes pruned" in out.getvalue()
    out = StringIO()
    call_command("runretention", "--once", stdout=out)
    assert "not due" in out.getvalue()
    set_task(kwargs='{"older_than": "yesterday"}', last_run_at=None)
    with pytest.raises(CommandError, match="older_than"):
        call_command("runretention", "--once", stdout=StringIO(), stderr=StringIO())
