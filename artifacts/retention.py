"""Retention on its schedule: the `retention` django-celery-beat PeriodicTask says how often
`artifacts_prune` runs and with what policy (docs/decisions.md#dec-beat: a schedule store only,
no Celery broker or worker).

The policy is the task's `kwargs`, edited in the admin (Periodic tasks → retention → Arguments):

    {"older_than": "90d", "type": ["profiling"], "status": ["Succeeded", "Failed"]}

`older_than` takes what `manage.py prune_artifacts --older-than` takes; `type` and `status`
are optional lists, as its repeatable `--type` and `--status`. With no `older_than` (the
default) a run prunes nothing and says so: deleting users' files is an operator's decision.

A run is due when the task is enabled and `last_run_at` is older than its interval. Several
runners may poll the same database: a run is claimed by moving `last_run_at` from the value
read to now in one conditional UPDATE, so only one of them prunes per interval (the prune itself
is idempotent and resumable, so a run cut short is finished by the next).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from django.db.models import F
from django.utils import timezone

from core.errors import ValidationFailed
from core.domain.statuses import EXP_TERMINAL

from .services import PruneReport, artifacts_prune

log = logging.getLogger("falcon.retention")

SCHEDULE_NAME = "retention"


@dataclass(frozen=True)
class RetentionPolicy:
    """What one scheduled run prunes, read from the PeriodicTask's kwargs.

    Attributes:
        older_than: the `--older-than` text (`90d`, `P30D`), None when unset (prune nothing).
        exp_types: only experiments of these types (empty: all).
        exp_statuses: only experiments in these terminal statuses (empty: all).
    """

    older_than: str | None
    exp_types: tuple[str, ...] = ()
    exp_statuses: tuple[str, ...] = ()


def read_policy(kwargs_text: str) -> RetentionPolicy:
    """Read the retention task's kwargs (a JSON object) into a policy.

    Args:
        kwargs_text: the PeriodicTask's `kwargs` column ("{}" when unset).

    Raises:
        ValidationFailed: not a JSON object, an unknown key, a value of the wrong shape, a
            status that is not terminal, or an `older_than` that is not a positive duration;
            the message names the key and shows the accepted form.
    """
    from .management.commands.prune_artifacts import parse_older_than

    example = '{"older_than": "90d", "type": ["profiling"], "status": ["Succeeded"]}'
    try:
        data = json.loads(kwargs_text or "{}")
    except ValueError as exc:
        raise ValidationFailed({"kwargs": [f"not JSON ({exc}); write e.g. {example}"]}) from None
    if not isinstance(data, dict):
        raise ValidationFailed({"kwargs": [f"must be a JSON object, e.g. {example}"]})
    unknown = sorted(set(data) - {"older_than", "type", "status"})
    if unknown:
        raise ValidationFailed({"kwargs": [f"unknown keys {', '.join(unknown)}; known: "
                                           "older_than, type, status"]})
    older_than = data.get("older_than")
    if older_than is not None:
        if not isinstance(older_than, str):
            raise ValidationFailed({"kwargs.older_than": ["a duration text such as \"90d\""]})
        try:
            parse_older_than(older_than)
        except Exception as exc:  # CommandError: its message says which forms are accepted
            raise ValidationFailed({"kwargs.older_than": [str(exc)]}) from None
    lists = {}
    for key in ("type", "status"):
        value = data.get(key) or []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValidationFailed({f"kwargs.{key}": ["a list of strings"]})
        lists[key] = tuple(value)
    bad = sorted(set(lists["status"]) - set(EXP_TERMINAL))
    if bad:
        raise ValidationFailed({"kwargs.status": [
            f"{', '.join(bad)} not terminal; use {', '.join(sorted(EXP_TERMINAL))}"]})
    return RetentionPolicy(older_than, lists["type"], lists["status"])


@dataclass(frozen=True)
class RetentionRun:
    """The outcome of one `run_if_due` call.

    Attributes:
        ran: a run was due and claimed by this caller.
        report: what the prune did (None when nothing ran or no policy is set).
        next_in: seconds until the schedule is due again (the caller's sleep; at least 1).
        note: why nothing was pruned, when nothing was ("paused", "no older_than set").
    """

    ran: bool
    report: PruneReport | None
    next_in: float
    note: str = ""


def run_if_due(*, now: datetime | None = None) -> RetentionRun:
    """Run the scheduled prune if its schedule is due, claiming the run first.

    Args:
        now: the current time (tests pass one); default `timezone.now()`.

    Returns:
        What happened, with the seconds until the next run is due.

    Raises:
        NotFound: the `retention` schedule does not exist or has no interval.
        ValidationFailed: its kwargs are not a valid policy (`read_policy`).
    """
    from django_celery_beat.models import PeriodicTask

    from schedules.selectors import schedule_get

    now = now or timezone.now()
    schedule = schedule_get(SCHEDULE_NAME)
    interval = max(schedule.interval_seconds, 1.0)
    if not schedule.enabled:
        return RetentionRun(False, None, interval, "paused")
    last = schedule.last_run_at
    if last is not None and (now - last).total_seconds() < interval:
        return RetentionRun(False, None, interval - (now - last).total_seconds())
    task = PeriodicTask.objects.get(name=SCHEDULE_NAME)
    policy = read_policy(task.kwargs)
    claimed = PeriodicTask.objects.filter(pk=task.pk, last_run_at=last).update(
        last_run_at=now, total_run_count=F("total_run_count") + 1)
    if not claimed:  # another runner took this run
        return RetentionRun(False, None, interval)
    if policy.older_than is None:
        log.info("retention: no older_than in the schedule's arguments; nothing pruned "
                 "(admin: Periodic tasks, retention, Arguments)")
        return RetentionRun(True, None, interval, "no older_than set")
    from .management.commands.prune_artifacts import parse_older_than

    cutoff = now - parse_older_than(policy.older_than)
    report = artifacts_prune(finished_before=cutoff, exp_types=policy.exp_types,
                             exp_statuses=policy.exp_statuses, dry_run=False)
    log.info("retention: %d artifacts, %d files, %d bytes pruned (older than %s)%s",
             len(report.artifacts), report.deleted_files, report.bytes, policy.older_than,
             f"; {len(report.errors)} left for the next run" if report.errors else "")
    return RetentionRun(True, report, interval)



