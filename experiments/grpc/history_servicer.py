"""HistoryService (falcon.v1): an experiment's transition history over gRPC.

The events are written by the transition engine (`core.domain.statemachine`) and read by
`core.domain.history`, as for `GET /api/v1/exps/{exp_id}/events`.
"""
from __future__ import annotations

from core.grpc.from_proto import require_id, timestamp
from core.domain.history import exp_events
from falcon_proto.falcon.v1 import history_pb2, history_pb2_grpc

from .. import selectors


class HistoryServicer(history_pb2_grpc.HistoryServiceServicer):
    """HistoryService over `core.domain.history`."""

    def ListExpEvents(self, request, context):
        """ListExpEvents: the experiment's events oldest first, kept after it is deleted;
        NOT_FOUND when it neither exists nor has any event."""
        exp_id = require_id(request.exp_id, "exp_id")
        events = list(exp_events(exp_id=exp_id))
        if not events:  # the events outlive a deleted experiment
            selectors.exp_get_summary(exp_id=exp_id)
        return history_pb2.ListExpEventsResp(exp_id=exp_id, events=[
            history_pb2.TransitionEvent(
                id=event.pk, entity_type=event.entity_type, entity_id=event.entity_id,
                from_status=event.from_status, to_status=event.to_status, reason=event.reason,
                message=event.message, actor=event.actor, at=timestamp(event.at))
            for event in events])
