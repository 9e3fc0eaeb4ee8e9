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
"""
from __future__ import annotations

import http.client

import logging
import threading
import time
from typing import Any

import jwt
from jwt import PyJWKClient, PyJWKClientConnectionError, PyJWKSet

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
        clock: monotonic seconds (tests pass their own).

    Raises:
        jwt.PyJWKClientError: `uri` is not http(s), or a duration is out of range.
    """

    def __init__(self, uri: str, *, timeout: float, lifespan: float, cooldown: float,
                 stale_seconds: float, retry_seconds: float, clock=time.monotonic):
        super().__init__(uri, cache_keys=False, cache_jwk_set=True, lifespan=lifespan,
                         timeout=timeout, cooldown_duration=cooldown)
        if stale_seconds < 0 or retry_seconds < 0:
            raise jwt.PyJWKClientError("stale_seconds and retry_seconds must be >= 0")
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
            try:
                data = super().fetch_data()
            except PyJWKClientConnectionError as exc:
                self._retry_not_before = now + self.retry_seconds
                self._last_error = type(exc.__cause__ or exc).__name__
                raise
            except (ValueError, OSError, http.client.HTTPException, jwt.PyJWKClientError) as exc:
                # PyJWKClient turns only URL, timeout and HTTP-status errors into connection
                # errors; a body that is not JSON (an HTML error page, a truncated answer) or a
                # connection reset mid-body is the same outage: back off and keep the last
                # good keys rather than fail the request with a 500.
                self._retry_not_before = now + self.retry_seconds
                self._last_error = type(exc).__name__
                raise PyJWKClientConnectionError(
                    f"the certs endpoint gave an unusable answer ({type(exc).__name__})") from exc
            self._retry_not_before = 0.0
            return data

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
        log.warning("JWKS endpoint %s is failing (%s); serving the key set fetched %.0f s ago "
                    "(allowed up to %.0f s)", self.uri, self._last_error, age,
                    self.stale_seconds)
        return self._last_good
