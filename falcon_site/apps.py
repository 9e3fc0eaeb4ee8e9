"""The `falcon_site` app: registers the local-state system check (`falcon_site.startup`)."""
from django.apps import AppConfig
from django.core import checks


class FalconSiteConfig(AppConfig):
    name = "falcon_site"

    def ready(self) -> None:
        from .startup import check_local_state

        checks.register(check_local_state)
