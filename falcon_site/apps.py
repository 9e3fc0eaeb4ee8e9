"""The `falcon_site` app: registers the local-state system check (`falcon_site.startup`) and
the database character-set check (`falcon_site.db_checks`)."""
from django.apps import AppConfig
from django.core import checks


class FalconSiteConfig(AppConfig):
    name = "falcon_site"

    def ready(self) -> None:
        from .db_checks import check_database_charset
        from .startup import check_local_state

        checks.register(check_local_state)
        checks.register(check_database_charset, checks.Tags.database)
