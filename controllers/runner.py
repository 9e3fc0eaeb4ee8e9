"""Run a controller's `tick()` periodically until asked to stop (docs/decisions.md#dec-polling).

The loop installs SIGTERM/SIGINT handlers that finish the current tick and stop, logs each
tick's failure and goes on when the cause is transient (the API server briefly unreachable),
and raises anything else so the process exits non-zero and its supervisor (Kubernetes,
`runlocal`) restarts it.

Liveness: after every tick, and every `SLICE_SECONDS` while it waits for the next one, the loop
touches the file named by `FALCON_HEARTBEAT_FILE` (unset: no file), and a follower waiting for
the Lease touches it too (`controllers.leader`); its age therefore never depends on the
interval. The
Deployments' exec livenessProbe (`manage.py checkheartbeat`) fails when it is older than
`--max-age`, so a loop stuck outside any timeout is restarted by the kubelet; a process that is
merely failing ticks (API server down) keeps beating and is left alone, since restarting it
would not help.
"""
from __future__ import annotations

import gc
import logging
import os
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


HEARTBEAT_ENV = "FALCON_HEARTBEAT_FILE"


def heartbeat_path() -> str:
    """Return the heartbeat file's path from `FALCON_HEARTBEAT_FILE` ("" when unset)."""
    return os.environ.get(HEARTBEAT_ENV, "")


def beat() -> None:
    """Set the heartbeat file's modification time to now (create it if missing).

    A failure is logged, never raised: a full or read-only /tmp must not stop the loop; the
    liveness probe then reports the stale file, which is the truth.
    """
    path = heartbeat_path()
    if not path:
        return
    try:
        with open(path, "a"):
            pass
        os.utime(path)
    except OSError as exc:
        log.warning("cannot touch heartbeat file %s: %s", path, exc)


# The collector's thresholds for a controller process (`gc.set_threshold`; CPython's are
# 700, 10, 10). A collection of the youngest generation every 700 new container objects
# promotes whatever a tick holds at that moment: a resource manager's tick holds a page of
# 5,000 `JobView`s and their TaskSpecs while it handles them, and at 100,000 jobs every tick
# promoted enough of them to make CPython scan its whole heap (the watch caches' million
# objects, which do not change) once or twice: a third of the tick's CPU. At 50,000 a page's
# objects are mostly gone before a collection sees them, and the heap is scanned about once in
# ten ticks. Cyclic garbage waits longer for its collection: at most 50,000 new objects.
GC_THRESHOLDS = (50_000, 20, 10)


def tune_gc() -> None:
    """Set the collector's thresholds of a controller process (`GC_THRESHOLDS`); called once
    at start (`runcontroller`), before the loop."""
    gc.set_threshold(*GC_THRESHOLDS)


# How often a wait for `wake` also looks at `stop`, seconds.
WAKE_POLL_SECONDS = 0.1
# The longest the loop waits without writing its heartbeat and reading its schedule again,
# seconds: a schedule change applies, and the heartbeat is fresh, within this however long the
# interval (an `exp-reconcile` set to 300 s and back to 2 s used to wait out the 300 s, and the
# heartbeat went stale enough for `checkheartbeat` to restart a healthy controller).
SLICE_SECONDS = 1.0


def _pause(seconds: float, stop: threading.Event, wake: threading.Event | None) -> bool:
    """Wait `seconds`, or less when `stop` is set, or when `wake` is set (then clear it).

    Returns:
        True when `wake` ended the wait.
    """
    if wake is None:
        stop.wait(seconds)
        return False
    deadline = time.monotonic() + seconds
    woken = False
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if wake.wait(min(left, WAKE_POLL_SECONDS)):
            woken = True
            break
    wake.clear()
    return woken


def run_loop(controller: Controller, *, interval: float, stop: threading.Event,
             is_transient: Callable[[BaseException], bool] = lambda exc: False,
             max_ticks: int | None = None, wake: threading.Event | None = None,
             schedule: Callable[[], tuple[bool, float]] | None = None,
             clock: Callable[[], float] = time.monotonic,
             pause: Callable[[float], bool] | None = None,
             slice_seconds: float = SLICE_SECONDS) -> int:
    """Call `controller.tick()` every `interval` seconds until `stop` is set.

    Between two ticks the loop waits in slices of at most `slice_seconds`; after each slice
    it writes the heartbeat (`beat()`) and reads the schedule again, so neither depends on the
    interval: a new interval or a pause applies within one slice (a shorter interval whose
    time has already passed starts the next tick at once), and the heartbeat is never older
    than a slice plus one tick.

    Args:
        controller: the reconciler.
        interval: seconds between the starts of two ticks (until `schedule` says otherwise).
        stop: set it to stop after the current tick.
        is_transient: whether an exception from a tick should be logged and retried next tick
            (True) or re-raised (False).
        max_ticks: stop after this many ticks (tests, `--once`).
        wake: set it to start the next tick now instead of at the end of the interval (the
            analyzer's AnalyzerService sets it when an analysis is created, so admission does not
            wait for the interval).
        schedule: called before the first tick and after each slice of a wait
            (`controllers.schedule.ScheduleFollower.before_tick`): returns whether to run the
            next tick (False while paused) and the interval to use.
        clock: monotonic seconds (tests pass a fake clock).
        pause: waits up to its argument in seconds and returns True when woken early (tests
            pass one that moves the fake clock); default: waits on `stop` and `wake`.
        slice_seconds: the longest wait between two heartbeats and schedule reads.

    Returns:
        The number of ticks run (a paused loop's skipped ticks included).
    """
    from controllers import metrics

    if pause is None:
        def pause(seconds: float) -> bool:
            return _pause(seconds, stop, wake)

    ticks = 0
    run = True
    if schedule is not None:
        run, interval = schedule()
    while not stop.is_set():
        started = clock()
        stats, failed = None, True
        try:
            stats = controller.tick() if run else None
            failed = False
            log.debug("%s tick: %s", controller.name, stats)
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("%s tick failed, retrying next tick: %s", controller.name, exc)
        finally:
            if run:
                metrics.observe_tick(controller.name, clock() - started,
                                     failed=failed, stats=stats)
        beat()  # after a failed transient tick too: the loop is alive, restarting won't help
        ticks += 1
        if max_ticks is not None and ticks >= max_ticks:
            break
        while not stop.is_set():
            left = started + interval - clock()
            if left <= 0:
                break
            if pause(min(left, slice_seconds)):
                break  # woken: tick now, with the schedule read at most a slice ago
            if stop.is_set():
                break
            beat()  # waiting is alive too, however long the interval
            if schedule is not None:
                run, interval = schedule()
    return ticks


def install_stop_handlers(stop: threading.Event) -> None:
    """Set `stop` on SIGTERM and SIGINT (the current tick finishes first)."""
    def handler(signum, frame):
        log.info("signal %s: stopping after this tick", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
