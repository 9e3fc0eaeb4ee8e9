"""User queries that read."""
from __future__ import annotations

from falcon_site.errors import NotFound

from .models import User


def user_get_by_email(*, email: str) -> User:
    """Return the active user with this email (case-insensitive).

    Used where a trusted service acts for a user (gRPC CreateExp with `creator_email`): the
    user must exist, i.e. have logged in once (seed 3.4.4 registers users on first request).

    Raises:
        NotFound: no active user has this email.
    """
    user = User.objects.filter(email__iexact=email.strip(), is_active=True).first() if email \
        else None
    if user is None:
        raise NotFound(f"No active Falcon user has the email {email!r}; the user must log in "
                       "once (falcon auth login) before anything is created for them.")
    return user
