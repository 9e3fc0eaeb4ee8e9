"""HTTP gateway of an experiment's transition history: `GET /api/v1/exps/{exp_id}/events`.

The events are written by the transition engine (`core.domain.statemachine`) and read by
`core.domain.history`; this view checks the experiment exists and serializes them.
"""
from __future__ import annotations

from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import ValidationFailed
from core.domain.history import ENTITY_TYPES, MAX_EVENTS, exp_events
from core.models import TransitionEvent

from .. import selectors
from .serializers import UTCModelSerializer
from .views import EXP_ID_PARAM


class TransitionEventSerializer(UTCModelSerializer):
    """One status change: which row, from and to which status, why, who, when (microseconds)."""

    entity_type = serializers.ChoiceField(choices=ENTITY_TYPES, read_only=True)

    class Meta:
        model = TransitionEvent
        fields = ["id", "entity_type", "entity_id", "from_status", "to_status", "reason",
                  "message", "actor", "at"]
        read_only_fields = fields


class ExpEventsSerializer(serializers.Serializer):
    """The history of one experiment: its events, oldest first."""

    exp_id = serializers.IntegerField()
    events = TransitionEventSerializer(many=True)


class ExpEventsView(APIView):
    """The status changes of one experiment, its jobs, its artifact and its analyses."""

    @extend_schema(summary="ListExpEvents", parameters=[EXP_ID_PARAM],
                   description="Every status change of the experiment and of its jobs, artifact "
                               "and analyses, oldest first (time to the microsecond), with the "
                               f"reason, message and actor; at most {MAX_EVENTS}. The events "
                               "of a deleted experiment are kept and still served.",
                   responses={200: ExpEventsSerializer})
    def get(self, request, exp_id: int):
        """Return `{"exp_id", "events"}`; the events outlive a deleted experiment, so 404 only
        when the experiment neither exists nor has any event; 400 for any query parameter."""
        if request.query_params:
            raise ValidationFailed({name: ["is not a query parameter of this endpoint; it "
                                           "takes none."] for name in request.query_params})
        events = list(exp_events(exp_id=exp_id))
        if not events:
            selectors.exp_get_summary(exp_id=exp_id)  # NotFound -> 404
        return Response(ExpEventsSerializer({"exp_id": exp_id, "events": events}).data)


@csrf_exempt
def bad_events_exp_id(request, raw: str):
    """400 naming `exp_id` for `/api/v1/exps/<raw>/events` where `raw` is not an id; 405 for a
    method other than GET (as `views.bad_exp_id` answers for the experiment's own paths)."""
    from .views import bad_id_answer

    return bad_id_answer(request, raw, ("GET", "HEAD", "OPTIONS"))
