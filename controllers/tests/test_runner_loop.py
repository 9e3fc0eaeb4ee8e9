"""`controllers.runner.run_loop`: ticks every interval, stops on `stop`, and ticks at once when
`wake` is set (the analyzer's AnalyzerService sets it when an analysis is created)."""
from __future__ import annotations

import threading

from controllers.runner import run_loop


class Counting:
    name = "counting"

    def __init__(self):
        self.ticks = 0
        self.ticked = threading.Event()

    def tick(self):
        self.ticks += 1
        self.ticked.set()


def start(controller, **kwargs) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=run_loop, args=(controller,),
                              kwargs={"stop": stop, **kwargs}, daemon=True)
    thread.start()
    return thread, stop


def test_wake_starts_the_next_tick_before_the_interval_ends():
    controller, wake = Counting(), threading.Event()
    thread, stop = start(controller, interval=3600, wake=wake)
    assert controller.ticked.wait(10)
    controller.ticked.clear()
    wake.set()
    assert controller.ticked.wait(10), "a wake did not start a tick (the interval is an hour)"
    assert controller.ticks == 2 and not wake.is_set()  # the wake was consumed
    stop.set()
    thread.join(10)
    assert not thread.is_alive()


def test_stop_ends_a_wait_for_wake():
    controller, wake = Counting(), threading.Event()
    thread, stop = start(controller, interval=3600, wake=wake)
    assert controller.ticked.wait(10)
    stop.set()
    thread.join(10)
    assert not thread.is_alive() and controller.ticks == 1


def test_without_wake_the_loop_waits_for_the_interval_or_stop():
    """On a fake clock that each wait moves on: the second tick starts when the hour ends, never
    before; a stop set during a wait ends the loop without another tick."""
    from controllers.runner import SLICE_SECONDS

    now = [0.0]
    starts: list[float] = []

    class Timed:
        name = "timed"

        def tick(self):
            starts.append(now[0])

    def pause(seconds: float) -> bool:
        assert 0 < seconds <= SLICE_SECONDS
        now[0] += seconds
        return False

    stop = threading.Event()
    assert run_loop(Timed(), interval=3600, stop=stop, clock=lambda: now[0], pause=pause,
                    max_ticks=2) == 2
    assert starts == [0.0, 3600.0]

    starts.clear()
    now[0] = 0.0

    def pause_then_stop(seconds: float) -> bool:
        now[0] += seconds
        if now[0] >= 100:
            stop.set()
        return False

    assert run_loop(Timed(), interval=3600, stop=stop, clock=lambda: now[0],
                    pause=pause_then_stop) == 1
    assert starts == [0.0] and now[0] == 100.0
