"""Who a verified token is: auto-registration of users and service principals."""
from __future__ import annotations

import functools
from typing import Any

from django.db import router

from core.database.prepared import IdsQuery
from core.errors import Conflict, PermissionDenied, ValidationFailed

from .emails import InvalidEmail, normalize_email
from .models import User
from .principals import ServiceIdentity
from .selectors import service_principal_allowed, service_role


class NoIdentity(Exception):
    """The verified token names nobody usable (authentication fails: 401); `reason` is one line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def principal_from_claims(claims: dict[str, Any]) -> User | ServiceIdentity:
    """Return who the claims of a VERIFIED token are: a registered user or an allowed service.

    - A person: non-empty string `sub` and `email` -> the `User`, inserted on first sight
      (`user_register`).
    - A Cloudflare service token: non-empty `common_name`, empty `sub`, no `email` -> a
      `ServiceIdentity` when operators allow it (`selectors.service_principal_allowed`).
    - Anything else (empty `sub` without a common name, `sub` without `email`, ...) names nobody;
      in particular never a user with an empty `sub` or email (decisions.md#auth-2).

    Raises:
        NoIdentity: the claims name nobody usable, the email belongs to another identity, or
            the user is deactivated (HTTP 401 / gRPC UNAUTHENTICATED).
        PermissionDenied: a service token that operators have not allowed (HTTP 403 / gRPC
            PERMISSION_DENIED).
    """
    sub, email, common_name = claims.get("sub"), claims.get("email"), claims.get("common_name")
    if (isinstance(common_name, str) and common_name and sub in ("", None)
            and not claims.get("email")):
        if not service_principal_allowed(common_name=common_name):
            raise PermissionDenied(
                f"service token {common_name!r} is not allowed on this Falcon; an operator can "
                "add it in the admin (Service principals) or to FALCON_CF_SERVICE_TOKENS")
        return ServiceIdentity(name=common_name,
                               roles=frozenset({service_role(common_name=common_name)}))
    if not isinstance(sub, str) or not sub or not isinstance(email, str) or not email:
        raise NoIdentity("token has no user identity (empty 'sub' or 'email') and is not an "
                         "allowed service token")
    try:
        user = user_register(user_id=sub, email=email)
    except (Conflict, ValidationFailed) as exc:
        raise NoIdentity(exc.message) from None
    if not user.is_active:
        raise NoIdentity("this user is deactivated; ask an operator")
    return user


@functools.cache
def _user_query() -> tuple[IdsQuery, list[str]]:
    columns = [field.attname for field in User._meta.concrete_fields]
    # The primary key is text: the compiled placeholders are text too.
    return IdsQuery(lambda ids: User.objects.filter(pk__in=ids).values(*columns),
                    sentinel=lambda i: f"\x00{i}"), columns


def user_by_id(user_id: str) -> User | None:
    """Return the user with primary key `user_id`, or None: `User.objects.filter(pk=user_id)
    .first()`, its query compiled once per process (`core.database.prepared.IdsQuery`; every
    write's authentication reads its user)."""
    query, columns = _user_query()
    rows = query([user_id])
    if not rows:
        return None
    return User.from_db(router.db_for_read(User), columns, [rows[0][name] for name in columns])


def user_register(*, user_id: str, email: str) -> User:
    """Return the user with primary key `user_id`, inserting it first if it does not exist.

    Look the user up by `sub`; insert `(sub, email)` if missing; otherwise do nothing. The insert
    is `INSERT IGNORE` (MySQL) / `ON CONFLICT DO NOTHING` (SQLite), so two first requests at once
    make one row and both succeed. It runs in autocommit, so the read after it sees the winner's
    row even under MariaDB's REPEATABLE READ (decisions.md#auth-4).

    Args:
        user_id: the token's `sub` (non-empty).
        email: the token's `email` (non-empty).

    The email is validated and lower-cased (`accounts.emails.normalize_email`), so the same
    address in another case is the same user on every database.

    Raises:
        ValidationFailed: `user_id` is empty, longer than 255 characters or has control
            characters; `email` is not a valid address (the message never echoes it raw).
        Conflict: the email already belongs to another `sub`.
    """
    if not user_id or not email:
        raise ValidationFailed({"sub" if not user_id else "email": [
            "is empty: a user needs both a subject and an email."]})
    # The columns hold 255 characters (docs/limits.md). MySQL's INSERT IGNORE would cut a longer
    # value silently (a warning, not an error), so a different identity could be stored.
    if len(user_id) > 255:
        raise ValidationFailed({"sub": [f"is {len(user_id)} characters; at most 255 are "
                                        "accepted."]})
    if any(ord(c) < 32 or ord(c) == 127 for c in user_id):
        raise ValidationFailed({"sub": ["contains control characters."]})
    try:
        email = normalize_email(email)
    except InvalidEmail as exc:
        raise ValidationFailed({"email": [f"{exc}."]}) from None
    user = user_by_id(user_id)
    if user is not None:
        return user
    User.objects.bulk_create([User(user_id=user_id, email=email, password="!")],
                             ignore_conflicts=True)
    user = user_by_id(user_id)
    if user is None:
        raise Conflict(f"The email {email} is registered to another identity; ask an operator "
                       "to remove the old user.")
    return user
