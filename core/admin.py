"""What Falcon's staff may do in the Django admin."""
from __future__ import annotations


class StaffOperatorMixin:
    """Let every active staff user (an operator) view the model and run its actions.

    Falcon's `is_staff` is the operator role (issue 5: staff may abort or delete any
    experiment), set in the admin; per-model Django permissions would leave an operator who is
    not a superuser with an empty admin. Adding, editing and deleting stay as each admin says
    (status fields change only through transitions, never by a form).
    """

    def _is_operator(self, request) -> bool:
        user = request.user
        return bool(user.is_active and user.is_staff)

    def has_module_permission(self, request):
        return self._is_operator(request) or super().has_module_permission(request)

    def has_view_permission(self, request, obj=None):
        return self._is_operator(request) or super().has_view_permission(request, obj)

    def has_change_permission(self, request, obj=None):
        # Needed for admin actions to be offered; every field is read-only.
        return self._is_operator(request) or super().has_change_permission(request, obj)
