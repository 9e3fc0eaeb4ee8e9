"""Verified tokens are kept per process by digest: a repeated token is not verified again, an
expired or changed one is, and the cache stays bounded."""
from __future__ import annotations

import time

import jwt
import pytest

from accounts.tests.cloudflare import AUD, TEAM, signing_key
from accounts.verifier import InvalidToken, TokenVerifier, VerifiedTokens


class CountingKeys:
    """A key source serving one key, counting the lookups (one per full verification)."""

    def __init__(self, key):
        self.key = key
        self.lookups = 0

    def get_signing_key(self, kid: str) -> jwt.PyJWK:
        self.lookups += 1
        if kid != self.key.kid:
            raise jwt.PyJWKClientError("unknown kid")
        return jwt.PyJWK(self.key.jwk)


@pytest.fixture
def key():
    return signing_key("current")


def sign(key, **overrides) -> str:
    now = int(time.time())
    claims = {"aud": [AUD], "iss": TEAM, "email": "bob@example.com", "sub": "s", "iat": now,
              "exp": now + 3600, **overrides}
    return jwt.encode(claims, key.private, algorithm="RS256", headers={"kid": key.kid})


def verifier(key, cache_seconds=60):
    keys = CountingKeys(key)
    return TokenVerifier(keys, audiences=[AUD], issuer=TEAM, cache_seconds=cache_seconds), keys


def test_a_repeated_token_is_verified_once(key):
    v, keys = verifier(key)
    token = sign(key)
    first, second = v.verify(token), v.verify(token)
    assert first == second and first["email"] == "bob@example.com" and keys.lookups == 1
    second["email"] = "mallory@example.com"  # callers get copies
    assert v.verify(token)["email"] == "bob@example.com"


def test_without_a_cache_every_request_is_verified(key):
    v, keys = verifier(key, cache_seconds=0)
    token = sign(key)
    v.verify(token), v.verify(token)
    assert keys.lookups == 2


def test_a_changed_token_is_verified_and_refused(key):
    v, keys = verifier(key)
    token = sign(key)
    v.verify(token)
    head, body, sig = token.split(".")
    forged = ".".join([head, body, sig[:-4] + ("AAAA" if sig[-4:] != "AAAA" else "BBBB")])
    with pytest.raises(InvalidToken):
        v.verify(forged)
    with pytest.raises(InvalidToken):
        v.verify(forged)  # refusals are not cached either
    assert keys.lookups == 3


def test_an_entry_ends_with_the_token(key):
    keys = CountingKeys(key)
    # A token just past its `exp` but inside the leeway verifies; its cache entry ends at
    # `exp`, so the leeway is never granted from the cache.
    v = TokenVerifier(keys, audiences=[AUD], issuer=TEAM, leeway=30, cache_seconds=60)
    token = sign(key, exp=int(time.time()) - 5)
    v.verify(token)
    # Past exp and (now) past the leeway: verified again, and refused.
    v.leeway = 0
    with pytest.raises(InvalidToken, match="expired"):
        v.verify(token)
    assert keys.lookups == 2


def test_during_a_key_outage_only_recently_verified_tokens_pass(key):
    from accounts.verifier import KeysUnavailable

    v, keys = verifier(key, cache_seconds=60)
    known = sign(key)
    v.verify(known)

    def down(kid):
        raise jwt.PyJWKClientConnectionError("certs down")
    keys.get_signing_key = down
    assert v.verify(known)["email"] == "bob@example.com"  # for at most the cache's seconds
    with pytest.raises(KeysUnavailable):
        v.verify(sign(key, email="carol@example.com"))


def test_an_entry_ends_after_the_cache_seconds(key, monkeypatch):
    v, keys = verifier(key, cache_seconds=10)
    now = time.time()
    token = sign(key)
    v.verify(token)
    monkeypatch.setattr(time, "time", lambda: now + 11)
    v.verify(token)
    assert keys.lookups == 2


def test_the_cache_is_bounded_and_keeps_digests_only():
    cache = VerifiedTokens(max_seconds=60, max_entries=3)
    exp = time.time() + 60
    tokens = [f"token-{i}" for i in range(5)]
    for token in tokens:
        cache.put(cache.digest(token), {"exp": exp})
    assert [cache.get(cache.digest(t)) is not None for t in tokens] == [False, False, True, True,
                                                                       True]
    assert all(len(key) == 32 for key in cache._entries)


def test_the_process_verifier_caches_for_the_configured_time(settings):
    from accounts.verifier import default_verifier

    settings.FALCON_AUTH_TOKEN_CACHE_SECONDS = 0
    assert default_verifier().verified is None
    settings.FALCON_AUTH_TOKEN_CACHE_SECONDS = 30
    assert default_verifier().verified.max_seconds == 30
