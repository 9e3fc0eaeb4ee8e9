"""An offline Cloudflare Access for tests: a certs endpoint on loopback and tokens signed here.

Loaded as a pytest plugin by the root conftest, so every app's tests can use the `cloudflare`
fixture. The certs document has Cloudflare's shape (Cloudflare "Validate JWTs"): `keys` (a JWKS
with the current and previous key), plus `public_cert` and `public_certs` (PEM copies), which
the verifier must never read. Tokens carry Cloudflare's claims.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from core.testing import FakeClock

TEAM = "https://acme.cloudflareaccess.com"
AUD = "4714c1358e65fe4b408ad6d432a5f878f08194bdb4752441fd56faefa9b2b6f2"
OTHER_AUD = "d7b3c9f0aa11223344556677889900aabbccddeeff00112233445566778899aa"
CERTS_PATH = "/cdn-cgi/access/certs"
# Longest a held request of `CertsServer` waits: a bound for a test that forgets to release it.
HOLD_SECONDS = 60.0


@dataclass(frozen=True)
class SigningKey:
    """An RSA key pair as Cloudflare publishes it: JWK (with `kid`) and a PEM certificate."""

    kid: str
    private: rsa.RSAPrivateKey

    @property
    def jwk(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key()))
        jwk.update({"kid": self.kid, "alg": "RS256", "use": "sig"})
        return jwk

    @property
    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    @property
    def cert_pem(self) -> str:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "acme.cloudflareaccess.com")])
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(self.private.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(days=1))
                .not_valid_after(now + dt.timedelta(days=60))
                .sign(self.private, hashes.SHA256()))
        return cert.public_bytes(serialization.Encoding.PEM).decode()


@lru_cache(maxsize=None)
def signing_key(name: str) -> SigningKey:
    """Return the test key called `name` (generated once per test run: RSA is slow)."""
    return SigningKey(kid=uuid.uuid5(uuid.NAMESPACE_URL, f"cf-test:{name}").hex,
                      private=rsa.generate_private_key(public_exponent=65537, key_size=2048))


def certs_document(keys: list[SigningKey], *, cert_of: SigningKey | None = None,
                   extra_jwks: list[dict] | None = None) -> dict[str, Any]:
    """Cloudflare's certs document for `keys` (current first).

    Args:
        keys: the keys published in `keys` and `public_certs`.
        cert_of: whose certificate to put in `public_cert` (default: the first key); tests pass
            a key NOT in `keys` to prove the verifier never reads `public_cert`.
        extra_jwks: raw JWKs appended to `keys` (non-RSA keys and other bad input).
    """
    head = cert_of or keys[0]
    return {
        "keys": [k.jwk for k in keys] + list(extra_jwks or []),
        "public_cert": {"kid": head.kid, "cert": head.cert_pem},
        "public_certs": [{"kid": k.kid, "cert": k.cert_pem} for k in keys],
    }


class CertsServer:
    """A Cloudflare-shaped certs endpoint on 127.0.0.1 (a thread; stop with `close`).

    Attributes (tests change them while it runs):
        document: the JSON served at `/cdn-cgi/access/certs`.
        status: the HTTP status answered (503 simulates an outage).
        hold: an event each request waits for (at most `HOLD_SECONDS`) before it is answered:
            a slow endpoint, whose answer lands only after the test sets it (or `close`).
        raw_body: bytes served instead of the document (an HTML error page, truncated JSON).
        hits: how many requests reached the endpoint.
    """

    def __init__(self, document: dict[str, Any]):
        self.document = document
        self.status = 200
        self.hold: threading.Event | None = None
        self.raw_body: bytes | None = None
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                owner.hits += 1
                if owner.hold is not None:
                    owner.hold.wait(HOLD_SECONDS)
                if self.path != CERTS_PATH:
                    self.send_error(404)
                    return
                body = (owner.raw_body if owner.raw_body is not None
                        else json.dumps(owner.document).encode())
                try:
                    self.send_response(owner.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out first (the slow-endpoint test)

            def log_message(self, format, *args) -> None:  # noqa: A002
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{CERTS_PATH}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()  # a held request ends now
        self._server.shutdown()
        self._server.server_close()


@dataclass
class CloudflareAccess:
    """The test double of one Access team: its certs endpoint, keys, and a token signer."""

    certs: CertsServer
    current: SigningKey
    previous: SigningKey
    # The key source's monotonic clock (`accounts.verifier.jwks_clock`): the cache lifespan,
    # the stale window and the retry back-off pass when a test advances it.
    clock: FakeClock = field(default_factory=FakeClock)
    issued: list[str] = field(default_factory=list)

    def claims(self, **overrides) -> dict[str, Any]:
        """A person's claims, as Access signs them; `name=None` drops a claim."""
        now = int(time.time())
        base = {"aud": [AUD], "email": "bob@example.com", "sub": "cf-sub-bob",
                "iss": TEAM, "iat": now, "nbf": now, "exp": now + 3600, "type": "app",
                "identity_nonce": "n0nce", "country": "US"}
        base.update(overrides)
        return {k: v for k, v in base.items() if v is not None}

    def service_claims(self, common_name: str, **overrides) -> dict[str, Any]:
        """A service token's claims: `common_name`, empty `sub`, no `email`."""
        now = int(time.time())
        base = {"aud": [AUD], "common_name": common_name, "sub": "", "iss": TEAM,
                "iat": now, "nbf": now, "exp": now + 3600, "type": "app"}
        base.update(overrides)
        return {k: v for k, v in base.items() if v is not None}

    def sign(self, claims: dict[str, Any] | None = None, *, key: SigningKey | None = None,
             kid: str | None = None, alg: str = "RS256", **overrides) -> str:
        """Sign `claims` (default: a person's, with `overrides`) as Access would."""
        key = key or self.current
        token = jwt.encode(claims if claims is not None else self.claims(**overrides),
                           key.private, algorithm=alg,
                           headers={"kid": key.kid if kid is None else kid})
        self.issued.append(token)
        return token

    def publish(self, keys: list[SigningKey], **kwargs) -> None:
        """Serve a new certs document (a key rotation)."""
        self.certs.document = certs_document(keys, **kwargs)


