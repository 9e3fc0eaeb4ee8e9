"""Django admin for artifacts: read-only, filtered by `ArtifactFilter`; status changes only
through transitions."""
from django.contrib import admin

from core.admin import FilterSetAdminMixin, ReadOnlyAdminMixin, filterset_list_filter

from .filters import ArtifactFilter
from .models import Artifact


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    """Artifacts are created with their experiment; the changelist filters as ListArtifacts."""

    list_display = ("id", "experiment", "path", "artifact_type", "status", "file_count",
                    "total_bytes", "prune_state", "updated_at")
    filterset_class = ArtifactFilter
    list_filter = [filterset_list_filter(ArtifactFilter, name)
                   for name in ("status", "exp_status", "cluster_name", "exp_type",
                                "artifact_type")]
    list_select_related = ("experiment",)
