"""`manage.py clear_cli_login_grants`: delete the CLI login grants whose 120 s are over.

Every grant made, confirmed or redeemed already sweeps expired ones (`accounts.cli_login`); this
is the same sweep for a server that sees no login for a while, to run from cron or a Kubernetes
CronJob. The tokens of those rows are sealed with keys the server never stored, so the sweep
removes ciphertext: it keeps the table small, not a secret safe.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand

from ...cli_login import grant_sweep


class Command(BaseCommand):
    help = "Delete the expired CLI login grants (falcon auth login in the cloudflare mode)."

    def handle(self, *args, **options):
        self.stdout.write(f"deleted {grant_sweep()} expired CLI login grant(s)")
