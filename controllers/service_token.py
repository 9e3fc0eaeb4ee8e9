"""Where a controller gets the token it sends to the gRPC API.

- local mode: the internal static token (`FALCON_INTERNAL_TOKEN`), which the API server accepts
  in the local mode only;
- cloudflare mode: a Cloudflare Access service token. Access exchanges a service token's
  `CF-Access-Client-Id` / `CF-Access-Client-Secret` headers, sent to any URL of the protected
  application, for a JWT it returns in the `CF_Authorization` cookie (Cloudflare docs, "Service
  tokens"). That JWT (`common_name` = the client id, empty `sub`) is what the API server's
  verifier accepts for a service principal an operator allowed. It is cached until shortly
  before its `exp` and fetched again then.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import jwt

TokenSource = Callable[[], str]


class CredentialsError(Exception):
    """No token could be obtained; the message says why (never the secret)."""

    retryable = True  # the next tick tries again (runcontroller treats it as transient)


class CloudflareServiceToken:
    """A `TokenSource` that exchanges a Cloudflare Access service token for its JWT.

    Args:
        url: an Access-protected URL of the Falcon application, e.g.
            `https://falcon.example.com/api/v1/auth/config`.
        client_id: the service token's Client ID (`CF-Access-Client-Id`).
        client_secret: its Client Secret (`CF-Access-Client-Secret`).
        margin: seconds before the JWT's `exp` at which it is fetched again.
        timeout: seconds for the exchange request.
        client: an `httpx.Client` to use (tests); one is made otherwise.
    """

    def __init__(self, url: str, client_id: str, client_secret: str, *, margin: float = 300.0,
                 timeout: float = 5.0, client: httpx.Client | None = None):
        if not (url and client_id and client_secret):
            raise ValueError("a Cloudflare service token needs the URL, client id and secret")
        self.url = url
        self.margin = margin
        self._headers = {"CF-Access-Client-Id": client_id,
                         "CF-Access-Client-Secret": client_secret}
        self._client = client or httpx.Client(timeout=timeout, follow_redirects=False)
        self._lock = threading.Lock()
        self._token = ""
        self._expires_at = 0.0
        self.fetches = 0

    def __call__(self) -> str:
        """Return a JWT valid for at least `margin` seconds more.

        Raises:
            CredentialsError: Access refused the service token or returned no JWT.
        """
        with self._lock:
            if self._token and time.time() < self._expires_at - self.margin:
                return self._token
            self._token, self._expires_at = self._fetch()
            return self._token

    def _fetch(self) -> tuple[str, float]:
        self.fetches += 1
        try:
            response = self._client.get(self.url, headers=self._headers)
        except httpx.HTTPError as exc:
            raise CredentialsError(f"cannot reach {self.url} for a service token: {exc}") from None
        token = response.cookies.get("CF_Authorization")
        if not token:
            raise CredentialsError(
                f"{self.url} answered HTTP {response.status_code} without a CF_Authorization "
                "cookie: check the service token's client id and secret and that the Access "
                "application has a Service Auth policy for it")
        try:
            exp = jwt.decode(token, options={"verify_signature": False})["exp"]
        except (jwt.PyJWTError, KeyError):
            raise CredentialsError(f"{self.url} returned a CF_Authorization cookie that is not "
                                   "a JWT with an exp claim") from None
        return token, float(exp)


def token_source_from_settings() -> TokenSource:
    """The controllers' token source for the configured auth mode.

    Raises:
        django.core.exceptions.ImproperlyConfigured: the mode's credentials are not set.
    """
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    if settings.FALCON_AUTH_MODE == "local":
        token = settings.FALCON_INTERNAL_TOKEN
        if not token:
            raise ImproperlyConfigured("FALCON_INTERNAL_TOKEN is empty: controllers need the "
                                       "API server's internal token to call its gRPC API.")
        return lambda: token
    url, client_id, secret = (settings.FALCON_CONTROLLER_ACCESS_URL,
                              settings.FALCON_CF_CLIENT_ID, settings.FALCON_CF_CLIENT_SECRET)
    if not (url and client_id and secret):
        raise ImproperlyConfigured(
            "In the cloudflare mode controllers authenticate with a Cloudflare Access service "
            "token: set FALCON_CONTROLLER_ACCESS_URL (an Access-protected Falcon URL), "
            "FALCON_CF_CLIENT_ID and FALCON_CF_CLIENT_SECRET, and allow the token's client id "
            "as a service principal (FALCON_CF_SERVICE_TOKENS or the admin).")
    return CloudflareServiceToken(url, client_id, secret)
