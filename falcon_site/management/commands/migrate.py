"""`manage.py migrate`, preceded by `manage.py prepare` (`falcon_site.startup`).

The settings no longer create anything on import, yet migrate needs the SQLite database's folder
and its system checks need the local secret files. Creating them first keeps `migrate` alone
enough on a fresh checkout, in docker-compose's migrate service and in Kubernetes' init
container (where the secrets come from the environment and nothing but the folder is made).
Under `FALCON_LOG_FORMAT=json` its output lines are JSON records (`core.observability.commands`).
"""
from __future__ import annotations

from django.core.management.commands.migrate import Command as MigrateCommand

from core.observability.commands import LoggedOutputMixin
from falcon_site.startup import prepare_local_state


class Command(LoggedOutputMixin, MigrateCommand):
    def execute(self, *args, **options):
        # Before the system checks, which Django runs in execute() ahead of handle().
        prepare_local_state()
        return super().execute(*args, **options)
