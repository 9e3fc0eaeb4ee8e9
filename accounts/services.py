"""User use cases that write: auto-registration on the first authenticated request (seed 3.4.4)."""
from __future__ import annotations

from falcon_site.errors import Conflict, ValidationFailed

from .models import User


def user_register(*, user_id: str, email: str) -> User:
    """Return the user with primary key `user_id`, inserting it first if it does not exist.

    Seed 000, 3.4.4: look the user up by `sub`; insert `(sub, email)` if missing; otherwise do
    nothing. The insert is `INSERT IGNORE` (MySQL) / `ON CONFLICT DO NOTHING` (SQLite), so two
    first requests at once make one row and both succeed. It runs in autocommit, so the read
    after it sees the winner's row even under MariaDB's REPEATABLE READ (behaviours.md D1).

    Args:
        user_id: the token's `sub` (non-empty).
        email: the token's `email` (non-empty).

    Raises:
        ValidationFailed: `user_id` or `email` is empty.
        Conflict: the email already belongs to another `sub`.
    """
    if not user_id or not email:
        raise ValidationFailed({"sub" if not user_id else "email": [
            "is empty: a user needs both a subject and an email."]})
    user = User.objects.filter(pk=user_id).first()
    if user is not None:
        return user
    User.objects.bulk_create([User(user_id=user_id, email=User.objects.normalize_email(email),
                                   password="!")], ignore_conflicts=True)
    user = User.objects.filter(pk=user_id).first()
    if user is None:
        raise Conflict(f"The email {email} is registered to another identity; ask an operator "
                       "to remove the old user.")
    return user