@pytest.fixture
def cloudflare(settings, monkeypatch) -> Iterator[CloudflareAccess]:
    """Run Falcon in the cloudflare mode against an offline Access team.

    The certs URL is overridden to the loopback endpoint (`FALCON_CF_CERTS_URL`); the issuer is
    the real-looking team domain. JWKS timings are production's except a 1 s fetch timeout;
    they run on the fake `clock` of the returned `CloudflareAccess`.
    """
    from accounts import verifier

    current, previous = signing_key("current"), signing_key("previous")
    server = CertsServer(certs_document([current, previous]))
    access = CloudflareAccess(certs=server, current=current, previous=previous)
    monkeypatch.setattr(verifier, "jwks_clock", access.clock)
    verifier.default_verifier.cache_clear()
    settings.FALCON_AUTH_MODE = "cloudflare"
    settings.FALCON_CF_TEAM_DOMAIN = TEAM
    settings.FALCON_CF_CERTS_URL = server.url
    settings.FALCON_CF_AUDIENCES = [AUD]
    settings.FALCON_CF_SERVICE_TOKENS = []
    settings.FALCON_AUTH_JWKS_TIMEOUT_SECONDS = 1.0
    try:
        yield access
    finally:
        server.close()


@pytest.fixture
def uncached_tokens(settings):
    """Verify every request's token (no `VerifiedTokens` cache): for tests of the key set.

    A token verified in the last `FALCON_AUTH_TOKEN_CACHE_SECONDS` is honoured without a key
    (accounts/tests/test_verified_tokens.py); tests of fetching, outages and stale keys watch
    each request reach the key source.
    """
    settings.FALCON_AUTH_TOKEN_CACHE_SECONDS = 0



class AccessEdge:
    """Cloudflare Access's edge for service tokens, on 127.0.0.1 (a thread; stop with `close`).

    A GET carrying a known `CF-Access-Client-Id` / `CF-Access-Client-Secret` pair answers 200
    with the service token's JWT in the `CF_Authorization` cookie (Cloudflare docs, "Service
    tokens"), signed by `access`; any other pair answers 403. This is what the controllers'
    `controllers.service_token.CloudflareServiceToken` exchanges its secret at.

    Attributes:
        url: an "Access-protected" URL to give as `FALCON_CONTROLLER_ACCESS_URL`.
        ttl: lifetime in seconds of the JWTs handed out.
        hits: client id -> how many exchanges it made (refused ones under `""`).
    """

    def __init__(self, access: CloudflareAccess, clients: dict[str, str], ttl: int = 3600):
        self.ttl = ttl
        self.hits: dict[str, int] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                client_id = self.headers.get("CF-Access-Client-Id", "")
                known = client_id in clients and \
                    self.headers.get("CF-Access-Client-Secret") == clients[client_id]
                owner.hits[client_id if known else ""] = \
                    owner.hits.get(client_id if known else "", 0) + 1
                if known:
                    now = int(time.time())
                    token = access.sign(access.service_claims(
                        client_id, iat=now, nbf=now, exp=now + owner.ttl))
                    self.send_response(200)
                    self.send_header("Set-Cookie", f"CF_Authorization={token}; Path=/; HttpOnly")
                else:
                    self.send_response(403)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format, *args) -> None:  # noqa: A002 (keep tokens out)
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/api/v1/auth/config"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def offline_access() -> Iterator[CloudflareAccess]:
    """An offline Access team (certs endpoint and signer) outside any test's settings: for
    platforms started as separate processes, which get `TEAM`, `AUD` and `certs.url` through
    their environment."""
    current, previous = signing_key("current"), signing_key("previous")
    server = CertsServer(certs_document([current, previous]))
    try:
        yield CloudflareAccess(certs=server, current=current, previous=previous)
    finally:
        server.close()
