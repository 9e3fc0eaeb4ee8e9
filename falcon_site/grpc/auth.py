"""Who is calling the gRPC API: the internal service token or a user's access JWT.

Every call except gRPC health and reflection carries `authorization: Bearer <token>` (checked by
`falcon_site.grpc.interceptors`). The token is either

- `settings.FALCON_INTERNAL_TOKEN`, the shared secret of the controllers (seed 000, 3.6: they
  reach data only through the API server), compared in constant time; or
- an RS256 access JWT accepted by `accounts.verifier.default_verifier()` (Cloudflare Access or the
  local issuer), whose user is auto-registered as on HTTP (seed 3.4.4).

The principal of the current call is kept in a context variable for the servicers that need it
(CreateExp's creator, AbortExp's actor).
"""
from __future__ import annotations

import contextvars
import hmac
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from falcon_site.errors import FalconError, NotFound, PermissionDenied, ValidationFailed

log = logging.getLogger(__name__)

AUTHORIZATION_KEY = "authorization"


class AuthenticationFailed(Exception):
    """The call carries no usable credentials; `reason` is safe to return and to log."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of one gRPC call.

    Attributes:
        kind: `service` (internal token) or `user` (access JWT).
        user: the `accounts.User` for a `user` principal; None for the service.
    """

    kind: str
    user: Any = None

    @property
    def name(self) -> str:
        """A label for messages and logs: the user's email, or `internal service`."""
        return self.user.email if self.user is not None else "internal service"


SERVICE = Principal(kind="service")
_current: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "falcon_grpc_principal", default=None)


def bearer_token(metadata: Any) -> str | None:
    """Return the token of `authorization: Bearer <token>` in call metadata, or None.

    Args:
        metadata: the call's invocation metadata, a sequence of `(key, value)` pairs.
    """
    for key, value in metadata or ():
        if key.lower() != AUTHORIZATION_KEY or not isinstance(value, str):
            continue
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


def authenticate(metadata: Any) -> Principal:
    """Return the principal the call's bearer token proves.

    Raises:
        AuthenticationFailed: no bearer token, or it is neither the internal token nor a valid
            user JWT (with the verifier's one-line reason; the token is never logged).
    """
    token = bearer_token(metadata)
    if token is None:
        raise AuthenticationFailed("missing 'authorization: Bearer <token>' metadata")
    internal = settings.FALCON_INTERNAL_TOKEN
    if internal and hmac.compare_digest(token.encode(), internal.encode()):
        return SERVICE

    from accounts.services import user_register
    from accounts.verifier import InvalidToken, default_verifier

    try:
        claims = default_verifier().verify(token)
    except InvalidToken as exc:
        log.info("refused a gRPC token: %s", exc.reason)
        raise AuthenticationFailed(
            f"the token is not the internal token and not a valid user token: {exc.reason}"
        ) from None
    sub, email = claims.get("sub"), claims.get("email")
    if not isinstance(sub, str) or not sub or not isinstance(email, str) or not email:
        raise AuthenticationFailed("token has no user identity (empty 'sub' or 'email')")
    try:
        user = user_register(user_id=sub, email=email)
    except FalconError as exc:
        raise AuthenticationFailed(exc.message) from None
    if not user.is_active:
        raise AuthenticationFailed("this user is deactivated; ask an operator")
    return Principal(kind="user", user=user)


def current_principal() -> Principal:
    """Return the principal of the call being served.

    Raises:
        RuntimeError: called outside a call authenticated by the interceptor.
    """
    principal = _current.get()
    if principal is None:
        raise RuntimeError("no authenticated gRPC principal in this context")
    return principal


def set_principal(principal: Principal | None) -> contextvars.Token:
    """Make `principal` the current one; pass the returned token to `reset_principal`."""
    return _current.set(principal)


def reset_principal(token: contextvars.Token) -> None:
    """Restore the principal that was current before `set_principal`."""
    _current.reset(token)


def creator_for(principal: Principal, creator_email: str):
    """Return the user a CreateExp call creates the experiment for.

    A user JWT caller is the creator (seed 3.4.1: the token's email is Experiment.Creator); it
    may repeat its own email in `creator_email` but not name another user. The internal service
    acts for a user and must name one who exists, i.e. has logged in once.

    Raises:
        PermissionDenied: a user names another user as creator.
        ValidationFailed: the service gives no `creator_email`, or no active user has it.
    """
    creator_email = (creator_email or "").strip()
    if principal.user is not None:
        if creator_email and creator_email.lower() != principal.user.email.lower():
            raise PermissionDenied(f"{principal.user.email} cannot create experiments for "
                                   f"{creator_email}; leave creator_email empty.")
        return principal.user
    if not creator_email:
        raise ValidationFailed({"creator_email": [
            "is required with the internal service token: the email of the user the "
            "experiment is created for."]})
    from accounts.selectors import user_get_by_email

    try:
        return user_get_by_email(email=creator_email)
    except NotFound as exc:
        raise ValidationFailed({"creator_email": [exc.message]}) from None
