"""The periodic loops' schedules: django-celery-beat `PeriodicTask` rows operators edit or pause in
the admin (docs/decisions.md#dec-beat). A schedule store only: no Celery broker, worker or beat
process; the controllers read their schedule over gRPC (`ScheduleService.GetSchedule`) before
each tick.

`DEFAULTS` are the rows the data migration `core.0002_default_schedules` creates, so a fresh
installation works with no edit (the migration stayed in core when this module left it:
docs/decisions.md#dec-schedules-app).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.errors import NotFound


@dataclass(frozen=True)
class Default:
    """One loop's default schedule: its PeriodicTask name, task path, seconds, and meaning."""

    name: str
    task: str
    seconds: int
    description: str


DEFAULTS = (
    Default("exp-reconcile", "falcon.exp_reconcile", 2,
            "The exp controller's tick: experiments follow their jobs and artifact."),
    Default("resource-sync", "falcon.resource_sync", 2,
            "The resource manager's tick: jobs are submitted to, read from and deleted on "
            "their clusters."),
    Default("offline-analysis-discovery", "falcon.offline_analysis_discovery", 10,
            "The analyzer's poll for finished experiments that its plugins analyse offline."),
    Default("retention", "falcon.prune_artifacts", 86400,
            "`manage.py prune_artifacts`: deletes the artifacts past their retention."),
)


@dataclass(frozen=True)
class ScheduleView:
    """A loop's schedule as the controllers see it.

    Attributes:
        name: the PeriodicTask's name (`exp-reconcile`, ...).
        enabled: False while an operator has paused it.
        interval_seconds: seconds between two runs (an IntervalSchedule in seconds; other
            periods are converted; a crontab or clocked schedule is refused on read).
        last_run_at: when it last ran, if recorded.
    """

    name: str
    enabled: bool
    interval_seconds: float
    last_run_at: datetime | None


SECONDS_PER = {"microseconds": 1e-6, "seconds": 1, "minutes": 60, "hours": 3600,
               "days": 86400}


def schedule_get(name: str) -> ScheduleView:
    """Return the schedule `name` (a PeriodicTask with an interval).

    Raises:
        NotFound: no PeriodicTask has this name, or it has no interval schedule (the message
            says how to fix it in the admin).
    """
    from django_celery_beat.models import PeriodicTask

    task = PeriodicTask.objects.select_related("interval").filter(name=name).first()
    if task is None:
        raise NotFound(f"Schedule {name!r} does not exist; known: "
                       f"{', '.join(d.name for d in DEFAULTS)} (admin: Periodic tasks).")
    if task.interval is None:
        raise NotFound(f"Schedule {name!r} has no interval; give it an interval schedule in "
                       "the admin (Periodic tasks): crontab, solar and clocked schedules are "
                       "not used by the loops.")
    seconds = task.interval.every * SECONDS_PER.get(task.interval.period, 1)
    return ScheduleView(name=name, enabled=task.enabled, interval_seconds=float(seconds),
                        last_run_at=task.last_run_at)
