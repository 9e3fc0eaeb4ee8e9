"""Follow a loop's schedule: read it from the API server while waiting, apply it at once.

Operators edit or pause the loops' schedules in the admin (django-celery-beat periodic tasks,
`schedules.selectors`); a controller reads its own with `ScheduleService.GetSchedule` over gRPC (never
the tables) before its first tick and after every slice of its wait for the next one
(`runner.SLICE_SECONDS`, 1 s), so a change applies within a second whatever the previous
interval (the loop does not wait out a long interval it read before):

- the exp controller (`exp-reconcile`) and the resource manager (`resource-sync`): the loop's
  interval; paused: the tick is skipped (the heartbeat still beats);
- the analyzer (`offline-analysis-discovery`): the seconds between two offline discovery polls
  (its loop keeps its interval: admission and observation go on); paused: no discovery.

When the API server does not answer or has no such schedule, the loop keeps the last schedule
it read, else the interval it was started with (`--interval`, `FALCON_CONTROLLER_INTERVAL_SECONDS`).
"""
from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from core.errors import FalconError
from core.grpc.errors import error_from_rpc_error
from falcon_proto.falcon.v1 import schedule_pb2, schedule_pb2_grpc

from .grpc_client import GrpcClient

log = logging.getLogger("falcon.controllers")

# The schedule each controller follows (schedules.selectors.DEFAULTS).
SCHEDULE_OF = {"exp": "exp-reconcile", "resources": "resource-sync",
               "analyzer": "offline-analysis-discovery"}


@dataclass(frozen=True)
class Schedule:
    """A loop's schedule: whether it runs, and the seconds between two runs."""

    name: str
    enabled: bool
    interval_seconds: float


class ScheduleClient(GrpcClient):
    """`ScheduleService` over gRPC; arguments as `GrpcClient`."""

    def _stubs(self, channel: grpc.Channel) -> None:
        self.schedules = schedule_pb2_grpc.ScheduleServiceStub(channel)

    def get(self, name: str) -> Schedule:
        """Return the schedule `name`.

        Raises:
            FalconError: the server's error (NotFound when there is no such schedule,
                ApiUnavailable when it cannot be reached).
        """
        from core.grpc.channel import auth_metadata

        try:
            item = self.schedules.GetSchedule(schedule_pb2.GetScheduleReq(name=name),
                                              timeout=self.timeout,
                                              metadata=auth_metadata(self._token()))
        except grpc.RpcError as exc:
            raise error_from_rpc_error(exc) from None
        return Schedule(name=item.name, enabled=item.enabled,
                        interval_seconds=item.interval_seconds)


class ScheduleFollower:
    """Read one schedule while the loop waits and apply it to a controller (module docstring).

    Args:
        controller: the reconciler; its `name` picks the schedule (`SCHEDULE_OF`).
        read: returns the current `Schedule` (`ScheduleClient(...).get` bound to the name);
            raises `FalconError` when it cannot.
        interval: the loop's interval when no schedule has been read.
    """

    def __init__(self, controller: Any, read: Callable[[], Schedule], interval: float):
        self.controller = controller
        self.read = read
        self.fallback = interval
        self.current: Schedule | None = None

    def before_tick(self) -> tuple[bool, float]:
        """Read the schedule and apply it; return `(run the next tick?, seconds between two
        ticks)`. Called by `runner.run_loop` before the first tick and after each slice of a
        wait."""
        try:
            schedule = self.read()
        except FalconError as exc:
            if self.current is None:
                log.debug("%s: no schedule (%s); every %s s", self.controller.name, exc,
                          self.fallback)
            schedule = self.current
        if schedule is not None and schedule != self.current:
            log.info("%s: schedule %s %s, every %s s", self.controller.name, schedule.name,
                     "enabled" if schedule.enabled else "paused", schedule.interval_seconds)
        previous, self.current = self.current, schedule
        if getattr(self.controller, "name", "") == "analyzer":
            self._apply_discovery(previous, schedule)
            return True, self.fallback
        if schedule is None:
            return True, self.fallback
        return schedule.enabled, max(schedule.interval_seconds, 0.05)

    def _apply_discovery(self, previous: Schedule | None, schedule: Schedule | None) -> None:
        """The analyzer: the discovery poll's seconds follow the schedule; paused: no poll."""
        if schedule is None or schedule == previous:
            return
        config = self.controller.config
        poll = schedule.interval_seconds if schedule.enabled else math.inf
        self.controller.config = dataclasses.replace(config, poll_seconds=poll)
        # Poll at once when resumed or shortened; never while paused.
        self.controller.next_poll = 0.0 if schedule.enabled else math.inf


def follower_from_settings(controller: Any, interval: float) -> ScheduleFollower | None:
    """A follower of `controller`'s schedule over the settings' gRPC target, or None when the
    controller has no schedule."""
    name = SCHEDULE_OF.get(getattr(controller, "name", ""))
    if name is None:
        return None
    client = ScheduleClient.from_settings()
    return ScheduleFollower(controller, lambda: client.get(name), interval)
