"""ScheduleService (falcon.v1): a loop's schedule (`schedules.selectors`) for the controllers."""
from __future__ import annotations

from core.errors import ValidationFailed
from core.grpc.from_proto import timestamp
from schedules.selectors import schedule_get
from falcon_proto.falcon.v1 import schedule_pb2, schedule_pb2_grpc


class ScheduleServicer(schedule_pb2_grpc.ScheduleServiceServicer):
    """ScheduleService over `schedules.selectors`."""

    def GetSchedule(self, request, context):
        """GetSchedule: the schedule named `name`; INVALID_ARGUMENT without one, NOT_FOUND."""
        if not request.name:
            raise ValidationFailed({"name": ["is required, e.g. exp-reconcile."]})
        view = schedule_get(request.name)
        return schedule_pb2.ScheduleItem(
            name=view.name, enabled=view.enabled, interval_seconds=view.interval_seconds,
            last_run_at=timestamp(view.last_run_at))
