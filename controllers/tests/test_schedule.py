"""The loops' schedules: stored as django-celery-beat periodic tasks, read over real gRPC by the
controllers before the first tick and after every slice of a wait, applied within one slice
(pause, resume, a new interval), with the heartbeat written every slice."""
from __future__ import annotations

import importlib
import math
import threading
import time
from dataclasses import dataclass

import pytest
from django.apps import apps
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from controllers.runner import run_loop
from controllers.schedule import ScheduleClient, ScheduleFollower
from core.errors import NotFound
from falcon_site.grpc.testing import INTERNAL_TOKEN, grpc_server  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

defaults = importlib.import_module("core.migrations.0002_default_schedules")


@pytest.fixture
def schedules(grpc_server):
    """The default schedules (the data migration's rows) and a client of the real server."""
    PeriodicTask.objects.all().delete()
    defaults.create(apps, None)
    client = ScheduleClient(f"127.0.0.1:{grpc_server.port}", INTERNAL_TOKEN, timeout=5)
    yield client
    client.close()


def set_schedule(name: str, *, enabled: bool | None = None, seconds: float | None = None):
    task = PeriodicTask.objects.get(name=name)
    if seconds is not None:
        task.interval, _ = IntervalSchedule.objects.get_or_create(every=seconds,
                                                                  period="seconds")
    if enabled is not None:
        task.enabled = enabled
    task.save()


def test_defaults_work_with_no_edit_and_unknown_names_are_not_found(schedules):
    assert {t.name: (t.enabled, t.interval.every, t.interval.period)
            for t in PeriodicTask.objects.select_related("interval")} == {
        "exp-reconcile": (True, 2, "seconds"), "resource-sync": (True, 2, "seconds"),
        "offline-analysis-discovery": (True, 10, "seconds"),
        "retention": (True, 86400, "seconds")}
    got = schedules.get("resource-sync")
    assert (got.name, got.enabled, got.interval_seconds) == ("resource-sync", True, 2.0)
    with pytest.raises(NotFound, match="'nope' does not exist"):
        schedules.get("nope")
    # Running the migration again keeps what operators set.
    set_schedule("exp-reconcile", seconds=7)
    defaults.create(apps, None)
    assert schedules.get("exp-reconcile").interval_seconds == 7.0


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counting:
    """A reconciler that counts its ticks and the times they started (on `clock`)."""

    name = "exp"

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.starts: list[float] = []

    def tick(self):
        self.starts.append(self.clock())


def test_pause_resume_and_interval_apply_within_one_tick(schedules):
    """The loop started with 60 s follows the schedule's 1 s, skips its ticks while paused and
    ticks again once resumed; on a fake clock that each wait of the loop moves on, with the
    admin's edits made at fake seconds of the wait (real gRPC reads of the schedule)."""
    set_schedule("exp-reconcile", seconds=1)
    clock = FakeClock()
    start = clock.now
    controller = Counting(clock)
    follower = ScheduleFollower(controller, lambda: schedules.get("exp-reconcile"), 60.0)
    stop = threading.Event()
    marks: dict[str, tuple[float, int]] = {}

    def pause(seconds: float) -> bool:
        clock.now += seconds
        elapsed, ticked = clock.now - start, len(controller.starts)
        if "paused" not in marks:
            # The schedule's 1 s, not the 60 s the loop was started with.
            assert elapsed < 10, "the loop did not follow the 1 s schedule"
            if ticked >= 3:
                set_schedule("exp-reconcile", enabled=False)
                marks["paused"] = (clock.now, ticked)
        elif "resumed" not in marks:
            paused_at, paused_ticks = marks["paused"]
            # The tick in progress may end within a slice; after it, the loop reads "paused".
            if clock.now - paused_at >= 1.5 and "settled" not in marks:
                marks["settled"] = (clock.now, ticked)
            if clock.now - paused_at >= 4.0:
                assert ticked == marks["settled"][1], "a paused loop ticked"
                set_schedule("exp-reconcile", enabled=True, seconds=1)
                marks["resumed"] = (clock.now, ticked)
        else:
            resumed_at, resumed_ticks = marks["resumed"]
            if ticked >= resumed_ticks + 2:
                stop.set()
                return True
            assert clock.now - resumed_at < 5, "the resumed loop did not tick"
        return False

    run_loop(controller=controller, interval=60.0, stop=stop, schedule=follower.before_tick,
             clock=clock, pause=pause)
    assert stop.is_set() and set(marks) == {"paused", "settled", "resumed"}
    gaps = [b - a for a, b in zip(controller.starts, controller.starts[1:])]
    assert min(gaps) > 0.8


