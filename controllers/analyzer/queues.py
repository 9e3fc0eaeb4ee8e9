"""The analyzer's two queues (offline, online), each with its own slots, shared fairly by users.

Admission (docs/analyzer.md, "Queues"): when a slot of a queue is free, the next analysis comes
from the user with the fewest of that queue's slots (round-robin among users with queued work),
oldest first by `(created_at, analysis_id)` within a user, and no user holds more than its
per-user cap of a queue's slots (`core.domain.fairshare.fair_admissions`, the one rule). So eight
analyses of one user delay another user's next one by at most one run. A slot is taken at
admission and held until `release`, which the controller calls only once the backend says
nothing of the analysis is alive any more: a cancelled or failed analysis whose run is still
stopping keeps its slot. Thread-safe: AnalyzerService's threads enqueue while the controller's
loop admits and releases.

Each user's waiting analyses of a queue are a heap with lazy removal: enqueue is O(log n), an
admission round reads at most the slots' number of items per user, `position` is O(n log n).
"""
from __future__ import annotations

import heapq
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from core.domain.fairshare import Queued, fair_admissions

from .contract import QUEUES

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _key(created_at: datetime | float | None) -> float:
    if created_at is None:
        return float("inf")
    if isinstance(created_at, datetime):
        if created_at.tzinfo is None:
            created_at = created_at.replace(tzinfo=timezone.utc)
        return (created_at - _EPOCH).total_seconds()
    return float(created_at)


@dataclass(frozen=True)
class Admission:
    """An analysis admitted to run: its queue and id."""

    queue: str
    analysis_id: str


