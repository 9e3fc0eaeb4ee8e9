"""The JWKS key source for Cloudflare Access certs: PyJWKClient plus bounded stale serving.

What PyJWT 2.15.1's `PyJWKClient` already does (read in `jwt/jwks_client.py`): caches the key
set for `lifespan` seconds; refetches at most once per `cooldown_duration` for an unknown `kid`;
does not follow redirects; and on a failed fetch it no longer wipes the cache (pyjwt#1162).
What it does NOT do: once the cached set is older than `lifespan`, `JWKSetCache.get()` answers
None, so every request tries the endpoint again and fails while it is down. A certs outage longer
than the lifespan (5 minutes) is then a total auth outage, and with a slow endpoint every request
waits for the fetch timeout under the client's lock (decisions.md#auth-3).

`ResilientJWKClient` is the thin wrapper that closes that gap: it remembers the last key set it
fetched successfully and, when a fetch fails, keeps serving that set for at most
`stale_seconds` after it was fetched, while retrying the endpoint at most every
`retry_seconds` (so an outage costs one timeout per retry period, not one per request).
An answer without a usable RS256 key (`{}`, `{"keys": []}`, only EC keys) counts as a failed
fetch: it never replaces the last good keys (decisions.md#auth-7).
"""
from __future__ import annotations

import http.client
import logging
import math
import threading
import time
from typing import Any

import jwt
from jwt import PyJWKClient, PyJWKClientConnectionError, PyJWKSet
from jwt.jwk_set_cache import JWKSetCache

log = logging.getLogger(__name__)


class ResilientJWKClient(PyJWKClient):
    """A `PyJWKClient` that survives a certs endpoint outage for a bounded time.

    Args:
        uri: the JWKS URL (http or https), e.g.
            `https://acme.cloudflareaccess.com/cdn-cgi/access/certs`.
        timeout: seconds one fetch may take (connect and read).
        lifespan: seconds a fetched key set is served before it is fetched again.
        cooldown: seconds after a successful fetch during which an unknown `kid` does not
            trigger another fetch (PyJWKClient's rate limit).
        stale_seconds: seconds after its fetch that the last good key set may still be served
            while the endpoint fails; 0 turns stale serving off.
        retry_seconds: after a failed fetch, seconds during which no new fetch is attempted
            (the stale set, or the failure, is answered at once).
        clock: monotonic seconds (tests pass their own): it times the key set's `lifespan`,
            `stale_seconds` and `retry_seconds`. Only PyJWKClient's unknown-`kid` `cooldown`
            stays on its own `time.monotonic`.

    Raises:
        jwt.PyJWKClientError: `uri` is not http(s), or a duration is out of range.
    """

    def __init__(self, uri: str, *, timeout: float, lifespan: float, cooldown: float,
                 stale_seconds: float, retry_seconds: float, clock=time.monotonic):
        super().__init__(uri, cache_keys=False, cache_jwk_set=True, lifespan=lifespan,
                         timeout=timeout, cooldown_duration=cooldown)
        if stale_seconds < 0 or retry_seconds < 0:
            raise jwt.PyJWKClientError("stale_seconds and retry_seconds must be >= 0")
        # PyJWKClient's cache reads `time.monotonic` itself; this one reads `clock`.
        self.jwk_set_cache = ClockedJWKSetCache(lifespan, clock)
        self.stale_seconds = stale_seconds
        self.retry_seconds = retry_seconds
        self._clock = clock
        self._lock = threading.RLock()
        self._last_good: PyJWKSet | None = None
        self._last_good_at: float | None = None  # monotonic time of the fetch that got it
        self._retry_not_before = 0.0
        self._last_error = ""

    def fetch_data(self) -> Any:
        """Fetch the key set (PyJWKClient's fetch), honouring the retry back-off.

        Raises:
            PyJWKClientConnectionError: the endpoint failed now (unreachable, or an answer that
                is not a JSON key set), or failed less than `retry_seconds` ago (no request is
                sent then).
        """
        with self._lock:
            now = self._clock()
            if now < self._retry_not_before:
                raise PyJWKClientConnectionError(
                    f"the certs endpoint failed recently ({self._last_error}); not retrying yet")
            # PyJWKClient caches whatever JSON object it fetched; this class caches only an
            # answer with a usable key (below), so the cache is off during the fetch.
            cache, last_fetch = self.jwk_set_cache, self._last_successful_fetch
            self.jwk_set_cache = None
            try:
                data = super().fetch_data()
                problem = usable_key_problem(data)
                if problem:
                    raise jwt.PyJWKSetError(problem)
            except PyJWKClientConnectionError as exc:
                self._failed(now, type(exc.__cause__ or exc).__name__, last_fetch)
                raise
            except (ValueError, OSError, http.client.HTTPException, jwt.PyJWKClientError,
                    jwt.PyJWKSetError) as exc:
                # PyJWKClient turns only URL, timeout and HTTP-status errors into connection
                # errors; a body that is not JSON (an HTML error page, a truncated answer), a
                # connection reset mid-body, or a key set with no usable RS256 key (`{}`,
                # `{"keys": []}`) is the same outage: back off and keep the last good keys
                # rather than lock everyone out or fail the request with a 500.
                self._failed(now, str(exc) if isinstance(exc, jwt.PyJWKSetError)
                             else type(exc).__name__, last_fetch)
                raise PyJWKClientConnectionError(
                    f"the certs endpoint gave an unusable answer ({self._last_error})") from exc
            finally:
                self.jwk_set_cache = cache
            if cache is not None:
                cache.put(data)
            self._retry_not_before = 0.0
            return data

    def _failed(self, now: float, error: str, last_fetch: float | None) -> None:
        """Record a failed fetch: back off, keep the cooldown clock, warn once per failure.

        Failures are at most one per `retry_seconds` (the back-off), so this warning is
        rate-limited by construction; serving the stale set in between logs nothing.
        """
        self._retry_not_before = now + self.retry_seconds
        self._last_error = error
        self._last_successful_fetch = last_fetch
        if self._last_good is not None and self._last_good_at is not None:
            age = self._clock() - self._last_good_at
            fallback = (f"serving the key set fetched {age:.0f} s ago (allowed up to "
                        f"{self.stale_seconds:.0f} s)" if age <= self.stale_seconds
                        else "the last good key set is too old to serve")
        else:
            fallback = "no key set was ever fetched"
        log.warning("JWKS endpoint %s failed (%s); %s; next attempt in %.0f s", self.uri,
                    error, fallback, self.retry_seconds)

    def retry_after(self) -> int:
        """Seconds (at least 1) until the endpoint will be tried again: for `Retry-After`."""
        with self._lock:
            return max(1, math.ceil(self._retry_not_before - self._clock()))

    def get_jwk_set(self, refresh: bool = False) -> PyJWKSet:
        """Return the key set: cached, freshly fetched, or during an outage the last good one.

        Raises:
            PyJWKClientConnectionError: the endpoint is unreachable and no key set was fetched
                within `stale_seconds`.
        """
        with self._lock:
            try:
                jwk_set = super().get_jwk_set(refresh)
            except PyJWKClientConnectionError:
                stale = self._stale_set()
                if stale is None:
                    raise
                return stale
            if jwk_set is not self._last_good:
                # A cache hit returns the very object stored at the last fetch; anything else
                # came from the endpoint just now.
                self._last_good, self._last_good_at = jwk_set, self._clock()
            return jwk_set

    def _stale_set(self) -> PyJWKSet | None:
        if self._last_good is None or self._last_good_at is None:
            return None
        age = self._clock() - self._last_good_at
        if age > self.stale_seconds:
            return None
        return self._last_good


