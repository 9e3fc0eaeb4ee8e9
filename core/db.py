"""Bounded retries of transactions that lost a lock conflict (decisions.md#dec-aggregate).

MySQL/MariaDB end a transaction caught in a deadlock (error 1213, the whole transaction is rolled
back) or waiting too long for a row lock (error 1205). Both say "try again": the use cases that
write (`experiments.services`, `jobs.services`, `artifacts.services`) are wrapped in
`retry_on_lock_conflict`, so such an error is retried on the server a few times, with a short
jittered backoff, and reaches a caller only when every attempt lost. The lock order of
`experiments.locks` makes deadlocks rare; the retry makes the rare one invisible.

A function called inside an outer transaction is not retried here: its error rolled back the
outer transaction too, so only the outermost caller can start it again.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import tenacity
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections

log = logging.getLogger("falcon.db")

# MySQL/MariaDB error numbers: ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT.
DEADLOCK = 1213
LOCK_WAIT_TIMEOUT = 1205
RETRYABLE_ERRORS = frozenset({DEADLOCK, LOCK_WAIT_TIMEOUT})
# At most this many attempts in all; waits grow from 10 ms, jittered, capped at 200 ms.
ATTEMPTS = 6

P = ParamSpec("P")
R = TypeVar("R")


def is_lock_conflict(exc: BaseException) -> bool:
    """True for a MySQL/MariaDB deadlock (1213) or lock-wait timeout (1205)."""
    return (isinstance(exc, OperationalError) and bool(exc.args)
            and exc.args[0] in RETRYABLE_ERRORS)


def _log_retry(state: tenacity.RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.info("lock conflict in %s (attempt %d of %d), retrying: %s",
             getattr(state.fn, "__qualname__", state.fn), state.attempt_number, ATTEMPTS, exc)


def retry_on_lock_conflict(func: Callable[P, R]) -> Callable[P, R]:
    """Run `func` (which opens its own transaction) again when it loses a lock conflict.

    Up to `ATTEMPTS` runs; the last error is raised unchanged. Inside an outer
    `transaction.atomic()` the function runs once (see the module docstring).
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if connections[DEFAULT_DB_ALIAS].in_atomic_block:
            return func(*args, **kwargs)
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(ATTEMPTS),
            wait=tenacity.wait_exponential_jitter(multiplier=0.01, max=0.2),
            retry=tenacity.retry_if_exception(is_lock_conflict),
            before_sleep=_log_retry,
            reraise=True,
        )
        return retrying(func, *args, **kwargs)

    return wrapper
