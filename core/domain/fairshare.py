"""Fair admission of queued work to shared slots: the analyzer's queues and the local cluster.

One user's backlog must not delay another user's next item by more than one item's run
(docs/decisions.md#dec-sec-capacity). `fair_admissions` is the one decision both use: a pure
function of what waits, what runs per user and the limits, so it is tested row by row and the
callers only hold state.

The rule, each time capacity is free:

- the next item comes from the user with the fewest units running among users with queued
  work (ties: the user whose oldest waiting item is oldest), so users take turns;
- within a user, strictly first in, first out: a user's later item never passes its earlier
  one;
- a user at `per_user` units waits whatever is free, and does not block the others;
- a user whose next item does not fit (larger than what is free, or than what is left of its
  share) waits this round while smaller items of other users go ahead (backfill). That can
  delay a large item while small ones keep arriving; the per-user limit bounds how much of
  the machine the others can hold, which is the trade made for never idling capacity.

Django-free: the analyzer controller runs it in its own process.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Queued:
    """One waiting item.

    Attributes:
        key: the item's id (an analysis id, a job id).
        user: who it counts for (the creator's email; an offline analysis: the experiment's
            creator).
        order: its FIFO position within the user's items (`(created_at, id)`): smaller first.
        size: the units it takes while running (1 for an analysis, a job's replicas).
    """

    key: Hashable
    user: str
    order: Any
    size: int = 1


def fair_admissions(queued: Iterable[Queued], *, running: Mapping[str, int], limit: int,
                    per_user: int) -> list[Queued]:
    """Return the items to start now, in the order to start them (the module's rule).

    Args:
        queued: the waiting items, in any order.
        running: units running per user (users with none may be left out). Units held beyond
            `limit` (runs adopted after a restart) simply leave nothing free.
        limit: units that may run at once in all (the slots, the machine-wide replicas).
        per_user: units one user may run at once (>= 1).

    Returns:
        The admitted items; each user's are in their FIFO order. Costs O(n log n) for n
        queued items (one sort, one heap operation per user turn).
    """
    by_user: dict[str, deque[Queued]] = {}
    for item in sorted(queued, key=lambda item: item.order):
        by_user.setdefault(item.user, deque()).append(item)
    used = {user: int(units) for user, units in running.items()}
    free = limit - sum(used.values())
    # (units running, oldest waiting order, user): the user whose turn it is comes first.
    turns = [(used.get(user, 0), items[0].order, user) for user, items in by_user.items()]
    heapq.heapify(turns)
    admitted: list[Queued] = []
    while turns and free > 0:
        units, _, user = heapq.heappop(turns)
        items = by_user[user]
        head = items[0]
        if head.size > free or units + head.size > per_user:
            # Waits this round: free only shrinks and its count stays, so it cannot fit later.
            continue
        items.popleft()
        admitted.append(head)
        used[user] = units + head.size
        free -= head.size
        if items:
            heapq.heappush(turns, (used[user], items[0].order, user))
    return admitted


def default_per_user(limit: int) -> int:
    """Half of `limit` rounded up, at least 1: the per-user share when none is configured."""
    return max(1, -(-limit // 2))
