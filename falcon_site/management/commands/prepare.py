"""`manage.py prepare`: create the local state the settings read (`falcon_site.startup`).

Creates, as the configuration needs them, `FALCON_VAR_DIR`, the SQLite database's folder, the
secret key file, the internal token file and the local issuer's signing key. Idempotent: an
existing file is never replaced, so it can run before every start. `scripts/setup.sh` runs it
before `migrate`; `runlocal` does the same on its own.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand

from core.observability.commands import LoggedOutputMixin

from falcon_site.startup import prepare_local_state


class Command(LoggedOutputMixin, BaseCommand):
    help = ("Create FALCON_VAR_DIR and the local secret files the settings read (secret key, "
            "internal token, local signing key); never replaces an existing file.")
    # The checks report what this command creates: they would stop it before it could.
    requires_system_checks: list = []

    def handle(self, *args, **options) -> None:
        created = prepare_local_state()
        for path in created:
            self.stdout.write(f"created {path}")
        if not created and options["verbosity"] >= 2:
            self.stdout.write("the local state is complete: nothing to create")
