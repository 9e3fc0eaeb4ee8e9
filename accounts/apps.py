from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Users (Cloudflare Access identities) and authentication."""

    name = "accounts"

    def ready(self) -> None:
        from . import schema  # noqa: F401  (registers the OpenAPI auth extension)
