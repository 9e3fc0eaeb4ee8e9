"""Django authentication backends: a password in the local mode, the Access identity otherwise.

The Django admin is reachable with the same Cloudflare identity for staff users (no separate
password behind Access), and with a password in the local mode. Both backends stay in
`AUTHENTICATION_BACKENDS` and check `FALCON_AUTH_MODE` at run time, so a password can never log
anyone in while the server runs behind Cloudflare Access.
"""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth.backends import ModelBackend


class LocalPasswordBackend(ModelBackend):
    """Django's email + password login, in the local mode only."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        """Return the user for a correct password in the local mode; None otherwise."""
        if settings.FALCON_AUTH_MODE != "local":
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class CloudflareAccessBackend(ModelBackend):
    """Log a user in from a verified Cloudflare Access token (cloudflare mode only).

    Permissions (`has_perm`, groups) are `ModelBackend`'s, so staff users keep the admin rights
    operators give them.
    """

    def authenticate(self, request, cf_access_token: str | None = None, **kwargs):
        """Return the active user the token proves, or None.

        Args:
            request: the HTTP request (unused; part of Django's backend protocol).
            cf_access_token: the `Cf-Access-Jwt-Assertion` value set by Cloudflare Access.

        Raises `authentication.KeysUnavailableError` when the signing keys cannot be had (an
        outage, answered 503). Returns None for a missing or refused token, a service token (services
        have no admin session) or a deactivated user; the reason is logged without the token.
        """
        if settings.FALCON_AUTH_MODE != "cloudflare" or not cf_access_token:
            return None
        from rest_framework import exceptions

        from .authentication import KeysUnavailableError, authenticate_token
        from .models import User

        try:
            principal, _claims = authenticate_token(cf_access_token)
        except KeysUnavailableError:
            raise  # an outage: the middleware answers 503, the session is kept
        except exceptions.APIException:
            return None  # authenticate_token logged the one-line reason
        if not isinstance(principal, User) or not self.user_can_authenticate(principal):
            return None
        return principal
