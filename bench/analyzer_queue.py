"""Admission time of the analyzer's queue structure with 10,000 pending analyses.

Enqueues N analyses (shuffled creation times, both queues), then admits them one by one in FIFO
order, releasing each slot right away (the queue structure alone: no API server, no runs).
Prints the time per enqueue and per admission in microseconds, and the totals.

    PYTHONPATH=. python bench/analyzer_queue.py [--count 10000]
"""
from __future__ import annotations

import argparse
import random
import time

from controllers.analyzer.queues import AnalysisQueues


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    args = parser.parse_args()
    queues = AnalysisQueues({"offline": 2, "online": 2})
    times = list(range(args.count))
    random.Random(1).shuffle(times)
    started = time.perf_counter()
    for n in times:
        queues.enqueue("offline" if n % 2 else "online", f"an-{n:08d}", float(n))
    enqueue = time.perf_counter() - started
    position_started = time.perf_counter()
    queues.position(f"an-{args.count - 1:08d}")
    position = time.perf_counter() - position_started
    started = time.perf_counter()
    admitted = 0
    last = {"offline": -1.0, "online": -1.0}
    for queue in ("offline", "online"):
        while (analysis_id := queues.admit(queue)) is not None:
            n = float(analysis_id[3:])
            assert n > last[queue], "not FIFO"
            last[queue] = n
            queues.release(analysis_id)
            admitted += 1
    admit = time.perf_counter() - started
    assert admitted == args.count
    print(f"pending analyses: {args.count}")
    print(f"enqueue:   {enqueue * 1e6 / args.count:.2f} us each, {enqueue * 1e3:.1f} ms total")
    print(f"admission: {admit * 1e6 / admitted:.2f} us each (admit + release), "
          f"{admit * 1e3:.1f} ms total")
    print(f"position of the last one: {position * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
