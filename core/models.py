"""The abstract model of every entity with a state machine (Experiment, Job, Artifact).

Its status changes only through the methods here, each ONE guarded transition of
`core.statemachine` over the entity's one transition table (`machine`). Concrete models add
named methods for their transitions (`Job.mark_running`, `Experiment.request_abort`).
"""
from __future__ import annotations

from typing import Any, ClassVar, Self

from django.db import models

from .statemachine import StateMachine, apply_transition, apply_transition_many, delete_terminal


class TransitionQuerySet(models.QuerySet):
    """A queryset that moves all its rows through the model's state machine at once."""

    def transition(self, target: str, *, reason: str | None = None,
                   message: str | None = None) -> int:
        """Move every row whose state allows it to `target`, in one UPDATE; return the count.

        Rows in states the table does not allow to reach `target` are left alone.
        """
        return apply_transition_many(self.model.machine, self, target=target, reason=reason,
                                     message=message)


class StatefulModel(models.Model):
    """Status, its cause and the timestamps users expect, for an entity with a state machine.

    Subclasses set `machine` (their transition table) and a `status` field with the choices of
    their status enum (`core.statuses`).
    """

    machine: ClassVar[StateMachine]

    reason = models.CharField(max_length=255, blank=True, default="")
    message = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TransitionQuerySet.as_manager()

    class Meta:
        abstract = True

    @classmethod
    def transition_pk(cls, pk: int, target: str, *, reason: str | None = None,
                      message: str | None = None, expected: str | None = None,
                      extra: dict[str, Any] | None = None) -> tuple[Self, bool]:
        """Move row `pk` to `target` (one guarded transition by pk); return `(row, changed)`.

        See `core.statemachine.apply_transition` for the arguments.

        Raises:
            NotFound: no row has this pk.
            InvalidTransition: the table does not allow the row's state to move to `target`.
            TransitionRace: `expected` was given and the row had already left it.
        """
        return apply_transition(cls.machine, cls._default_manager, pk=pk, target=target,
                                reason=reason, message=message, expected=expected, extra=extra)

    def transition(self, target: str, *, reason: str | None = None, message: str | None = None,
                   expected: str | None = None, extra: dict[str, Any] | None = None) -> bool:
        """Move this row to `target` (one guarded UPDATE) and refresh it; True if it changed.

        Raises:
            NotFound, InvalidTransition, TransitionRace: as `transition_pk`.
        """
        row, changed = type(self).transition_pk(self.pk, target, reason=reason, message=message,
                                                expected=expected, extra=extra)
        for field in self._meta.concrete_fields:
            setattr(self, field.attname, getattr(row, field.attname))
        return changed

    @property
    def is_terminal(self) -> bool:
        """True when the status can never change again."""
        return self.status in self.machine.terminal

    @classmethod
    def delete_terminal_pk(cls, pk: int, *, hint: str = "") -> None:
        """Delete row `pk` only if it is terminal, in one guarded DELETE.

        Raises:
            NotFound: no row has this pk.
            Conflict: the row is not terminal (HTTP 409); `hint` says what to do instead.
        """
        delete_terminal(cls.machine, cls._default_manager, pk=pk, hint=hint)
