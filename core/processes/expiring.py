"""A bounded, thread-safe cache whose entries each expire at their own time.

The per-process caches of authentication (the claims of verified tokens, the users of those
tokens) keep an entry until the token's `exp` and hold at most a fixed number, the least
recently used going first. `cachetools.TLRUCache` does the bookkeeping; this wrapper adds the
lock (cachetools' caches are not thread-safe, and gunicorn threads share them) and reads the
wall clock at each call, so a test that moves `time.time` moves the cache too.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from cachetools import TLRUCache

V = TypeVar("V")


def _expiry(_key, entry: tuple[float, object], _now: float) -> float:
    return entry[0]


class ExpiringCache(Generic[V]):
    """Keep values until their own expiry time (epoch seconds), at most `max_entries` of them.

    Args:
        max_entries: how many entries are kept; past it the least recently used go first.
    """

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._entries: TLRUCache = TLRUCache(max_entries, _expiry, timer=lambda: time.time())
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        """Return the value under `key`, or None when it is absent or has expired."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def put(self, key: Hashable, value: V, *, expires_at: float) -> None:
        """Keep `value` under `key` until `expires_at` (epoch seconds); a past time keeps nothing."""
        if expires_at <= time.time():
            return
        with self._lock:
            self._entries[key] = (expires_at, value)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()

    def __iter__(self) -> Iterator[Hashable]:
        with self._lock:
            return iter(list(self._entries))
