"""The loops' default schedules are written twice, on purpose: in `schedules.selectors.DEFAULTS`
(what the code names and describes) and in the data migration that created the rows
(`core/migrations/0002_default_schedules.py`, frozen history). These tests keep the two equal,
and the rows a fresh database holds equal to both: a changed default needs a new data migration.
"""
from __future__ import annotations

import importlib

import pytest
from django_celery_beat.models import PeriodicTask

from schedules.selectors import DEFAULTS


def test_the_migration_creates_exactly_the_defaults_the_code_names():
    migration = importlib.import_module("core.migrations.0002_default_schedules")
    assert migration.DEFAULTS == tuple((d.name, d.task, d.seconds) for d in DEFAULTS)


@pytest.mark.django_db
def test_a_migrated_database_holds_one_row_per_default():
    rows = {task.name: (task.task, task.interval.every, task.interval.period, task.enabled)
            for task in PeriodicTask.objects.select_related("interval")}
    assert rows == {d.name: (d.task, d.seconds, "seconds", True) for d in DEFAULTS}
