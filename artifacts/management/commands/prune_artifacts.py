"""`manage.py prune_artifacts --older-than DURATION [--type T] [--status S] [--dry-run]`:
retention of stored artifact files (`artifacts.services.artifacts_prune`)."""
from __future__ import annotations

import re
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from core.observability.commands import LoggedOutputMixin
from django.utils import timezone
from django.utils.dateparse import parse_duration

from core.domain.statuses import EXP_TERMINAL

from ...services import artifacts_prune

# The longest --older-than: no artifact is older than 100 years (and a cutoff before year 1
# cannot be computed).
MAX_OLDER_THAN = timedelta(days=36500)
_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+)([wdhms])")


def parse_older_than(text: str) -> timedelta:
    """Read `--older-than`: units w, d, h, m, s combined (`30d`, `1w2d`, `36h`, `90m`), or
    what Django's `parse_duration` reads (ISO 8601 `P30D`, `3 days, 04:00:00`).

    Raises:
        CommandError: not a duration, zero, or over `MAX_OLDER_THAN`; the message says which
            forms are accepted.
    """
    raw = text.strip().lower()
    value = None
    try:
        if raw and _PART.sub("", raw) == "":
            value = timedelta(seconds=sum(int(n) * _UNITS[u] for n, u in _PART.findall(raw)))
        elif not raw.isdigit():  # a bare number has no unit: refused rather than read as seconds
            value = parse_duration(text.strip())
    except (OverflowError, ValueError):  # beyond what a timedelta holds
        value = timedelta.max
    if value is None or value <= timedelta(0):
        raise CommandError(f"--older-than: {text!r} is not a positive duration; use e.g. 30d, "
                           "12h, 1w2d, 90m or ISO 8601 P30D.")
    if value > MAX_OLDER_THAN:
        raise CommandError(f"--older-than: {text!r} is longer than {MAX_OLDER_THAN.days} days "
                           "(100 years); use e.g. 30d or 365d.")
    return value


def human_bytes(size: int) -> str:
    """`1536` -> `1.5 KiB` (IEC units)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


class Command(LoggedOutputMixin, BaseCommand):
    help = ("Delete the stored files (artifact folder and replica logs) of artifacts that "
            "finished more than --older-than ago and mark them Pruned; experiments, configs, "
            "jobs and artifact records stay. Safe to run again after an interruption.")

    def add_arguments(self, parser):
        parser.add_argument("--older-than", required=True, metavar="DURATION",
                            help="Artifacts finished longer ago than this: 30d, 12h, 1w2d, P30D.")
        parser.add_argument("--type", dest="exp_types", action="append", default=[],
                            metavar="T", help="Only experiments of this type (repeatable).")
        parser.add_argument("--status", dest="exp_statuses", action="append", default=[],
                            choices=sorted(str(s) for s in EXP_TERMINAL), metavar="S",
                            help="Only experiments in this status: "
                                 f"{', '.join(sorted(EXP_TERMINAL))} (repeatable).")
        parser.add_argument("--dry-run", action="store_true",
                            help="Print what would be deleted; delete nothing.")

    def handle(self, *args, older_than: str, exp_types: list[str], exp_statuses: list[str],
               dry_run: bool, **options):
        cutoff = timezone.now() - parse_older_than(older_than)
        verb = "would delete" if dry_run else "deleting"

        def each(artifact, files, size):
            self.stdout.write(f"experiment {artifact.experiment_id}: {verb} {files} files "
                              f"({human_bytes(size)}) under {artifact.path}")

        if exp_types:
            from ...models import Artifact

            types = Artifact.objects.values_list("experiment__exp_type", flat=True).distinct()
            known = set(types.filter(experiment__exp_type__in=exp_types))
            for missing in sorted(set(exp_types) - known):
                in_use = sorted(types.order_by()[:20])
                self.stderr.write(f"--type {missing}: no experiment has this type (types in "
                                  f"use: {', '.join(in_use) or 'none'}); it matches nothing")
        report = artifacts_prune(finished_before=cutoff, exp_types=exp_types,
                                 exp_statuses=exp_statuses, dry_run=dry_run, on_artifact=each)
        done = "would delete" if dry_run else "deleted"
        self.stdout.write(f"{len(report.artifacts)} experiments, {report.files} files, "
                          f"{report.bytes} bytes ({human_bytes(report.bytes)}) {done}"
                          + ("" if dry_run else f"; {report.deleted_files} files removed"))
        for artifact_id, message in report.errors:
            self.stderr.write(f"artifact {artifact_id}: {message} (left as it is; run again)")
        if report.errors:
            raise CommandError(f"{len(report.errors)} artifacts could not be pruned")