class ClockedJWKSetCache(JWKSetCache):
    """PyJWT's key set cache, its `lifespan` timed on `clock` (monotonic seconds)."""

    def __init__(self, lifespan: float, clock):
        super().__init__(lifespan)
        self._clock = clock
        self._put_at: float | None = None

    def put(self, jwk_set) -> None:
        super().put(jwk_set)
        self._put_at = None if self.jwk_set_with_timestamp is None else self._clock()

    def is_expired(self) -> bool:
        return (self._put_at is not None and self.lifespan > -1
                and self._clock() > self._put_at + self.lifespan)


def usable_key_problem(data: object) -> str | None:
    """Say why a fetched certs answer has no key this verifier can use, or None when it has one.

    Usable: a JWK (RFC 7517 section 4) with `kty` `RSA`, a `kid`, `use` absent or `sig`, and
    `alg` absent or `RS256` (the only algorithm accepted, decisions.md#dec-auth), that PyJWT
    can load. Cloudflare's certs always carry their current and previous RSA keys ("Validate
    JWTs"), so an answer without one is an outage, not a key rotation.
    """
    if not isinstance(data, dict):
        return "the answer is not a JSON object"
    keys = data.get("keys")
    if not isinstance(keys, list) or not keys:
        return "the answer has no 'keys'"
    for jwk in keys:
        if not isinstance(jwk, dict) or jwk.get("kty") != "RSA" or not jwk.get("kid"):
            continue
        if jwk.get("use", "sig") != "sig" or jwk.get("alg", "RS256") != "RS256":
            continue
        try:
            jwt.PyJWK(jwk)
        except jwt.PyJWTError:
            continue
        return None
    return "the answer has no usable RS256 signing key"