@dataclass(frozen=True)
class Config:
    poll_seconds: float = 10.0


class Analyzer:
    name = "analyzer"

    def __init__(self):
        self.config = Config()
        self.next_poll = 123.0


def test_the_analyzer_discovery_follows_its_schedule(schedules):
    analyzer = Analyzer()
    follower = ScheduleFollower(analyzer, lambda: schedules.get("offline-analysis-discovery"),
                                2.0)
    assert follower.before_tick() == (True, 2.0)  # the loop keeps its own interval
    assert analyzer.config.poll_seconds == 10.0 and analyzer.next_poll == 0.0
    analyzer.next_poll = 50.0
    assert follower.before_tick() == (True, 2.0) and analyzer.next_poll == 50.0  # no change
    set_schedule("offline-analysis-discovery", enabled=False)
    follower.before_tick()
    assert analyzer.config.poll_seconds == math.inf and analyzer.next_poll == math.inf
    set_schedule("offline-analysis-discovery", enabled=True, seconds=30)
    follower.before_tick()
    assert analyzer.config.poll_seconds == 30.0 and analyzer.next_poll == 0.0


def test_without_an_answer_the_loop_keeps_what_it_had(schedules):
    controller = Counting()
    answers = [schedules.get("exp-reconcile")]

    def read():
        if answers:
            return answers.pop()
        raise NotFound("schedule deleted")

    follower = ScheduleFollower(controller, read, 60.0)
    assert follower.before_tick() == (True, 2.0)
    assert follower.before_tick() == (True, 2.0)  # the last schedule read
    assert ScheduleFollower(controller, read, 60.0).before_tick() == (True, 60.0)


def test_a_change_applies_within_one_slice_and_the_heartbeat_never_waits_for_a_tick(
        schedules, tmp_path, monkeypatch):
    """`exp-reconcile` 2 s -> 300 s -> 2 s, then paused and resumed, on a fake clock: the loop
    reads its schedule and beats after every slice of its wait (at most `SLICE_SECONDS`), so
    the 2 s are back within one slice of the change, not after the 300 s, and
    `checkheartbeat` passes throughout."""
    from django.core.management import call_command

    from controllers.runner import SLICE_SECONDS

    heartbeat = tmp_path / "heartbeat"
    monkeypatch.setenv("FALCON_HEARTBEAT_FILE", str(heartbeat))
    clock = FakeClock()
    start = clock.now
    ticks: list[float] = []
    stop = threading.Event()

    class Exp:
        name = "exp"

        def tick(self):
            ticks.append(clock.now - start)
            if clock.now - start >= 202:  # two ticks after the resume
                stop.set()

    # (fake second, change): the admin edits of the report.
    changes = [(5.0, dict(seconds=300)), (100.0, dict(seconds=2)),
               (110.0, dict(enabled=False)), (200.0, dict(enabled=True))]
    applied: dict[float, float] = {}

    def pause(seconds: float) -> bool:
        assert 0 < seconds <= SLICE_SECONDS
        # The loop beat since the last slice: the liveness probe passes, then forget the beat.
        call_command("checkheartbeat", "--max-age", "60", stdout=open(tmp_path / "out", "w"))
        heartbeat.unlink()
        clock.now += seconds
        while changes and clock.now - start >= changes[0][0]:
            at, change = changes.pop(0)
            set_schedule("exp-reconcile", **change)
            applied[at] = clock.now - start
        return False

    follower = ScheduleFollower(Exp(), lambda: schedules.get("exp-reconcile"), 60.0)
    run_loop(Exp(), interval=60.0, stop=stop, schedule=follower.before_tick, clock=clock,
             pause=pause)
    assert ticks[:3] == [0.0, 2.0, 4.0]
    # 300 s read at 5 s: no tick until the change back to 2 s, then one within a slice.
    back = applied[100.0]
    assert ticks[3] >= back and ticks[3] - back <= SLICE_SECONDS, ticks
    assert ticks[4] == ticks[3] + 2.0
    # Paused at 110 s: no tick until resumed at 200 s, then within a slice; the heartbeat was
    # checked at every slice meanwhile.
    assert not [t for t in ticks if applied[110.0] + SLICE_SECONDS < t < applied[200.0]], ticks
    resumed = [t for t in ticks if t >= applied[200.0]]
    assert resumed and resumed[0] - applied[200.0] <= SLICE_SECONDS, ticks
