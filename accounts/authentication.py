"""DRF authentication with access JWTs (Cloudflare Access or the local issuer)."""
from __future__ import annotations

import logging
import time

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models.signals import post_delete, post_save
from rest_framework import authentication, exceptions
from rest_framework.permissions import SAFE_METHODS

from core.errors import PermissionDenied
from core.processes.expiring import ExpiringCache

from .models import User
from .principals import ServiceIdentity
from .services import NoIdentity, principal_from_claims
from .verifier import Credential, InvalidToken, KeysUnavailable, credential_from, default_verifier

log = logging.getLogger(__name__)


def credential_from_request(request) -> Credential | None:
    """Return the credential of a Django request, or None (order: `verifier.credential_from`).

    Args:
        request: a `django.http.HttpRequest` (DRF's wrapper passes `request._request`).
    """
    return credential_from(lambda name: request.headers.get(name), request.COOKIES.get)


class KeysUnavailableError(exceptions.APIException):
    """503 with `Retry-After`: the signing keys cannot be had now (an outage, not a bad token).

    DRF's exception handler turns `wait` into the `Retry-After` header (RFC 9110 10.2.3).
    """

    status_code = 503
    default_code = "unavailable"
    default_detail = "the identity provider's signing keys are unavailable; retry shortly"

    def __init__(self, detail: str, retry_after: int):
        super().__init__(detail)
        self.wait = retry_after


def authenticate_token(token: str, *, cached_user: bool = False):
    """Verify `token` and return `(principal, claims)`; shared by DRF and the admin middleware.

    With `cached_user` (reads: GET, HEAD, OPTIONS), the token's user may come from the
    per-process `UserCache` instead of a query; writes always read it, so a change of `is_staff`
    or `is_active` decides every write at once.

    Returns:
        `(User | ServiceIdentity, claims dict)`.

    Raises:
        KeysUnavailableError: no signing key can be had now (503 with `Retry-After`).
        exceptions.AuthenticationFailed: the token is refused (401 with the one-line reason).
        exceptions.PermissionDenied: a service token operators have not allowed (403).
    """
    try:
        claims = default_verifier().verify(token)
    except KeysUnavailable as exc:
        raise KeysUnavailableError(exc.reason, exc.retry_after) from None
    except InvalidToken as exc:
        # The reason only: the token itself is a credential and never reaches a log.
        log.info("refused a token: %s", exc.reason)
        raise exceptions.AuthenticationFailed(exc.reason) from None
    except ImproperlyConfigured as exc:
        # Settings changed under a running process (tests, reloads): say so, never a 500.
        log.error("auth is misconfigured: %s", exc)
        raise exceptions.AuthenticationFailed("the server's authentication is misconfigured") \
            from None
    cached = _users.get(claims) if cached_user else None
    if cached is not None:
        return cached, claims
    try:
        principal = principal_from_claims(claims)
    except NoIdentity as exc:
        log.info("refused a token: %s", exc.reason)
        raise exceptions.AuthenticationFailed(exc.reason) from None
    except PermissionDenied as exc:
        log.info("refused a service token: %s", exc.message)
        raise exceptions.PermissionDenied(exc.message) from None
    if isinstance(principal, User):
        _users.put(claims, principal)
    return principal, claims


class UserCache:
    """The users of verified tokens, per process: no user query per request.

    Keyed by the token's `sub` and `email`; an entry lives until the token expires, at most
    `FALCON_AUTH_USER_CACHE_SECONDS` (reads may see a deactivation that late; writes never use
    the cache, and a user saved or deleted in this process clears it), and at most
    `max_entries` users are kept (the least recently used go first; `core.processes.expiring`).
    """

    def __init__(self, max_entries: int = 1024):
        self.max_entries = max_entries
        self._entries: ExpiringCache[User] = ExpiringCache(max_entries)

    def get(self, claims: dict) -> User | None:
        """Return the cached user of these claims, or None (absent or expired)."""
        return self._entries.get((claims.get("sub"), claims.get("email")))

    def put(self, claims: dict, user: User) -> None:
        """Keep `user` for these claims until the token's `exp` (bounded, see the class)."""
        limit = time.time() + getattr(settings, "FALCON_AUTH_USER_CACHE_SECONDS", 300)
        exp = claims.get("exp")
        expires = min(limit, float(exp)) if isinstance(exp, (int, float)) else limit
        self._entries.put((claims.get("sub"), claims.get("email")), user, expires_at=expires)

    def clear(self, **_kwargs) -> None:
        """Forget every user (a signal receiver: any user saved or deleted)."""
        self._entries.clear()


