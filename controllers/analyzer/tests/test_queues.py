"""The analyzer's queues: FIFO by (created_at, id) per queue, limits, thread safety."""
from __future__ import annotations

import threading

import pytest

from controllers.analyzer.queues import AnalysisQueues


def test_fifo_per_queue_and_limits():
    q = AnalysisQueues({"offline": 1, "online": 2})
    q.enqueue("online", "b", 2.0)
    q.enqueue("online", "a", 2.0)  # same time: the id breaks the tie
    q.enqueue("online", "c", 1.0)
    q.enqueue("offline", "x", 0.5)
    q.enqueue("offline", "y", 0.1)
    assert q.pending("online") == ["c", "a", "b"]
    assert q.position("a") == 2
    admitted = [(a.queue, a.analysis_id) for a in q.admit_all()]
    assert admitted == [("offline", "y"), ("online", "c"), ("online", "a")]
    assert q.admit("online") is None and q.admit("offline") is None
    assert q.release("c") and q.admit("online") == "b"
    assert not q.enqueue("online", "b", 0.0)  # holds a slot: not queued twice


def test_remove_and_unknown_queue():
    q = AnalysisQueues({"offline": 1, "online": 1})
    q.enqueue("online", "a", 1)
    q.enqueue("online", "b", 2)
    assert q.remove("a")
    assert q.admit("online") == "b"
    with pytest.raises(ValueError, match="unknown queue"):
        q.enqueue("batch", "z")
    with pytest.raises(ValueError, match="online"):
        AnalysisQueues({"offline": 1, "online": 0})


def test_concurrent_creates_never_exceed_the_limit():
    q = AnalysisQueues({"offline": 3, "online": 2})
    peak = {"offline": 0, "online": 0}
    lock = threading.Lock()
    start = threading.Barrier(16)

    def worker(n: int):
        start.wait()
        for i in range(200):
            queue = ("offline", "online")[i % 2]
            q.enqueue(queue, f"w{n}-{i}", float(i))
            got = q.admit(queue)
            with lock:
                peak[queue] = max(peak[queue], len(q.held(queue)))
            if got is not None:
                q.release(got)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak["offline"] <= 3 and peak["online"] <= 2
    assert peak["offline"] >= 1 and peak["online"] >= 1
