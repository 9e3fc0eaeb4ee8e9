from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    """The artifacts app of Falcon."""

    name = "artifacts"
