"""Verification of access JWTs (RS256 against a JWKS), shared by HTTP, gRPC and the admin.

The API server verifies every JWT as defence in depth (decisions.md#dec-auth). One
`TokenVerifier` serves both modes; only where its settings come from differs
(`verifier_settings`):

- `local`: the embedded issuer's key (or `FALCON_AUTH_JWKS_URL`), `FALCON_AUTH_AUDIENCE`,
  `FALCON_AUTH_ISSUER`;
- `cloudflare`: the certs of `FALCON_CF_TEAM_DOMAIN` (`<team>/cdn-cgi/access/certs`, or
  `FALCON_CF_CERTS_URL`), the AUD tags of `FALCON_CF_AUDIENCES`, and the team domain as `iss`
  (Cloudflare "Validate JWTs").

Keys from a URL come through `accounts.jwks.ResilientJWKClient` (PyJWKClient, plus serving the
last good key set for a bounded time during a certs outage). Every failure is an `InvalidToken`
with a one-line reason: never a 500, and never the token itself in a message or a log.
"""
from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import jwt
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from core.processes.expiring import ExpiringCache
# One number for every transport: gunicorn's and gRPC's limits are derived from it.
from core.limits.tokens import MAX_TOKEN_BYTES

log = logging.getLogger(__name__)

KID = re.compile(r"^[A-Za-z0-9_.\-=]{1,128}$")
ALGORITHMS = ["RS256"]


