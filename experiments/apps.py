from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    """The experiments app of Falcon."""

    name = "experiments"