class AnalysisQueues:
    """Pending analyses per queue and user, and the slots held by admitted ones.

    Args:
        limits: queue name -> analyses of that queue running at once (>= 1);
            `settings.FALCON_ANALYSIS_CONCURRENCY`.
        per_user: queue name -> analyses of that queue one user may run at once (>= 1);
            `settings.FALCON_ANALYZER_MAX_RUNNING_PER_USER` through
            `AnalyzerConfig.per_user_limits`. None: no cap below the queue's limit (users
            still take turns).

    Raises:
        ValueError: a queue of `contract.QUEUES` has no limit, or a limit is below 1.
    """

    def __init__(self, limits: Mapping[str, int], per_user: Mapping[str, int] | None = None):
        for queue in QUEUES:
            if int(limits.get(queue, 0)) < 1:
                raise ValueError(f"the concurrency limit of queue {queue!r} must be >= 1; got "
                                 f"{limits.get(queue)!r} (FALCON_ANALYSIS_CONCURRENCY)")
            if per_user is not None and int(per_user.get(queue, 0)) < 1:
                raise ValueError(f"the per-user limit of queue {queue!r} must be >= 1; got "
                                 f"{per_user.get(queue)!r} (FALCON_ANALYZER_MAX_RUNNING_PER_USER)")
        self.limits = {queue: int(limits[queue]) for queue in QUEUES}
        self.per_user = {queue: int(per_user[queue]) if per_user is not None
                         else self.limits[queue] for queue in QUEUES}
        self._lock = threading.Lock()
        # queue -> user -> heap of (order, analysis id); stale entries are skipped when read.
        self._waiting: dict[str, dict[str, list[tuple[float, str]]]] = {q: {} for q in QUEUES}
        self._pending: dict[str, tuple[str, str]] = {}  # analysis id -> (queue, user)
        self._held: dict[str, dict[str, str]] = {queue: {} for queue in QUEUES}  # id -> user

    @staticmethod
    def _check(queue: str) -> None:
        if queue not in QUEUES:
            raise ValueError(f"unknown queue {queue!r}; queues: {', '.join(QUEUES)}")

    def enqueue(self, queue: str, analysis_id: str,
                created_at: datetime | float | None = None, user: str = "") -> bool:
        """Add a pending analysis; False when it is already pending or holds a slot.

        Args:
            queue: "offline" or "online".
            analysis_id: the record's id.
            created_at: the record's creation time (datetime, or seconds since the epoch).
            user: who it counts for: the record's `creator_email` (an offline analysis'
                is the experiment's creator).

        Raises:
            ValueError: an unknown queue.
        """
        self._check(queue)
        with self._lock:
            if analysis_id in self._pending or self._holder(analysis_id):
                return False
            self._pending[analysis_id] = (queue, user)
            heapq.heappush(self._waiting[queue].setdefault(user, []),
                           (_key(created_at), analysis_id))
            return True

    def remove(self, analysis_id: str) -> bool:
        """Drop a pending analysis (cancelled, deleted); False when it was not pending."""
        with self._lock:
            return self._pending.pop(analysis_id, None) is not None

    def _heads(self, queue: str, count: int) -> list[Queued]:
        """The first `count` waiting analyses of each user of `queue` (stale entries dropped)."""
        out: list[Queued] = []
        waiting = self._waiting[queue]
        for user in list(waiting):
            heap, taken, seen = waiting[user], [], set()
            while heap and len(taken) < count:
                entry = heapq.heappop(heap)
                # Skipped: no longer waiting here, or a second entry of an id queued again.
                if self._pending.get(entry[1]) == (queue, user) and entry[1] not in seen:
                    seen.add(entry[1])
                    taken.append(entry)
            for entry in taken:
                heapq.heappush(heap, entry)
            if not heap:
                del waiting[user]
            out.extend(Queued(key=aid, user=user, order=(order, aid)) for order, aid in taken)
        return out

    def _admit(self, queue: str, limit: int) -> list[str]:
        """Admit from `queue` by the fair rule while fewer than `limit` slots are held."""
        held = self._held[queue]
        free = limit - len(held)
        if free <= 0:
            return []
        running: dict[str, int] = {}
        for user in held.values():
            running[user] = running.get(user, 0) + 1
        # A user can be given at most min(free, per_user) slots a round: only those are read.
        heads = self._heads(queue, min(free, self.per_user[queue]))
        admitted = fair_admissions(heads, running=running, limit=len(held) + free,
                                   per_user=self.per_user[queue])
        for item in admitted:
            del self._pending[item.key]
            held[item.key] = item.user
        return [item.key for item in admitted]

    def admit(self, queue: str) -> str | None:
        """Take the queue's next analysis by the fair rule and hold a slot for it; None when
        nothing waits, all slots are held, or every waiting user is at its cap."""
        self._check(queue)
        with self._lock:
            admitted = self._admit(queue, min(self.limits[queue], len(self._held[queue]) + 1))
            return admitted[0] if admitted else None

    def admit_all(self) -> list[Admission]:
        """Admit from every queue while slots are free, by the fair rule within each queue."""
        out = []
        for queue in QUEUES:
            with self._lock:
                admitted = self._admit(queue, self.limits[queue])
            out.extend(Admission(queue, analysis_id) for analysis_id in admitted)
        return out

    def hold(self, queue: str, analysis_id: str, user: str = "") -> None:
        """Hold a slot for a run found alive (recovery), even beyond the limit: a live run
        occupies the cluster whatever the limit says; admission waits until it is released.
        It counts for `user` (the record's `creator_email`)."""
        self._check(queue)
        with self._lock:
            self._pending.pop(analysis_id, None)
            self._held[queue][analysis_id] = user

    def release(self, analysis_id: str) -> bool:
        """Free the analysis' slot (nothing of it is alive any more); False if it held none."""
        with self._lock:
            queue = self._holder(analysis_id)
            if queue is None:
                return False
            del self._held[queue][analysis_id]
            return True

    def _holder(self, analysis_id: str) -> str | None:
        for queue, held in self._held.items():
            if analysis_id in held:
                return queue
        return None

    def user_of(self, analysis_id: str) -> str | None:
        """The user an analysis counts for while it waits or holds a slot, else None."""
        with self._lock:
            if analysis_id in self._pending:
                return self._pending[analysis_id][1]
            queue = self._holder(analysis_id)
            return None if queue is None else self._held[queue][analysis_id]

    def holds(self, analysis_id: str) -> bool:
        """Whether the analysis holds a slot."""
        with self._lock:
            return self._holder(analysis_id) is not None

    def is_pending(self, analysis_id: str) -> bool:
        """Whether the analysis waits in a queue."""
        with self._lock:
            return analysis_id in self._pending

    def held(self, queue: str) -> list[str]:
        """The ids holding a slot of `queue`."""
        with self._lock:
            return list(self._held[queue])

    def pending(self, queue: str) -> list[str]:
        """The ids waiting in `queue`, oldest first by `(created_at, analysis_id)` (all users)."""
        with self._lock:
            entries = sorted(entry for user, heap in self._waiting[queue].items()
                             for entry in heap if self._pending.get(entry[1]) == (queue, user))
            return list(dict.fromkeys(aid for _, aid in entries))

    def position(self, analysis_id: str) -> int | None:
        """The 1-based queue position of a pending analysis (1 = next), None if not pending.

        Counted in `(created_at, analysis_id)` order over every user's waiting analyses: an
        upper bound, since users take turns and another user's backlog does not run first.
        """
        with self._lock:
            entry = self._pending.get(analysis_id)
        if entry is None:
            return None
        order = self.pending(entry[0])
        return order.index(analysis_id) + 1 if analysis_id in order else None
