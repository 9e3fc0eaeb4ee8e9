"""The transition history's model: one row per status change, written by `core.domain.statemachine`.

Its own module so that the engine can import the model it writes without importing the abstract
models that call the engine (`core.models` re-exports it: the model belongs to the `core` app).
"""
from __future__ import annotations

from django.db import models


class TransitionEvent(models.Model):
    """One status change of an experiment, a job, an artifact or an analysis.

    Written by the transition engine (`core.domain.statemachine`) in the same transaction as the change,
    never by anything else, and never updated. Rows outlive the entity (no foreign key): deleting
    an experiment keeps the record of what happened to it.

    Attributes:
        entity_type: `experiment`, `job`, `artifact` or `analysis` (the machine's name).
        entity_id: the row's primary key as text (an analysis id is a string).
        experiment_id: the experiment the row belongs to (its own id for an experiment).
        from_status, to_status: the status left and the status entered.
        reason, message: the row's cause and detail after the change.
        actor: who asked: a user's email, a service's label (`internal service`,
            `service <name>`: a controller) or `system` (`core.observability.context.current_actor`).
        at: when, to the microsecond (DATETIME(6) on MariaDB).
    """

    entity_type = models.CharField(max_length=16)
    entity_id = models.CharField(max_length=40)
    experiment_id = models.BigIntegerField()
    from_status = models.CharField(max_length=16)
    to_status = models.CharField(max_length=16)
    reason = models.CharField(max_length=255, blank=True, default="")
    message = models.TextField(blank=True, default="")
    actor = models.CharField(max_length=255, blank=True, default="")
    at = models.DateTimeField()

    class Meta:
        db_table = "transition_events"
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["experiment_id", "at", "id"], name="transition_exp_at"),
            models.Index(fields=["entity_type", "entity_id", "at"], name="transition_entity_at"),
        ]

    def __str__(self) -> str:
        return (f"{self.entity_type} {self.entity_id}: {self.from_status} -> {self.to_status} "
                f"at {self.at:%Y-%m-%d %H:%M:%S.%f}")
