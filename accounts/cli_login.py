"""The grants of `falcon auth login` in the cloudflare mode (decisions.md#auth-12).

The CLI keeps a random `verifier` and sends only `challenge = BASE64URL(SHA256(verifier))`
(RFC 7636 section 4.2, method S256) with its loopback `port`, a one-time `state` and a short
human `code` it prints. When the user confirms the login page, `grant_create` stores the user's
token under a fresh one-time grant id (only its SHA-256 is kept); the browser carries the id,
never the token, to the CLI's loopback listener; the CLI then calls `grant_redeem` with the id,
the `state` and the `verifier` and receives the token in the response body. A grant is
redeemed at most once and only within `GRANT_TTL_SECONDS`; any redeem attempt, right or
wrong, uses it up, so neither the id nor the verifier can be guessed over several tries.

At rest the token is sealed (AES-256-GCM, RFC 5116) with a key derived from the grant id by
HKDF-SHA256 (RFC 5869). The server keeps only the id's SHA-256, so the key exists only in the
redeem request of the CLI that received the id: whoever reads the table (a backup, a replica,
an SQL injection elsewhere) gets ciphertext, however late. The row is deleted when redeemed,
and once expired by the sweep every grant made, confirmed or redeemed runs, and by
`manage.py clear_cli_login_grants` (decisions.md#dec-sec-auth).
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import re
import secrets

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.utils import timezone

from .models import CliLoginGrant

GRANT_TTL_SECONDS = 120
# RFC 7636 section 4.1: 43-128 characters of [A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~".
VERIFIER = re.compile(r"^[A-Za-z0-9\-._~]{43,128}$")
# RFC 7636 section 4.2: BASE64URL of a SHA-256 digest, without padding, is 43 characters.
CHALLENGE = re.compile(r"^[A-Za-z0-9_\-]{43}$")
STATE = re.compile(r"^[A-Za-z0-9_\-]{16,128}$")
GRANT = re.compile(r"^[A-Za-z0-9_\-]{32,128}$")
# RFC 8628 section 6.1: a user code from a base-20 alphabet without vowels or look-alikes
# (no 0/O, 1/I/L confusion, no words), 8 characters shown as XXXX-XXXX.
CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
CODE = re.compile(rf"^[{CODE_ALPHABET}]{{4}}-[{CODE_ALPHABET}]{{4}}$")


class GrantRefused(Exception):
    """A redeem that hands nothing over; the message names the field and the fix."""


def s256(verifier: str) -> str:
    """RFC 7636 section 4.2: `BASE64URL-ENCODE(SHA256(ASCII(code_verifier)))`, no padding."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _hash(grant_id: str) -> str:
    return hashlib.sha256(grant_id.encode("ascii")).hexdigest()


NONCE_BYTES = 12  # AES-GCM's 96-bit nonce (NIST SP 800-38D 8.2)
_HKDF_INFO = b"falcon cli-login grant token v1"


def _key(grant_id: str) -> bytes:
    """The AES-256 key of a grant's token: HKDF-SHA256 of the grant id (256 random bits)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=_HKDF_INFO).derive(grant_id.encode("ascii"))


def _seal(grant_id: str, key_hash: str, token: str) -> bytes:
    nonce = secrets.token_bytes(NONCE_BYTES)
    # The row's key is the associated data: a sealed token moved to another row does not open.
    return nonce + AESGCM(_key(grant_id)).encrypt(nonce, token.encode("utf-8"),
                                                  key_hash.encode("ascii"))


def _open(grant_id: str, key_hash: str, sealed: bytes) -> str:
    nonce, body = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
    return AESGCM(_key(grant_id)).decrypt(nonce, body, key_hash.encode("ascii")).decode("utf-8")


def grant_sweep(*, now: dt.datetime | None = None) -> int:
    """Delete the grants whose time is over, redeemed or not; return how many.

    Args:
        now: the current time (tests pass their own clock); default `timezone.now()`.
    """
    return CliLoginGrant.objects.filter(expires_at__lte=now or timezone.now()).delete()[0]


def grant_create(*, state: str, challenge: str, token: str, user_id: str,
                 now: dt.datetime | None = None) -> str:
    """Store a one-time grant of `token`, sealed, for the CLI holding `challenge`'s verifier.

    Expired grants nobody redeemed are deleted on the way (`grant_sweep`).

    Args:
        now: the current time (tests pass their own clock); default `timezone.now()`.

    Returns:
        The grant id (43 URL-safe characters) to send to the CLI's loopback listener: the only
        key to the sealed token, never stored.
    """
    now = now or timezone.now()
    grant_sweep(now=now)
    grant_id = secrets.token_urlsafe(32)
    key_hash = _hash(grant_id)
    CliLoginGrant.objects.create(grant_hash=key_hash, state=state, challenge=challenge,
                                 sealed_token=_seal(grant_id, key_hash, token), user_id=user_id,
                                 expires_at=now + dt.timedelta(seconds=GRANT_TTL_SECONDS))
    return grant_id


def grant_redeem(*, grant_id: str, state: str, verifier: str,
                 now: dt.datetime | None = None) -> str:
    """Hand over the token of grant `grant_id` once, to the holder of its verifier.

    The row is deleted before anything is checked (the DELETE is the claim), and expired
    grants with it (`grant_sweep`).

    Args:
        now: the current time (tests pass their own clock); default `timezone.now()`.

    Raises:
        GrantRefused: a malformed field, an unknown, used or expired grant, another `state`,
            or a verifier whose S256 is not the grant's challenge. The grant is used up by
            any attempt that names it.
    """
    if not VERIFIER.fullmatch(verifier):
        raise GrantRefused("verifier must be 43-128 characters of letters, digits, '-', '.', "
                           "'_' or '~' (RFC 7636 section 4.1)")
    if not STATE.fullmatch(state):
        raise GrantRefused("state must be 16-128 characters of letters, digits, '_' or '-'")
    if not GRANT.fullmatch(grant_id):
        raise GrantRefused("grant must be the id the login page sent to the CLI's listener")
    now = now or timezone.now()
    key = _hash(grant_id)
    grant = CliLoginGrant.objects.filter(pk=key).first()
    # The DELETE is the claim: of two redeems racing for one grant only one deletes the row.
    claimed = grant is not None and CliLoginGrant.objects.filter(pk=key).delete()[0] == 1
    grant_sweep(now=now)
    if not claimed:
        raise GrantRefused("grant is unknown or already used; run `falcon auth login` again")
    if grant.expires_at <= now:
        raise GrantRefused(f"grant expired ({GRANT_TTL_SECONDS} s after the confirmation); "
                           "run `falcon auth login` again")
    if not hmac.compare_digest(grant.state.encode(), state.encode()):
        raise GrantRefused("state does not match the login this grant confirmed; run "
                           "`falcon auth login` again")
    if not hmac.compare_digest(grant.challenge.encode(), s256(verifier).encode()):
        raise GrantRefused("verifier does not match the login's challenge (RFC 7636 S256); "
                           "run `falcon auth login` again")
    return _open(grant_id, key, bytes(grant.sealed_token))
