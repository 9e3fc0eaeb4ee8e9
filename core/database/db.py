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


# Errors that say "the database cannot serve you now, try again": the server is gone or
# restarting, the connection was lost or refused, too many connections, and the lock conflicts
# above. MySQL/MariaDB client errors 2002, 2003, 2006, 2013, 2055 (no connection, lost), server
# errors 1040 (too many connections), 1053 (shutting down), 1927 (connection killed), 4031
# (idle connection closed by the server).
UNAVAILABLE_ERRORS = RETRYABLE_ERRORS | frozenset({1040, 1053, 1927, 2002, 2003, 2006, 2013,
                                                   2055, 4031})
# SQLite says the same in words: another connection holds the lock, or the file cannot be
# opened (a full or vanished disk).
SQLITE_UNAVAILABLE = ("database is locked", "database table is locked",
                      "unable to open database file", "disk i/o error")


def is_unavailable(exc: BaseException) -> bool:
    """True when `exc` is a database error that retrying later can cure (a lost or refused
    connection, an overloaded or restarting server, a lock conflict).

    Every other `OperationalError` is not: SQLite's "LIKE or GLOB pattern too complex", "too
    many SQL variables", "string or blob too big" or MariaDB's "Out of range value" are caused
    by the query, and would fail the same way on every retry. Those must be bounded before the
    query is made (`core.http.filters`); one that is not is a server error (INTERNAL, HTTP 500),
    never UNAVAILABLE, which tells a client to retry what cannot succeed.
    """
    if not isinstance(exc, OperationalError) or not exc.args:
        return False
    first = exc.args[0]
    if isinstance(first, int):
        return first in UNAVAILABLE_ERRORS
    return str(first).lower().startswith(SQLITE_UNAVAILABLE)


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
