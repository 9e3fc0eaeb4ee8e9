"""Columns that every stateful entity (Experiment, Job, Artifact) shares."""
from django.db import models


class StatusFields(models.Model):
    """Status, its cause and the timestamps users expect, for an entity with a state machine.

    `status` changes only through `core.statemachine.apply_transition`.
    """

    reason = models.CharField(max_length=255, blank=True, default="")
    message = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
