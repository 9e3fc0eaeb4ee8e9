from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    """The experiments app of Falcon."""

    name = "experiments"

    def ready(self):
        from .api import schema  # noqa: F401  (registers the OpenAPI serializer extension)
