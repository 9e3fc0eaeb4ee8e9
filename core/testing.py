"""Wait in tests for an event itself (a status, a log line, a file, a port), with a deadline;
count work instead of timing it.

Tests never sleep a fixed time hoping that something happened meanwhile: on a loaded machine
it has not, and on an idle one the test waits for nothing. They poll the event with
`wait_until`, whose deadline is generous (a slow machine makes a test slow, never failed) and
whose failure names what did not happen. This is the one place the suite's polling pauses.

A test that means "this is cheap" (linear, refused before the work) counts the work done
(`count_calls`: parser steps, queries, tries) and bounds the count, which no load can change.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Seconds a test waits for an event before failing by default: far beyond what the event takes
# on an idle machine (well under a second to a few seconds), for a 2-CPU machine under load.
DEFAULT_TIMEOUT = 60.0


def wait_until(predicate: Callable[[], T], *, timeout: float = DEFAULT_TIMEOUT,
               what: str = "the condition", every: float = 0.02,
               tick: Callable[[], object] | None = None) -> T:
    """Return `predicate()`'s first true value, polling it every `every` seconds.

    Args:
        predicate: reads the event (returns a false value until it happened).
        timeout: seconds before giving up.
        what: names the event in the failure.
        every: seconds between two polls (a poll interval, never an assumption on timing).
        tick: called before each poll (e.g. one reconcile tick of a controller under test).

    Raises:
        AssertionError: `what` did not happen within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        if tick is not None:
            tick()
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(every)


class FakeClock:
    """A clock that moves only when the test says so: pass it where code takes `clock=`.

    Monotonic seconds, starting at `start`; `advance(seconds)` moves it forward.
    """

    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, "a monotonic clock never goes back"
        self.now += seconds


class CallCount:
    """How many times a patched callable was called (`count_calls`)."""

    def __init__(self) -> None:
        self.calls = 0


def count_calls(monkeypatch: Any, owner: Any, name: str) -> CallCount:
    """Count the calls of `owner.name` (a function of a module, a method of a class, a C
    method included) until `monkeypatch` undoes the patch at the test's end.

    Returns:
        a `CallCount` whose `calls` grows with each call.
    """
    real = getattr(owner, name)
    counted = CallCount()

    @functools.wraps(real)
    def counting(*args: Any, **kwargs: Any) -> Any:
        counted.calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return counted
