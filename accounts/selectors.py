"""User queries that read."""
from __future__ import annotations

from core.errors import NotFound

from .models import User


def user_get_by_email(*, email: str) -> User:
    """Return the active user with this email (in any ASCII case).

    Used where a trusted service acts for a user (gRPC CreateExp with `creator_email`): the
    user must exist, i.e. have logged in once (users are registered on their first request).
    The address is compared in its stored normal form (`accounts.emails.normalize_email`), not
    with the database's collation, which on MariaDB equates look-alikes (`\u212a` and `K`).

    Raises:
        NotFound: no active user has this email, or it is not a valid address (a look-alike
            included).
    """
    from .emails import InvalidEmail, normalize_email, shown_email

    try:
        key = normalize_email(email)
    except InvalidEmail:
        key = None
    user = User.objects.filter(email=key, is_active=True).first() if key else None
    if user is None:
        raise NotFound(f"No active Falcon user has the email {shown_email(email)}; the user "
                       "must log in once (falcon auth login) before anything is created for "
                       "them.")
    return user


def service_principal_allowed(*, common_name: str) -> bool:
    """True when operators allow the Cloudflare service token `common_name` (decisions.md#auth-2).

    Allowed: listed in `settings.FALCON_CF_SERVICE_TOKENS` or `FALCON_SERVICE_ROLES`, or an
    active `ServicePrincipal` row.
    A row with `is_active` off refuses it even when the setting lists it: switching it off in
    the admin cuts the token off without a redeploy.
    """
    from django.conf import settings

    from .models import ServicePrincipal

    if not common_name:
        return False
    row = ServicePrincipal.objects.filter(common_name=common_name).values_list(
        "is_active", flat=True).first()
    if row is not None:
        return bool(row)
    return (common_name in settings.FALCON_CF_SERVICE_TOKENS
            or common_name in settings.FALCON_SERVICE_ROLES)


def service_role(*, common_name: str) -> str:
    """Return the role of the allowed service token `common_name` (decisions.md#auth-8).

    The `ServicePrincipal` row's `role` when set, else `settings.FALCON_SERVICE_ROLES`, else
    `read-only`.
    """
    from django.conf import settings

    from .models import ServicePrincipal

    row = ServicePrincipal.objects.filter(common_name=common_name).values_list(
        "role", flat=True).first()
    return row or settings.FALCON_SERVICE_ROLES.get(common_name, "read-only")
