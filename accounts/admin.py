"""Django admin for users (operators set `is_staff`: who may abort or delete any run) and for the
allowed Cloudflare service tokens."""
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

from .models import ServicePrincipal, User


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    list_display = ("email", "user_id", "is_staff", "is_active", "created_at")
    list_filter = ("is_staff", "is_active")
    search_fields = ("email", "user_id")
    ordering = ("email",)
    readonly_fields = ("user_id", "created_at", "last_login")
    fieldsets = (
        (None, {"fields": ("user_id", "email", "password")}),
        ("Permissions", {"fields": ("is_active", "is_staff", "is_superuser", "groups",
                                    "user_permissions")}),
        ("Dates", {"fields": ("created_at", "last_login")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",),
                             "fields": ("user_id", "email", "password1", "password2")}),)
    filter_horizontal = ("groups", "user_permissions")


@admin.register(ServicePrincipal)
class ServicePrincipalAdmin(admin.ModelAdmin):
    """Operators allow or cut off Cloudflare service tokens here (docs/decisions.md#auth-2)."""

    list_display = ("common_name", "description", "is_active", "role", "effective_role",
                    "created_at")
    list_filter = ("is_active", "role")
    search_fields = ("common_name", "description")
    readonly_fields = ("effective_role", "created_at")

    def changelist_view(self, request, extra_context=None):
        """The list, with the roles FALCON_SERVICE_ROLES gives (tokens without a row too)."""
        from django.conf import settings
        from django.contrib import messages

        mapping = settings.FALCON_SERVICE_ROLES
        text = (", ".join(f"{name}={role}" for name, role in sorted(mapping.items()))
                if mapping else "(empty: tokens without a row role are read-only)")
        messages.info(request, f"FALCON_SERVICE_ROLES: {text}")
        return super().changelist_view(request, extra_context)

    @admin.display(description="Effective role")
    def effective_role(self, obj: ServicePrincipal) -> str:
        """The role the token gets now: this row's, else FALCON_SERVICE_ROLES', else read-only
        (decisions.md#auth-8)."""
        from .selectors import service_role

        return service_role(common_name=obj.common_name) if obj.common_name else "-"
