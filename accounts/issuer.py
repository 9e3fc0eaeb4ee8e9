"""The embedded local token issuer: RS256 JWTs signed with the server's own key.

The local mode stands in for Cloudflare Access (decisions.md#dec-auth): the server signs tokens
shaped like Cloudflare's (`aud` list, `iss`, `sub`, `email`, `iat`, `exp`, `type`) and publishes
its JWKS, and the same verifier checks them. The key is created by `manage.py prepare`
(`falcon_site.startup`), never here: this module only reads it.
"""
from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def new_signing_key_pem() -> bytes:
    """Return a new 2048-bit RSA private key, PEM-encoded (PKCS #8, unencrypted)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_key(path: Path) -> rsa.RSAPrivateKey:
    """Load the PEM private key at `path`.

    Raises:
        ImproperlyConfigured: there is no such file; `manage.py prepare` creates it.
    """
    try:
        pem = path.read_bytes()
    except FileNotFoundError:
        raise ImproperlyConfigured(
            f"The local issuer's signing key {path} does not exist: create it with "
            "`python manage.py prepare`.") from None
    return serialization.load_pem_private_key(pem, password=None)


def local_subject(email: str) -> str:
    """Return the stable `sub` the local issuer gives `email` (a UUID, as Cloudflare's are)."""
    from .emails import email_key

    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"falcon-local:{email_key(email)}"))


@dataclass(frozen=True)
class IssuedToken:
    """A signed token and its expiry (seconds since the epoch)."""

    token: str
    expires_at: int
    subject: str


class LocalIssuer:
    """Sign RS256 tokens and publish the matching JWKS.

    Args:
        key: the RSA private key.
        issuer: the `iss` claim.
        audience: the `aud` values (a list, as Cloudflare sends it).
    """

    def __init__(self, key: rsa.RSAPrivateKey, *, issuer: str, audience: list[str]):
        self.key = key
        self.issuer = issuer
        self.audience = audience
        self.public_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        self.kid = self._thumbprint(self.public_jwk)
        self.public_jwk.update({"kid": self.kid, "use": "sig", "alg": "RS256"})

    @staticmethod
    def _thumbprint(jwk: dict) -> str:
        """RFC 7638 JWK thumbprint: SHA-256 of the required members in lexicographic order."""
        canonical = json.dumps({k: jwk[k] for k in ("e", "kty", "n")}, separators=(",", ":"),
                               sort_keys=True)
        return _b64url(hashlib.sha256(canonical.encode()).digest())

    def jwks(self) -> dict:
        """Return the JSON Web Key Set (RFC 7517) with the one public key."""
        return {"keys": [self.public_jwk]}

    def issue(self, email: str, *, ttl_seconds: int) -> IssuedToken:
        """Sign a token for `email`, valid for `ttl_seconds` seconds from now."""
        now = int(time.time())
        sub = local_subject(email)
        claims = {"aud": self.audience, "iss": self.issuer, "sub": sub, "email": email,
                  "iat": now, "nbf": now, "exp": now + ttl_seconds, "type": "app"}
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": self.kid})
        return IssuedToken(token=token, expires_at=now + ttl_seconds, subject=sub)


@lru_cache(maxsize=1)
def local_issuer() -> LocalIssuer:
    """Return the process's local issuer, with its key read from FALCON_LOCAL_SIGNING_KEY."""
    return LocalIssuer(load_key(Path(settings.FALCON_LOCAL_SIGNING_KEY)),
                       issuer=settings.FALCON_AUTH_ISSUER,
                       audience=list(settings.FALCON_AUTH_AUDIENCE))
