from django.apps import AppConfig


class AnalysisConfig(AppConfig):
    """The analysis app of Falcon: analysis records of the Data Analyzer."""

    name = "analysis"
