from django.apps import AppConfig


class AnalysisConfig(AppConfig):
    """The analysis app of Falcon: analysis records of the Data Analyzer."""

    name = "analysis"

    def ready(self):
        from .api import schema  # noqa: F401  (registers the OpenAPI serializer extension)
