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


def test_users_take_turns_and_each_stays_under_its_cap():
    q = AnalysisQueues({"offline": 1, "online": 2}, per_user={"offline": 1, "online": 2})
    for n in range(8):
        q.enqueue("online", f"a{n}", float(n), user="a@x")
    q.enqueue("online", "b0", 100.0, user="b@x")
    assert q.admit("online") == "a0" and q.admit("online") == "b0"  # b: the next free slot
    assert q.admit("online") is None
    q.release("a0")
    assert q.admit("online") == "a1"
    assert q.user_of("a1") == "a@x" and q.user_of("a2") == "a@x"
    # a alone: at most its cap of 2 of the queue's slots.
    q2 = AnalysisQueues({"offline": 1, "online": 4}, per_user={"offline": 1, "online": 2})
    for n in range(8):
        q2.enqueue("online", f"a{n}", float(n), user="a@x")
    assert [a.analysis_id for a in q2.admit_all()] == ["a0", "a1"]
    q2.enqueue("online", "b0", 50.0, user="b@x")
    assert [a.analysis_id for a in q2.admit_all()] == ["b0"]  # a at its cap blocks nobody


def test_an_id_queued_again_after_admission_is_admitted_once():
    q = AnalysisQueues({"offline": 1, "online": 2})
    q.enqueue("online", "a", 1.0, user="u")
    assert q.admit("online") == "a"
    q.release("a")
    assert q.enqueue("online", "a", 1.0, user="u")  # the API server was down: back in place
    assert [x.analysis_id for x in q.admit_all()] == ["a"] and q.pending("online") == []


def test_a_per_user_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="FALCON_ANALYZER_MAX_RUNNING_PER_USER"):
        AnalysisQueues({"offline": 1, "online": 1}, per_user={"offline": 0, "online": 1})
