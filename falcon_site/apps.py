"""The `falcon_site` app: registers the local-state system check (`falcon_site.startup`), the
database character-set check (`falcon_site.db_checks`) and, under `check --deploy`, the refusal
to run users' code as the server (`core.processes.user_code`)."""
from django.apps import AppConfig
from django.core import checks


class FalconSiteConfig(AppConfig):
    name = "falcon_site"

    def ready(self) -> None:
        from core.processes.user_code import check_user_code

        from .db_checks import check_database_charset
        from .startup import check_local_state

        checks.register(check_local_state)
        checks.register(check_database_charset, checks.Tags.database)
        # Deploy only: every process that runs or accepts user code refuses at start-up anyway
        # (core.processes.user_code); here an operator sees it before starting any.
        checks.register(check_user_code, checks.Tags.security, deploy=True)
