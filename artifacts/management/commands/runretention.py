"""`manage.py runretention [--once] [--poll SECONDS]`: run `prune_artifacts` on the `retention`
schedule (a django-celery-beat PeriodicTask operators edit or pause in the admin), with the
policy in its arguments (`artifacts.retention`). runlocal starts it; on Kubernetes it is one
small Deployment (k8s/base/retention.yaml)."""
from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from core.observability.commands import LoggedOutputMixin

from core.errors import FalconError

from ...retention import run_if_due


class Command(LoggedOutputMixin, BaseCommand):
    help = ("Prune stored artifact files on the 'retention' schedule (admin: Periodic tasks), "
            "with the policy in its arguments, e.g. {\"older_than\": \"90d\"}.")

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true",
                            help="Run once if due, print what happened, and exit.")
        parser.add_argument("--poll", type=float, default=60.0, metavar="SECONDS",
                            help="Longest wait between two reads of the schedule, so an edit "
                                 "in the admin applies within it (default 60).")

    def handle(self, *args, once: bool, poll: float, **options):
        if poll <= 0:
            raise CommandError("--poll: must be a positive number of seconds, e.g. 60.")
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.is_set():
            try:
                run = run_if_due()
            except FalconError as exc:  # a missing schedule or a bad policy: say it, go on
                self.stderr.write(f"retention: {exc.message}")
                if once:
                    raise CommandError(exc.message) from None
                stop.wait(poll)
                continue
            if once:
                if run.report is not None:
                    r = run.report
                    self.stdout.write(f"retention: {len(r.artifacts)} artifacts, "
                                      f"{r.deleted_files} files, {r.bytes} bytes pruned")
                else:
                    self.stdout.write("retention: " + (run.note or "not due") + "; "
                                      f"next in {run.next_in:.0f} s")
                return
            stop.wait(min(max(run.next_in, 1.0), poll))