class InvalidToken(Exception):
    """The token cannot be accepted; `reason` says why in one line (never the token)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class KeysUnavailable(Exception):
    """No signing key can be had now (certs endpoint down, no last good key set to serve).

    Not the caller's fault: HTTP answers 503 with `Retry-After`, gRPC UNAVAILABLE, never 401
    (clients read 401 as an expired session). `retry_after` is in seconds.
    """

    def __init__(self, reason: str, retry_after: int):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class KeySource(Protocol):
    """Something that returns the signing key for a `kid` (PyJWKClient's interface)."""

    def get_signing_key(self, kid: str) -> jwt.PyJWK: ...


class LocalKeySource:
    """The embedded issuer's public key, without an HTTP round trip to this same server."""

    def get_signing_key(self, kid: str) -> jwt.PyJWK:
        """Return the local key if `kid` matches it. Raises `PyJWKClientError` otherwise."""
        from .issuer import local_issuer

        issuer = local_issuer()
        if kid != issuer.kid:
            raise jwt.PyJWKClientError(f"no key with kid {kid!r} in the local key set")
        return jwt.PyJWK(issuer.public_jwk)


class VerifiedTokens:
    """Tokens this process has verified, by SHA-256 digest, with their claims: bounded, expiring.

    A client sends the same token with every request until it expires; verifying it again (two
    base64 passes, JSON, an RSA signature check) is most of authentication's cost. An entry
    lives until the token's `exp` (the leeway is not granted from the cache: a token past `exp`
    is verified again, and refused once past the leeway too) and at most `max_seconds`, so a key
    removed from the key set stops being honoured within that time; at most `max_entries`
    tokens are kept, the least recently used go first. Only successes are kept: a refused token
    is verified, and refused, each time. The token itself is never kept, only its digest.
    """

    def __init__(self, *, max_seconds: float, max_entries: int = 4096):
        self.max_seconds = max_seconds
        self.max_entries = max_entries
        self._entries: ExpiringCache[dict[str, Any]] = ExpiringCache(max_entries)

    @staticmethod
    def digest(token: str) -> bytes:
        """Return the cache key of `token`."""
        return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()

    def get(self, key: bytes) -> dict[str, Any] | None:
        """Return a copy of the claims cached under `key`, or None (absent or expired)."""
        claims = self._entries.get(key)
        return None if claims is None else dict(claims)

    def put(self, key: bytes, claims: dict[str, Any]) -> None:
        """Keep the claims of a verified token until its `exp`, at most `max_seconds`."""
        exp = claims.get("exp")
        if self.max_seconds <= 0 or not isinstance(exp, (int, float)):
            return
        self._entries.put(key, dict(claims),
                          expires_at=min(time.time() + self.max_seconds, float(exp)))

    def clear(self) -> None:
        """Forget every token."""
        self._entries.clear()


class TokenVerifier:
    """Verify RS256 access tokens.

    Args:
        keys: where signing keys come from (`PyJWKClient` or `LocalKeySource`).
        audiences: accepted `aud` values; a token's `aud` (list or string) must contain one.
        issuer: the required `iss`.
        leeway: clock skew allowed on `exp`, `nbf`, `iat`, in seconds.
        cache_seconds: keep verified tokens this long at most (`VerifiedTokens`); 0 verifies
            every token every time.
    """

    def __init__(self, keys: KeySource, *, audiences: list[str], issuer: str, leeway: int = 30,
                 cache_seconds: float = 0):
        if not audiences:
            raise ValueError("a verifier needs at least one audience: the check is never skipped")
        self.keys = keys
        self.audiences = audiences
        self.issuer = issuer
        self.leeway = leeway
        self.verified = VerifiedTokens(max_seconds=cache_seconds) if cache_seconds > 0 else None

    def _retry_after(self) -> int:
        retry = getattr(self.keys, "retry_after", None)
        return retry() if callable(retry) else 15

    def verify(self, token: str) -> dict[str, Any]:
        """Return the token's claims after checking signature, `alg`, `exp`, `iat`, `iss`, `aud`.

        A token this verifier accepted before and whose cache entry is still live
        (`VerifiedTokens`) is not checked again.

        Raises:
            InvalidToken: any check fails; `reason` is safe to show and to log.
            KeysUnavailable: no signing key can be had now (an outage, not a bad token).
        """
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise InvalidToken(f"token is empty or longer than {MAX_TOKEN_BYTES} bytes")
        if self.verified is None:
            return self._verify(token)
        key = self.verified.digest(token)
        claims = self.verified.get(key)
        if claims is None:
            claims = self._verify(token)
            self.verified.put(key, claims)
        return claims

    def _verify(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("token is not a well-formed JWT") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise InvalidToken(f"token algorithm {alg!r} is not accepted; only RS256 is")
        kid = header.get("kid")
        if not isinstance(kid, str) or not KID.fullmatch(kid):
            raise InvalidToken("token header has no usable 'kid'")
        try:
            key = self.keys.get_signing_key(kid)
        except jwt.PyJWKClientConnectionError:
            # jwks.ResilientJWKClient logged the failure once per fetch; nothing per request.
            raise KeysUnavailable("the identity provider's signing keys are unavailable; "
                                  "retry shortly", self._retry_after()) from None
        except (jwt.PyJWKClientError, jwt.PyJWKSetError, jwt.PyJWKError):
            raise InvalidToken(f"no signing key matches kid {kid!r}") from None
        except Exception:  # whatever a key source does, a request gets a 503, never a 500
            log.exception("unexpected error reading signing keys for kid %s", kid)
            raise KeysUnavailable("the identity provider's signing keys are unavailable; "
                                  "retry shortly", self._retry_after()) from None
        if key.key_type != "RSA":
            raise InvalidToken("the signing key is not an RSA key")
        try:
            claims = jwt.decode(
                token, key.key, algorithms=ALGORITHMS, audience=self.audiences,
                issuer=self.issuer, leeway=self.leeway,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("token has expired; log in again") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken("token is for another audience") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken("token is from another issuer") from None
        except jwt.MissingRequiredClaimError as exc:
            raise InvalidToken(f"token lacks the required claim {exc.claim!r}") from None
        except jwt.ImmatureSignatureError:
            raise InvalidToken("token is not valid yet (nbf/iat in the future)") from None
        except jwt.InvalidSignatureError:
            raise InvalidToken("token signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"token is invalid ({type(exc).__name__})") from None
        for name in ("exp", "iat", "nbf"):
            # RFC 7519 4.1.4-4.1.6: NumericDate values are JSON numbers; PyJWT would also take
            # a numeric string.
            value = claims.get(name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))):
                raise InvalidToken(f"token claim {name!r} is not a number")
        return claims


CF_CERTS_PATH = "/cdn-cgi/access/certs"


def normalize_team_domain(value: str) -> str:
    """Return a Cloudflare team domain as the `iss` Cloudflare puts in its tokens.

    `acme.cloudflareaccess.com`, `https://acme.cloudflareaccess.com/` and the same with upper
    case all give `https://acme.cloudflareaccess.com` ('' stays '').
    """
    value = value.strip().rstrip("/")
    if value and "://" not in value:
        value = f"https://{value}"
    scheme, _, rest = value.partition("://")
    return f"{scheme.lower()}://{rest.lower()}" if value else ""


@dataclass(frozen=True)
class VerifierSettings:
    """Where the verifier's keys come from and what it requires, resolved from settings.

    Attributes:
        mode: `local` or `cloudflare`.
        jwks_url: the key set's URL; '' means the embedded local issuer's key.
        audiences: accepted `aud` values (never empty).
        issuer: the required `iss`.
        leeway: allowed clock skew in seconds.
    """

    mode: str
    jwks_url: str
    audiences: tuple[str, ...]
    issuer: str
    leeway: int


def verifier_settings() -> VerifierSettings:
    """Resolve the verifier's settings for `FALCON_AUTH_MODE`.

    Raises:
        ImproperlyConfigured: cloudflare mode without a team domain or without an audience
            (decisions.md#auth-1: the audience check is never skipped), or local mode without an
            audience.
    """
    leeway = int(settings.FALCON_AUTH_LEEWAY_SECONDS)
    if settings.FALCON_AUTH_MODE == "cloudflare":
        team = normalize_team_domain(settings.FALCON_CF_TEAM_DOMAIN)
        audiences = tuple(a for a in settings.FALCON_CF_AUDIENCES if a)
        if not team or not audiences:
            raise ImproperlyConfigured(
                "FALCON_AUTH_MODE=cloudflare needs FALCON_CF_TEAM_DOMAIN and at least one "
                "FALCON_CF_AUDIENCES tag: the audience check is never skipped.")
        return VerifierSettings(mode="cloudflare",
                                jwks_url=settings.FALCON_CF_CERTS_URL or f"{team}{CF_CERTS_PATH}",
                                audiences=audiences, issuer=team, leeway=leeway)
    audiences = tuple(a for a in settings.FALCON_AUTH_AUDIENCE if a)
    if not audiences:
        raise ImproperlyConfigured("FALCON_AUTH_AUDIENCE is empty: the audience check is never "
                                   "skipped.")
    return VerifierSettings(mode="local", jwks_url=settings.FALCON_AUTH_JWKS_URL,
                            audiences=audiences, issuer=settings.FALCON_AUTH_ISSUER,
                            leeway=leeway)


# The monotonic clock of the process's JWKS key source (`jwks.ResilientJWKClient`): its cache
# lifespan, stale window and retry back-off. Tests replace it (the `cloudflare` fixture) before
# the verifier is built, to pass those times without waiting for them.
jwks_clock: Callable[[], float] = time.monotonic


@lru_cache(maxsize=1)
def default_verifier() -> TokenVerifier:
    """Build the process's verifier from settings (`verifier_settings`), once.

    Raises:
        ImproperlyConfigured: see `verifier_settings`.
    """
    from .jwks import ResilientJWKClient

    conf = verifier_settings()
    if conf.jwks_url:
        keys: KeySource = ResilientJWKClient(
            conf.jwks_url, timeout=settings.FALCON_AUTH_JWKS_TIMEOUT_SECONDS,
            lifespan=settings.FALCON_AUTH_JWKS_LIFESPAN_SECONDS,
            cooldown=settings.FALCON_AUTH_JWKS_COOLDOWN_SECONDS,
            stale_seconds=settings.FALCON_AUTH_JWKS_STALE_SECONDS,
            retry_seconds=settings.FALCON_AUTH_JWKS_RETRY_SECONDS, clock=jwks_clock)
    else:
        keys = LocalKeySource()
    return TokenVerifier(keys, audiences=list(conf.audiences), issuer=conf.issuer,
                         leeway=conf.leeway,
                         cache_seconds=getattr(settings, "FALCON_AUTH_TOKEN_CACHE_SECONDS", 0))


# Where a request carries its token, in the one order every path follows (HTTP's DRF
# authentication, the admin, gRPC; decisions.md#dec-sec-auth): the header Cloudflare Access sets at
# the origin (recommended over the cookie, which is not guaranteed), the header a CLI sends to the
# edge (`cloudflared access curl` uses it), the standard bearer header (RFC 6750) used by direct
# callers and the local mode, and last the Access cookie, which a browser also sends with a
# cross-site form. A header a client chose to send wins over the cookie its browser adds: a bad
# `Authorization: Bearer` is refused (401), never a fallback to the cookie.
TOKEN_HEADERS = ("cf-access-jwt-assertion", "cf-access-token")
TOKEN_COOKIE = "CF_Authorization"


@dataclass(frozen=True)
class Credential:
    """The access token a request or call presents, and where it came from.

    Attributes:
        token: the token, stripped (possibly malformed: the verifier refuses it with a reason).
        source: the header or metadata key (`cf-access-jwt-assertion`, `cf-access-token`,
            `authorization`), or `cookie` for `CF_Authorization`.
    """

    token: str
    source: str

    @property
    def from_cookie(self) -> bool:
        """True when a browser cookie carries it: an unsafe request must then pass the CSRF
        check (`accounts.authentication.enforce_cookie_csrf`)."""
        return self.source == "cookie"


def credential_from(header: Callable[[str], str | None],
                    cookie: Callable[[str], str | None] = lambda name: None
                    ) -> Credential | None:
    """Return the credential a request or call presents, or None when it presents none.

    The only place that decides which credential is used (order: the comment above
    `TOKEN_HEADERS`). A present but malformed value is returned as it is, so the verifier
    refuses it with a reason rather than the caller looking unauthenticated; an `Authorization`
    header of another scheme (Basic, ...) is not an access token and is passed over.

    Args:
        header: returns a header's (or gRPC metadata key's) value by lower-case name, or None.
        cookie: returns a cookie's value by name, or None (gRPC has no cookies).
    """
    for name in TOKEN_HEADERS:
        value = header(name)
        if isinstance(value, str) and value.strip():
            return Credential(value.strip(), name)
    auth = header("authorization")
    if isinstance(auth, str):
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer":
            # `Bearer` with nothing after it is a credential too, and an empty one: refused.
            return Credential(value.strip(), "authorization")
    value = cookie(TOKEN_COOKIE)
    if isinstance(value, str) and value.strip():
        return Credential(value.strip(), "cookie")
    return None


def token_from(header: Callable[[str], str | None],
               cookie: Callable[[str], str | None] = lambda name: None) -> str | None:
    """Return the token of `credential_from(header, cookie)`, or None when there is none."""
    credential = credential_from(header, cookie)
    return None if credential is None else credential.token


@receiver(setting_changed)
def _reset_on_settings_change(setting: str, **kwargs) -> None:
    if (setting.startswith(("FALCON_AUTH", "FALCON_CF_"))
            or setting == "FALCON_LOCAL_SIGNING_KEY"):
        default_verifier.cache_clear()
        from .issuer import local_issuer

        local_issuer.cache_clear()
