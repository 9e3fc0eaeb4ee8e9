"""`manage.py checkheartbeat`: the exec livenessProbe of the controller Deployments.

`runner.run_loop` touches `FALCON_HEARTBEAT_FILE` after every tick and every second while it
waits for the next one (whatever the schedule's interval), and a replica waiting for the Lease
touches it every retry period (`leader.run_elected`). This command exits 0 when the
file was touched within `--max-age` seconds and 1 otherwise, which is what an exec probe reads
(Kubernetes "Configure Liveness, Readiness and Startup Probes": a non-zero exit is a failure).
It touches no database and no network, so it answers within the probe's timeout.
"""
from __future__ import annotations

import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from controllers.runner import heartbeat_path


class Command(BaseCommand):
    help = "Exit 1 when the controller's heartbeat file is missing or older than --max-age."

    def add_arguments(self, parser):
        parser.add_argument("--max-age", type=float, default=120.0,
                            help="Seconds since the last beat (a tick, a second of waiting "
                            "for the next, a Lease attempt) that still count as alive.")
        parser.add_argument("--file", default="",
                            help="Heartbeat file (default: FALCON_HEARTBEAT_FILE).")

    def handle(self, *args, **options):
        path = options["file"] or heartbeat_path()
        if not path:
            raise CommandError("no heartbeat file: set FALCON_HEARTBEAT_FILE or --file")
        try:
            age = time.time() - Path(path).stat().st_mtime
        except OSError as exc:
            raise CommandError(f"heartbeat file {path}: {exc.strerror}") from exc
        if age > options["max_age"]:
            raise CommandError(f"heartbeat file {path} is {age:.0f} s old "
                               f"(more than {options['max_age']:g} s): the loop is stuck")
        self.stdout.write(f"alive: last beat {age:.1f} s ago")
