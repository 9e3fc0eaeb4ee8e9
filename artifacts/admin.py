"""Django admin for artifacts: read-only, filtered by `ArtifactFilter`; status changes only
through transitions. Statuses as badges and the artifact's history."""
from django.contrib import admin

from core.admin import (
    FilterSetAdminMixin, ReadOnlyAdminMixin, filterset_list_filter, history_table, status_badge,
    truncated,
)
from core.domain.history import entity_events

from .filters import ArtifactFilter
from .models import Artifact


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    """Artifacts are created with their experiment; the changelist filters as ListArtifacts."""

    list_display = ("id", "exp_name", "short_path", "artifact_type", "status_badge",
                    "short_reason", "file_count", "total_bytes", "prune_state", "updated_at")
    filterset_class = ArtifactFilter
    list_filter = [filterset_list_filter(ArtifactFilter, name)
                   for name in ("status", "exp_status", "cluster_name", "exp_type",
                                "artifact_type")]
    list_select_related = ("experiment",)
    fieldsets = [
        (None, {"fields": ("experiment", "path", "artifact_type", "status_badge", "reason",
                           "message")}),
        ("Files", {"fields": ("file_count", "total_bytes", "prune_state", "pruned_at")}),
        ("Times", {"fields": ("created_at", "updated_at", "finished_at")}),
        ("History", {"fields": ("history",)}),
    ]

    @admin.display(description="experiment", ordering="experiment_id")
    def exp_name(self, artifact: Artifact) -> str:
        return truncated(artifact.experiment, 40)

    @admin.display(description="path", ordering="path")
    def short_path(self, artifact: Artifact) -> str:
        return truncated(artifact.path, 48)

    @admin.display(description="status", ordering="status")
    def status_badge(self, artifact: Artifact) -> str:
        return status_badge(artifact.status)

    @admin.display(description="reason")
    def short_reason(self, artifact: Artifact) -> str:
        return truncated(artifact.reason, 24) if artifact.reason else "-"

    @admin.display(description="transition history")
    def history(self, artifact: Artifact) -> str:
        return history_table(entity_events(entity_type="artifact", entity_id=artifact.pk))
