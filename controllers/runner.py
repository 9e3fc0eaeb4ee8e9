"""Run a controller's `tick()` periodically until asked to stop (style rule 8).

The loop installs SIGTERM/SIGINT handlers that finish the current tick and stop, logs each
tick's failure and goes on when the cause is transient (the API server briefly unreachable),
and raises anything else so the process exits non-zero and its supervisor (Kubernetes,
`runlocal`) restarts it.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("falcon.controllers")


class Controller(Protocol):
    """A level-triggered reconciler."""

    name: str

    def tick(self): ...


def run_loop(controller: Controller, *, interval: float, stop: threading.Event,
             is_transient: Callable[[BaseException], bool] = lambda exc: False,
             max_ticks: int | None = None) -> int:
    """Call `controller.tick()` every `interval` seconds until `stop` is set.

    Args:
        controller: the reconciler.
        interval: seconds between the starts of two ticks.
        stop: set it to stop after the current tick.
        is_transient: whether an exception from a tick should be logged and retried next tick
            (True) or re-raised (False).
        max_ticks: stop after this many ticks (tests, `--once`).

    Returns:
        The number of ticks run.
    """
    ticks = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            stats = controller.tick()
            log.debug("%s tick: %s", controller.name, stats)
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("%s tick failed, retrying next tick: %s", controller.name, exc)
        ticks += 1
        if max_ticks is not None and ticks >= max_ticks:
            break
        stop.wait(max(0.0, interval - (time.monotonic() - started)))
    return ticks


def install_stop_handlers(stop: threading.Event) -> None:
    """Set `stop` on SIGTERM and SIGINT (the current tick finishes first)."""
    def handler(signum, frame):
        log.info("signal %s: stopping after this tick", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
