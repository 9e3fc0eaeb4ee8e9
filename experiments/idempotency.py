"""Idempotent CreateExp: the `Idempotency-Key` header, the fingerprint of a request and the
replay of the experiment an earlier create with the same key made.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from accounts.models import User
from core.errors import Conflict

from .models import Experiment, IdempotencyKey
from .selectors import exp_get

# Longest idempotency key: a UUID is 36 characters; clients may send their own scheme.
IDEMPOTENCY_KEY_MAX_CHARS = 255
IDEMPOTENCY_HEADER = "Idempotency-Key"


class IdempotencyKeyReused(Conflict):
    """An idempotency key came back with another request body (HTTP 409, gRPC
    FAILED_PRECONDITION): the key is already bound to another request, so the client must send
    a new key for a new request (the IETF draft "The Idempotency-Key HTTP Header Field" allows
    409 or 422 here; 409 is the API's answer to every request that clashes with stored state).
    """

    code = "idempotency_key_reused"


def create_fingerprint(data: dict[str, Any]) -> str:
    """SHA-256 of the validated request, keys sorted: what makes two creates "the same"."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def replayed_create(creator: User, key: str, fingerprint: str) -> Experiment | None:
    """The experiment an earlier create with `key` made, or None when the key is new.

    Raises:
        IdempotencyKeyReused: the earlier create had another request body.
    """
    row = (IdempotencyKey.objects.filter(creator=creator, key=key)
           .values("request_hash", "experiment_id").first())
    if row is None:
        return None
    if row["request_hash"] != fingerprint:
        raise IdempotencyKeyReused(
            f"The {IDEMPOTENCY_HEADER} {key[:80]!r} was already used for experiment "
            f"{row['experiment_id']} with a different request; send a new "
            f"{IDEMPOTENCY_HEADER} for a new experiment.")
    exp = exp_get(exp_id=row["experiment_id"])
    exp.created_jobs = list(exp.jobs.all())
    exp.replayed = True
    return exp