_users = UserCache()
post_save.connect(_users.clear, sender=User, dispatch_uid="falcon-auth-user-cache-save")
post_delete.connect(_users.clear, sender=User, dispatch_uid="falcon-auth-user-cache-delete")


def clear_user_cache() -> None:
    """Forget the cached users of this process (tests, after the database was reset)."""
    _users.clear()


def _request_origin(request) -> str | None:
    """The `Origin` header, else the origin (`scheme://host[:port]`) of `Referer`, else None."""
    from urllib.parse import urlsplit

    origin = request.headers.get("Origin")
    if origin and origin != "null":
        return origin.rstrip("/").lower()
    referer = request.headers.get("Referer")
    if referer:
        parts = urlsplit(referer)
        if parts.scheme and parts.netloc:
            return f"{parts.scheme}://{parts.netloc}".lower()
    return None


def enforce_cookie_csrf(request) -> None:
    """Refuse a cross-site unsafe request authenticated by the `CF_Authorization` cookie.

    A browser sends the cookie with a form POST from any site, so the cookie alone proves
    nothing about who made the request (OWASP CSRF cheat sheet; RFC 6454 origins). Accepted:
    an `Origin` (else `Referer`) equal to this server's own origin or one of
    `CSRF_TRUSTED_ORIGINS`, or else a valid Django CSRF token (DRF's
    `SessionAuthentication.enforce_csrf`, Django's `CsrfViewMiddleware` rules). Requests that
    carry their token in a header (the CLI, controllers, Cloudflare's
    `Cf-Access-Jwt-Assertion`) never get here: no browser adds those headers cross-site.

    Raises:
        rest_framework.exceptions.PermissionDenied: 403 naming the missing origin or token.
    """
    origin = _request_origin(request)
    if origin is not None:
        try:
            own = f"{request.scheme}://{request.get_host()}".lower()
        except Exception:  # DisallowedHost: no own origin to match
            own = None
        allowed = {own} | {o.rstrip("/").lower() for o in settings.CSRF_TRUSTED_ORIGINS}
        if origin in allowed:
            return
    try:
        authentication.SessionAuthentication().enforce_csrf(request)
    except exceptions.PermissionDenied:
        raise exceptions.PermissionDenied(
            "CSRF check failed: a request authenticated by the CF_Authorization cookie must "
            "come from this site (Origin or Referer) or carry a CSRF token; API clients send "
            "the token in the Cf-Access-Jwt-Assertion or Authorization header instead.") \
            from None


class AccessJWTAuthentication(authentication.BaseAuthentication):
    """Authenticate with an RS256 access JWT; register the user or admit the service.

    The credential is the one `accounts.verifier.credential_from` picks: `Cf-Access-Jwt-Assertion`,
    `cf-access-token`, `Authorization: Bearer`, then the `CF_Authorization` cookie. No token:
    returns None (DRF then answers 401 unless another scheme succeeds). An unsafe request whose
    credential is the cookie must pass `enforce_cookie_csrf` (403 otherwise), whatever other
    headers it carries. A bad token: 401 with the verifier's one-line reason (a bad Bearer
    beside a good cookie included: no fallback); a service token operators have not allowed:
    403. A person becomes `request.user` as an
    `accounts.User` (registered on first sight); an allowed service token as an
    `accounts.principals.ServiceIdentity`. The token itself is never logged.
    """

    def authenticate(self, request):
        """Return `(principal, claims)` or None; raises DRF's 401/403 exceptions."""
        django_request = request._request
        credential = credential_from_request(django_request)
        if credential is None:
            return None
        if credential.from_cookie and request.method not in SAFE_METHODS:
            # Before the token is verified: a cross-site request learns nothing about it.
            enforce_cookie_csrf(django_request)
        principal, claims = authenticate_token(credential.token,
                                               cached_user=request.method in SAFE_METHODS)
        if isinstance(principal, ServiceIdentity) and request.method not in SAFE_METHODS:
            # Service tokens only read over HTTP; controllers write through gRPC by role
            # (decisions.md#auth-8).
            raise exceptions.PermissionDenied(
                f"{principal.label} may only read over HTTP (GET, HEAD, OPTIONS).")
        return principal, claims

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="falcon"'


class LocalSessionAuthentication(authentication.SessionAuthentication):
    """Django's session login for the browsable API, in the local mode only.

    In the cloudflare mode every API call must carry a token the verifier checks (defence in
    depth): an admin session cookie alone never authenticates an API request.
    """

    def authenticate(self, request):
        if settings.FALCON_AUTH_MODE != "local":
            return None
        return super().authenticate(request)
