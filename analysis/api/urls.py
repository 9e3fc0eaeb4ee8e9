"""Routes of the Data Analyzer's HTTP API under /api/v1/ (docs/analyzer.md, "HTTP API")."""
from django.urls import path, register_converter

from . import views


class AnalysisIdConverter:
    """An analysis id in a path: a DNS-1123 label of at most 40 characters (else 404)."""

    regex = "[a-z0-9](?:[-a-z0-9]{0,38}[a-z0-9])?"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class PluginNameConverter:
    """A plugin name in a path: letters, digits, '.', '_', '-', at most 64 characters."""

    regex = "[A-Za-z0-9._-]{1,64}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(AnalysisIdConverter, "analysis_id")
register_converter(PluginNameConverter, "plugin_name")

urlpatterns = [
    path("analyses", views.AnalysisListCreateView.as_view(), name="analysis-list"),
    path("analyses/<analysis_id:analysis_id>", views.AnalysisDetailView.as_view(),
         name="analysis-detail"),
    path("analyses/<analysis_id:analysis_id>/cancel", views.AnalysisCancelView.as_view(),
         name="analysis-cancel"),
    path("analyses/<analysis_id:analysis_id>/logs", views.AnalysisLogsView.as_view(),
         name="analysis-logs"),
    path("analyses/<analysis_id:analysis_id>/results", views.AnalysisResultsView.as_view(),
         name="analysis-results"),
    path("plugins", views.PluginListView.as_view(), name="plugin-list"),
    path("plugins/<plugin_name:name>", views.PluginDetailView.as_view(), name="plugin-detail"),
]
