"""Verification of access JWTs (RS256 against a JWKS), shared by HTTP and gRPC.

Seed 000, 3.4: the API server verifies every JWT as defence in depth. Keys come from a JWKS
URL through PyJWT's `PyJWKClient` (which keeps the last good key set when a fetch fails and
rate-limits refetches for unknown `kid`s), or, in the local mode without a URL, straight from the
embedded issuer. Every failure is an `InvalidToken` with a one-line reason: never a 500.
"""
from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any, Protocol

import jwt
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

log = logging.getLogger(__name__)

MAX_TOKEN_BYTES = 16 * 1024  # Cloudflare tokens are ~1 KB; refuse anything absurd before parsing
KID = re.compile(r"^[A-Za-z0-9_.\-=]{1,128}$")
ALGORITHMS = ["RS256"]


class InvalidToken(Exception):
    """The token cannot be accepted; `reason` says why in one line (never the token)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


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


class TokenVerifier:
    """Verify RS256 access tokens.

    Args:
        keys: where signing keys come from (`PyJWKClient` or `LocalKeySource`).
        audiences: accepted `aud` values; a token's `aud` (list or string) must contain one.
        issuer: the required `iss`.
        leeway: clock skew allowed on `exp`, `nbf`, `iat`, in seconds.
    """

    def __init__(self, keys: KeySource, *, audiences: list[str], issuer: str, leeway: int = 30):
        if not audiences:
            raise ValueError("a verifier needs at least one audience: the check is never skipped")
        self.keys = keys
        self.audiences = audiences
        self.issuer = issuer
        self.leeway = leeway

    def verify(self, token: str) -> dict[str, Any]:
        """Return the token's claims after checking signature, `alg`, `exp`, `iat`, `iss`, `aud`.

        Raises:
            InvalidToken: any check fails; `reason` is safe to show and to log.
        """
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise InvalidToken(f"token is empty or longer than {MAX_TOKEN_BYTES} bytes")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("token is not a well-formed JWT") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise InvalidToken(f"token algorithm {alg!r} is not accepted; only RS256 is")
        kid = header.get("kid")
        if not isinstance(kid, str) or not KID.match(kid):
            raise InvalidToken("token header has no usable 'kid'")
        try:
            key = self.keys.get_signing_key(kid)
        except jwt.PyJWKClientConnectionError:
            log.warning("JWKS fetch failed while verifying a token with kid %s", kid)
            raise InvalidToken("signing keys are unavailable; try again shortly") from None
        except (jwt.PyJWKClientError, jwt.PyJWKSetError, jwt.PyJWKError):
            raise InvalidToken(f"no signing key matches kid {kid!r}") from None
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
        return claims


@lru_cache(maxsize=1)
def default_verifier() -> TokenVerifier:
    """Build the process's verifier from settings (`FALCON_AUTH_*`)."""
    if settings.FALCON_AUTH_JWKS_URL:
        keys: KeySource = jwt.PyJWKClient(settings.FALCON_AUTH_JWKS_URL, timeout=3,
                                          lifespan=300, cooldown_duration=30)
    else:
        keys = LocalKeySource()
    return TokenVerifier(keys, audiences=list(settings.FALCON_AUTH_AUDIENCE),
                         issuer=settings.FALCON_AUTH_ISSUER,
                         leeway=settings.FALCON_AUTH_LEEWAY_SECONDS)


@receiver(setting_changed)
def _reset_on_settings_change(setting: str, **kwargs) -> None:
    if setting.startswith("FALCON_AUTH") or setting == "FALCON_LOCAL_SIGNING_KEY":
        default_verifier.cache_clear()
        from .issuer import local_issuer

        local_issuer.cache_clear()
