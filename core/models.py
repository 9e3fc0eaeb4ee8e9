"""The abstract model of every entity with a state machine (Experiment, Job, Artifact).

Its status changes only through the methods here, each ONE guarded transition of
`core.domain.statemachine` over the entity's one transition table (`machine`):
- `StatefulModel.transition_pk(pk, target, ...)`: the path of the UpdateExp/Job/ArtifactStatus
  services, which the controllers call with a target status over gRPC;
- `transition(target)` and the named methods on an instance (`RunModel.mark_running`,
  `request_abort`, ..., `Artifact.mark_failed`), for code that holds the row;
- `TransitionQuerySet.transition(target)`: many rows in one UPDATE (AbortExp's jobs).
Adding an entity: docs/architecture.md, "Adding an entity with a state machine".

`TransitionEvent` (`core.domain.transition_events`) is the transition history: the engine writes one row per status change, in the
transaction of the change (docs/decisions.md, "Transition history").
"""
from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Self

from django.db import models

from core.domain.statemachine import StateMachine, apply_transition, apply_transition_many, delete_terminal
from core.domain.transition_events import TransitionEvent  # noqa: F401 (a model of this app)


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
    their status enum (`core.domain.statuses`).
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
                      extra: dict[str, Any] | None = None,
                      started_at: datetime | None = None) -> tuple[Self, bool]:
        """Move row `pk` to `target` (one guarded transition by pk); return `(row, changed)`.

        See `core.domain.statemachine.apply_transition` for the arguments.

        Raises:
            NotFound: no row has this pk.
            InvalidTransition: the table does not allow the row's state to move to `target`.
            TransitionRace: `expected` was given and the row had already left it.
            ValidationFailed: `started_at` with a target that takes none.
        """
        return apply_transition(cls.machine, cls._default_manager, pk=pk, target=target,
                                reason=reason, message=message, expected=expected, extra=extra,
                                started_at=started_at)

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


class RunModel(StatefulModel):
    """A run: an Experiment or a Job, whose table `run_lifecycle` builds from `statuses`.

    `<initial> -> Running -> Succeeded | Failed`, and any open state -> Aborting -> Aborted. Each
    method is one guarded conditional UPDATE (`transition`) and returns whether it changed the
    row; a non-terminal row already in the target state gets its reason and message refreshed.

    Raises (every method):
        InvalidTransition: the table does not allow the row's current state to move there.
        NotFound: the row no longer exists.
    """

    statuses: ClassVar[type[StrEnum]]

    started_at = models.DateTimeField(null=True, blank=True)
    aborting_at = models.DateTimeField(null=True, blank=True)
    aborted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    def mark_running(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Move to Running (from the initial state): the run's work has started."""
        return self.transition(self.statuses["RUNNING"], reason=reason, message=message)

    def mark_succeeded(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Move to Succeeded (from the initial state or Running)."""
        return self.transition(self.statuses["SUCCEEDED"], reason=reason, message=message)

    def mark_failed(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Move to Failed (from the initial state or Running)."""
        return self.transition(self.statuses["FAILED"], reason=reason, message=message)

    def request_abort(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Move to Aborting (from the initial state or Running); sets `aborting_at`."""
        return self.transition(self.statuses["ABORTING"], reason=reason, message=message)

    def mark_aborted(self, *, reason: str | None = None, message: str | None = None) -> bool:
        """Move to Aborted (from Aborting): nothing of the run is left."""
        return self.transition(self.statuses["ABORTED"], reason=reason, message=message)
