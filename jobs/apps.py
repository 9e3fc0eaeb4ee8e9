from django.apps import AppConfig


class JobsConfig(AppConfig):
    """The jobs app of Falcon."""

    name = "jobs"
