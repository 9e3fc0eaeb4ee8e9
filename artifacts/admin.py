"""Django admin for artifacts: read-only, status changes only through transitions."""
from django.contrib import admin

from core.admin import StaffOperatorMixin

from .models import Artifact


@admin.register(Artifact)
class ArtifactAdmin(StaffOperatorMixin, admin.ModelAdmin):
    list_display = ("id", "experiment", "path", "artifact_type", "status", "updated_at")
    list_filter = ("status", "artifact_type")
    search_fields = ("experiment__name", "path")
    list_select_related = ("experiment",)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
