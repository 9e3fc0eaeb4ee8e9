"""DRF authentication with access JWTs (Cloudflare Access or the local issuer)."""
from __future__ import annotations

import logging

from rest_framework import authentication, exceptions

from falcon_site.errors import FalconError

from .services import user_register
from .verifier import InvalidToken, default_verifier

log = logging.getLogger(__name__)

HEADER = "HTTP_CF_ACCESS_JWT_ASSERTION"  # Cf-Access-Jwt-Assertion, set by Cloudflare Access
COOKIE = "CF_Authorization"


def token_from_request(request) -> str | None:
    """Return the token from `Cf-Access-Jwt-Assertion`, the `CF_Authorization` cookie or
    `Authorization: Bearer`, in that order (Cloudflare recommends the header); None if absent."""
    meta = request.META
    if meta.get(HEADER):
        return meta[HEADER].strip()
    if request.COOKIES.get(COOKIE):
        return request.COOKIES[COOKIE].strip()
    auth = meta.get("HTTP_AUTHORIZATION", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


class AccessJWTAuthentication(authentication.BaseAuthentication):
    """Authenticate with an RS256 access JWT and auto-register the user (seed 3.4.4).

    No token: returns None (DRF then answers 401 unless another scheme succeeds). A bad token:
    401 with the verifier's one-line reason; the token itself is never logged.
    """

    def authenticate(self, request):
        token = token_from_request(request._request)
        if token is None:
            return None
        try:
            claims = default_verifier().verify(token)
        except InvalidToken as exc:
            log.info("refused a token: %s", exc.reason)
            raise exceptions.AuthenticationFailed(exc.reason) from None
        sub, email = claims.get("sub"), claims.get("email")
        if not isinstance(sub, str) or not sub or not isinstance(email, str) or not email:
            raise exceptions.AuthenticationFailed(
                "token has no user identity (empty 'sub' or 'email'); service tokens cannot "
                "use this API")
        try:
            user = user_register(user_id=sub, email=email)
        except FalconError as exc:
            raise exceptions.AuthenticationFailed(exc.message) from None
        if not user.is_active:
            raise exceptions.AuthenticationFailed("this user is deactivated; ask an operator")
        return user, claims

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="falcon"'
