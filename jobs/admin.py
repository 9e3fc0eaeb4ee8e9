"""Django admin for jobs: read-only, status changes only through transitions."""
from django.contrib import admin

from core.admin import StaffOperatorMixin

from .models import Job


@admin.register(Job)
class JobAdmin(StaffOperatorMixin, admin.ModelAdmin):
    list_display = ("id", "experiment", "role", "cluster_name", "status", "updated_at")
    list_filter = ("status", "cluster_name", "exp_type")
    search_fields = ("experiment__name", "role")
    list_select_related = ("experiment",)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
