"""The analyzer's two FIFO queues (offline, online), each with its own concurrency limit.

Admission is FIFO by `(created_at, analysis_id)` within a queue (docs/analyzer.md, "Queues"). A
slot is taken at admission and held until `release`, which the controller calls only once the
backend says nothing of the analysis is alive any more: a cancelled or failed analysis whose run
is still stopping keeps its slot. Thread-safe: AnalyzerService's threads enqueue while the
controller's loop admits and releases.

Each queue is a heap with lazy removal: enqueue and admission are O(log n), `position` is O(n).
"""
from __future__ import annotations

import heapq
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

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
    """Pending analyses per queue and the slots held by admitted ones.

    Args:
        limits: queue name -> analyses of that queue running at once (>= 1);
            `settings.FALCON_ANALYSIS_CONCURRENCY`.

    Raises:
        ValueError: a queue of `contract.QUEUES` has no limit, or a limit is below 1.
    """

    def __init__(self, limits: Mapping[str, int]):
        for queue in QUEUES:
            if int(limits.get(queue, 0)) < 1:
                raise ValueError(f"the concurrency limit of queue {queue!r} must be >= 1; got "
                                 f"{limits.get(queue)!r} (FALCON_ANALYSIS_CONCURRENCY)")
        self.limits = {queue: int(limits[queue]) for queue in QUEUES}
        self._lock = threading.Lock()
        self._heaps: dict[str, list[tuple[float, str]]] = {queue: [] for queue in QUEUES}
        self._pending: dict[str, str] = {}  # analysis id -> queue
        self._held: dict[str, dict[str, None]] = {queue: {} for queue in QUEUES}

    @staticmethod
    def _check(queue: str) -> None:
        if queue not in QUEUES:
            raise ValueError(f"unknown queue {queue!r}; queues: {', '.join(QUEUES)}")

    def enqueue(self, queue: str, analysis_id: str,
                created_at: datetime | float | None = None) -> bool:
        """Add a pending analysis; False when it is already pending or holds a slot.

        Args:
            queue: "offline" or "online".
            analysis_id: the record's id.
            created_at: the record's creation time (datetime, or seconds since the epoch).

        Raises:
            ValueError: an unknown queue.
        """
        self._check(queue)
        with self._lock:
            if analysis_id in self._pending or self._holder(analysis_id):
                return False
            self._pending[analysis_id] = queue
            heapq.heappush(self._heaps[queue], (_key(created_at), analysis_id))
            return True

    def remove(self, analysis_id: str) -> bool:
        """Drop a pending analysis (cancelled, deleted); False when it was not pending."""
        with self._lock:
            return self._pending.pop(analysis_id, None) is not None

    def _pop(self, queue: str) -> str | None:
        heap = self._heaps[queue]
        while heap:
            _, analysis_id = heapq.heappop(heap)
            if self._pending.get(analysis_id) == queue:
                del self._pending[analysis_id]
                return analysis_id
        return None

    def admit(self, queue: str) -> str | None:
        """Take the queue's next pending analysis and hold a slot for it; None when the queue
        is empty or all its slots are held."""
        self._check(queue)
        with self._lock:
            if len(self._held[queue]) >= self.limits[queue]:
                return None
            analysis_id = self._pop(queue)
            if analysis_id is not None:
                self._held[queue][analysis_id] = None
            return analysis_id

    def admit_all(self) -> list[Admission]:
        """Admit from every queue while slots are free, FIFO within each queue."""
        out = []
        for queue in QUEUES:
            while (analysis_id := self.admit(queue)) is not None:
                out.append(Admission(queue, analysis_id))
        return out

    def hold(self, queue: str, analysis_id: str) -> None:
        """Hold a slot for a run found alive (recovery), even beyond the limit: a live run
        occupies the cluster whatever the limit says; admission waits until it is released."""
        self._check(queue)
        with self._lock:
            self._pending.pop(analysis_id, None)
            self._held[queue][analysis_id] = None

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
        """The ids waiting in `queue`, next first."""
        with self._lock:
            return [aid for _, aid in sorted(self._heaps[queue])
                    if self._pending.get(aid) == queue]

    def position(self, analysis_id: str) -> int | None:
        """The 1-based queue position of a pending analysis (1 = next), None if not pending."""
        with self._lock:
            queue = self._pending.get(analysis_id)
        if queue is None:
            return None
        order = self.pending(queue)
        return order.index(analysis_id) + 1 if analysis_id in order else None
