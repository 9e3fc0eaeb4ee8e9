"""Reading the transition history (`core.models.TransitionEvent`), which only the engine writes.

One experiment's history is its own status changes and those of its jobs, its artifact and its
analyses, in the order they happened (time to the microsecond, then insertion order), read as
one range of the index `transition_exp_at`.
"""
from __future__ import annotations

from django.db.models import QuerySet

from core.domain.transition_events import TransitionEvent

# The most events one read returns (an experiment of 100 roles changes a few hundred times).
MAX_EVENTS = 5000
ENTITY_TYPES = ("experiment", "job", "artifact", "analysis")


def exp_events(*, exp_id: int, limit: int = MAX_EVENTS) -> QuerySet[TransitionEvent]:
    """Return the status changes of experiment `exp_id` and its rows, oldest first.

    Args:
        exp_id: the experiment's id (whether it exists is the caller's question).
        limit: the most events returned (the oldest are kept).
    """
    return TransitionEvent.objects.filter(experiment_id=exp_id).order_by("at", "id")[:limit]


def entity_events(*, entity_type: str, entity_id, limit: int = MAX_EVENTS
                  ) -> QuerySet[TransitionEvent]:
    """Return the status changes of one row (`entity_type` in `ENTITY_TYPES`), oldest first."""
    return (TransitionEvent.objects.filter(entity_type=entity_type, entity_id=str(entity_id))
            .order_by("at", "id")[:limit])
