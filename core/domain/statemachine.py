"""The guarded transition engine behind every entity's state machine.

Each model holds ONE transition table, a `StateMachine` (`{target: frozenset(allowed sources)}`
and the terminal set), as its `machine` attribute; its state-machine methods
(`core.models.StatefulModel`) call `apply_transition`, which locks one row by its primary key
(`SELECT ... FOR UPDATE WHERE id=%s`), checks its status against the allowed sources and writes
it by primary key (`UPDATE ... WHERE id=%s`), all in one short transaction, so two writers
racing on one row cannot both win, and repeating a transition already applied is a no-op. The
row is never reached through the status index, whose lock order would oppose AbortExp's
(`experiments.locks`). Many rows move with one `UPDATE ... WHERE id IN (...) AND status IN
(sources)` (`apply_transition_many`). This is django-fsm's
`ConcurrentTransitionMixin` idea without the dependency: a status is never assigned and saved,
because a full `save()` would silently revert columns another process just changed.

It is also the one place where the text a transition carries (`reason`, `message`, and text
columns in `extra` such as `cluster_job_name`, all sent by controllers) is bounded: cut to its
column's length, and `message` to `MAX_STATUS_MESSAGE_BYTES`, ending with a visible
`… [truncated N bytes]` (`core.limits.text.truncate`). Otherwise one 5 MiB message would be stored and
sent in every reply and page that carries its row.

It is also the one place that records a run's start as its cluster reported it: a transition
to a state in `StateMachine.reported_start` (a Job's Running, Succeeded, Failed) may carry the
time the cluster started the run (Kubernetes Job `status.startTime`, the local backend's first
replica start). It becomes the row's `started_at` only if none is recorded (the first start
wins), clamped to [the row's `created_at`, now] (`clamp_start`): never in the future, never
after `finished_at` (which a terminal state sets to now), never before the row existed. Without
it, `started_at` is the time Falcon first saw the row Running, and a run that went Pending ->
Succeeded between two reads had none at all.

And it is the one place that records the transition history: every status change writes a
`core.models.TransitionEvent` (entity, from, to, reason, message, actor, time to the
microsecond) in the same transaction as the UPDATE, single rows and batches alike, so no change
is ever missing from the history nor recorded without happening. A repeated transition or a
refreshed reason in the same state writes none.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import models, transaction
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.observability.context import current_actor
from core.errors import Conflict, InvalidTransition, NotFound, TransitionRace, ValidationFailed
from core.database.prepared import insert_rows
from core.limits.text import truncate

log = logging.getLogger("falcon.transitions")
# The log key of each entity's id (core.observability.logs.CONTEXT_KEYS).
ID_KEYS = {"experiment": "exp_id", "job": "job_id", "artifact": "artifact_id",
           "analysis": "analysis_id"}

# The most UTF-8 bytes a status `message` keeps (a text column has no length of its own).
# Far above what controllers write (a failing replica's last 2,048 bytes plus a sentence).
MAX_STATUS_MESSAGE_BYTES = 64 * 1024


def bounded_text(model: type[models.Model], column: str, value: Any) -> Any:
    """Return `value` cut to fit `model.column` with a visible marker (strings only).

    A column with a `max_length` (reason, cluster_job_name) keeps that many characters; a text
    column (message) `MAX_STATUS_MESSAGE_BYTES` bytes. Other values are returned unchanged.
    """
    if not isinstance(value, str):
        return value
    field = model._meta.get_field(column)
    if field.max_length:
        return truncate(value, max_chars=field.max_length)
    if isinstance(field, models.TextField):
        return truncate(value, max_bytes=MAX_STATUS_MESSAGE_BYTES)
    return value


def experiment_column(model: type[models.Model]) -> str:
    """The column naming the experiment a row of `model` belongs to (`pk` for an experiment)."""
    try:
        model._meta.get_field("experiment")
    except Exception:
        return "pk"
    return "experiment_id"


# The columns of a TransitionEvent row, in the order `record_transitions` gives them.
EVENT_FIELDS = ("entity_type", "entity_id", "experiment_id", "from_status", "to_status",
                "reason", "message", "actor", "at")


def record_transitions(machine: "StateMachine", changes: list[tuple[Any, Any, str, str, str]],
                       *, target: str, at: datetime, using: str) -> None:
    """Write one `TransitionEvent` per changed row with one prepared INSERT
    (`core.database.prepared.insert_rows`), in the caller's transaction.

    Args:
        machine: the entity's table (its `name`, lower-cased, is the event's entity type).
        changes: `(pk, experiment id, from status, reason, message)` of every row that
            changed, with its cause and detail after the change.
        target: the status entered.
        at: the time of the change (the rows' `updated_at`).
        using: the database alias of the transaction.
    """
    from core.domain.transition_events import TransitionEvent

    if not changes:
        return
    actor = current_actor()
    entity = machine.name.lower()
    insert_rows(TransitionEvent, EVENT_FIELDS, [
        (entity, str(pk), exp_id, source, target, reason or "", message or "", actor, at)
        for pk, exp_id, source, reason, message in changes
    ], using=using)
    # Logged once the change is committed, with the ids of what changed (core.observability.logs).
    lines = [(f"{machine.name} {pk}: {source} -> {target}"
              + (f" ({reason})" if reason else "") + f" by {actor}",
              {"exp_id": exp_id, ID_KEYS.get(entity, "entity_id"): pk})
             for pk, exp_id, source, reason, _message in changes]
    transaction.on_commit(lambda: [log.info(text, extra=ids) for text, ids in lines],
                          using=using)


@dataclass(frozen=True)
class StateMachine:
    """One entity's transition table.

    Attributes:
        name: the entity's name for messages ("Job").
        transitions: `{target: frozenset(sources)}`; a target absent here is never reachable.
        terminal: states that never change once reached.
        set_on_enter: `{target: timestamp field}` set to "now" when the row enters `target`.
        set_once_on_enter: like `set_on_enter` but kept if already set (`started_at`).
        reported_start: targets whose transition may carry the run's start as the cluster
            reported it (`START_COLUMN`, set once; see `clamp_start`).
    """

    name: str
    transitions: Mapping[str, frozenset[str]]
    terminal: frozenset[str]
    set_on_enter: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    set_once_on_enter: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reported_start: frozenset[str] = frozenset()

    def sources(self, target: str) -> frozenset[str]:
        """Return the states a row may leave to enter `target`.

        Raises:
            InvalidTransition: `target` is not a state any transition leads to.
        """
        try:
            return self.transitions[target]
        except KeyError:
            raise InvalidTransition(
                f"{self.name} status cannot be set to {target!r}: "
                f"allowed targets are {', '.join(sorted(self.transitions))}."
            ) from None

    def allows(self, source: str, target: str) -> bool:
        """Return whether a row in `source` may enter `target` (False for an unknown target)."""
        return source in self.transitions.get(target, frozenset())

    def updates_for(self, target: str, now: datetime) -> dict[str, Any]:
        """Return the column updates that entering `target` at `now` implies."""
        updates: dict[str, Any] = {"status": target, "updated_at": now}
        for column in self.set_on_enter.get(target, ()):
            updates[column] = now
        for column in self.set_once_on_enter.get(target, ()):
            updates[column] = Coalesce(models.F(column), models.Value(now))
        return updates


# The column a reported start sets (`StateMachine.reported_start`).
START_COLUMN = "started_at"
# Rows per `CASE WHEN pk = ...` of reported starts: a statement's parameters stay few.
START_CASE_ROWS = 200


def start_update(starts: Mapping[Any, datetime]) -> Any:
    """Return the `START_COLUMN` value of an UPDATE of the rows `starts` names.

    Args:
        starts: `{pk: start}` of every row the UPDATE writes, each already clamped.

    Returns:
        An expression keeping a recorded start (the first start wins), else the row's own
        reported start (one `CASE WHEN pk = ...` when they differ).
    """
    values = set(starts.values())
    if len(values) == 1:
        return Coalesce(models.F(START_COLUMN), models.Value(values.pop()))
    return Coalesce(models.F(START_COLUMN), models.Case(
        *[models.When(pk=pk, then=models.Value(value)) for pk, value in starts.items()],
        output_field=models.DateTimeField()))


def clamp_start(reported: datetime, *, created: datetime, now: datetime,
                what: str = "") -> datetime:
    """Return a reported start no later than `now` and no earlier than `created`.

    A cluster's clock may run ahead of the API server's (a start "in the future" is recorded as
    now, and logged) or its start may be cut to the second (Kubernetes `startTime`), before the
    row was created within that second: a start before the row existed is recorded as its
    creation. So a duration is never negative and `started_at <= finished_at` holds.

    Args:
        reported: the start the cluster reported (aware).
        created: the row's `created_at`.
        now: the time of the transition (a terminal state's `finished_at`).
        what: the row, for the log line (`Job 12`).
    """
    if reported > now:
        log.warning("%s: the cluster reported a start %s after the API server's now %s (a "
                    "clock ahead?); recorded as now", what, reported.isoformat(),
                    now.isoformat())
        return now
    return max(reported, created)


def check_reported_start(machine: StateMachine, target: str, started_at: datetime | None,
                         *, key: str = "started_at") -> None:
    """Refuse a reported start with a transition that does not take one.

    Raises:
        ValidationFailed: `started_at` is given with a target outside
            `machine.reported_start`, keyed `key`.
    """
    if started_at is not None and target not in machine.reported_start:
        allowed = ", ".join(sorted(machine.reported_start)) or "no status"
        raise ValidationFailed({key: [
            f"a start is recorded only with {allowed}; leave it unset with {target}"]})


def apply_transition(
    machine: StateMachine,
    queryset: models.QuerySet,
    *,
    pk: int,
    target: str,
    reason: str | None = None,
    message: str | None = None,
    expected: str | None = None,
    extra: Mapping[str, Any] | None = None,
    started_at: datetime | None = None,
) -> tuple[models.Model, bool]:
    """Move row `pk` of `queryset` to `target`: lock it by pk, check its state, UPDATE by pk.

    Args:
        machine: the entity's transition table.
        queryset: the model's queryset (`Job.objects`).
        pk: the row's primary key.
        target: the state to enter.
        reason: short machine-friendly cause (`BackoffLimitExceeded`); kept when None; cut to
            its column (255 characters) with a marker.
        message: human-readable detail; kept when None; cut to `MAX_STATUS_MESSAGE_BYTES` with
            a marker.
        expected: if given, the state the caller read before deciding; a row found in another
            state raises `TransitionRace` instead of `InvalidTransition`.
        extra: further columns to set in the same UPDATE (for example `cluster_job_name`);
            text is cut to its column with a marker.
        started_at: when the run started as its cluster reported it (aware), for a target in
            `machine.reported_start`: recorded if the row has no start yet, clamped
            (`clamp_start`).

    Returns:
        `(row, changed)`: the fresh row and whether this call changed its status. Repeating a
        transition already applied returns `changed=False`; a non-terminal row already in
        `target` gets its reason/message refreshed (a Pending job's "why still pending").

    Raises:
        NotFound: no row has this pk.
        InvalidTransition: the table does not allow the row's state to move to `target`.
        TransitionRace: `expected` was given and the row had already left it.
        ValidationFailed: `started_at` with a target that takes none.
    """
    sources = machine.sources(target)
    check_reported_start(machine, target, started_at)
    now = timezone.now()
    updates = machine.updates_for(target, now)
    model = queryset.model
    detail: dict[str, Any] = {}
    if reason is not None:
        detail["reason"] = bounded_text(model, "reason", reason)
    if message is not None:
        detail["message"] = bounded_text(model, "message", message)
    updates.update(detail)
    if extra:
        extra = {column: bounded_text(model, column, value) for column, value in extra.items()}
        updates.update(extra)

    guard = sources if expected is None else sources & {expected}
    # Lock the row by primary key, then write it by primary key: an UPDATE filtered on the
    # status too may be served by the status index (it holds (status, id)), locking that index
    # entry before the row, the reverse of AbortExp's order (decisions.md#dec-aggregate).
    with transaction.atomic(using=queryset.db):
        row = queryset.select_for_update().filter(pk=pk).first()
        if row is None:
            raise NotFound(f"{machine.name} {pk} does not exist.")
        if row.status in guard:
            if started_at is not None:
                updates[START_COLUMN] = start_update({pk: clamp_start(
                    started_at, created=row.created_at, now=now, what=f"{machine.name} {pk}")})
            queryset.filter(pk=pk).update(**updates)
            fresh = queryset.get(pk=pk)
            exp_id = fresh.pk if experiment_column(model) == "pk" else fresh.experiment_id
            record_transitions(machine, [(pk, exp_id, row.status, fresh.reason, fresh.message)],
                               target=target, at=now, using=queryset.db)
            return fresh, True
        if row.status == target:
            if target not in machine.terminal and (detail or extra):
                queryset.filter(pk=pk).update(updated_at=now, **detail, **(extra or {}))
                row.refresh_from_db()
            return row, False
    raise refusal(machine, StatusChange(pk, target, expected=expected), row.status, sources)


def apply_transition_many(
    machine: StateMachine,
    queryset: models.QuerySet,
    *,
    target: str,
    reason: str | None = None,
    message: str | None = None,
) -> int:
    """Move every row of `queryset` whose state allows it to `target`, in one UPDATE.

    Rows in other states are left alone (the caller filters to the rows it means). The rows
    are locked through `queryset` (callers select them by primary key), their states read, the
    movable ones written by primary key with the status guard repeated, and one
    `TransitionEvent` per changed row written, all in one transaction. Returns the number of
    rows changed.
    """
    sources = machine.sources(target)
    now = timezone.now()
    model = queryset.model
    updates = machine.updates_for(target, now)
    if reason is not None:
        updates["reason"] = bounded_text(model, "reason", reason)
    if message is not None:
        updates["message"] = bounded_text(model, "message", message)
    exp_column = experiment_column(model)
    with transaction.atomic(using=queryset.db):
        rows = [row for row in queryset.select_for_update().values_list("pk", exp_column, "status")
                if row[2] in sources]
        if not rows:
            return 0
        ids = [row[0] for row in rows]
        manager = model._default_manager.using(queryset.db)
        changed = manager.filter(pk__in=ids, status__in=sources).update(**updates)
        # The cause and detail each row now has (kept from before when not given).
        details = {pk: (why, detail) for pk, why, detail
                   in manager.filter(pk__in=ids, status=target)
                   .values_list("pk", "reason", "message")}
        record_transitions(machine, [(pk, exp_id, source, *details[pk])
                                     for pk, exp_id, source in rows if pk in details],
                           target=target, at=now, using=queryset.db)
    return changed


# The most items one batch status call (UpdateExpStatuses, UpdateJobStatuses) may carry
# (docs/limits.md): a call stays one short transaction and one reply well under gRPC's 4 MiB.
MAX_STATUS_BATCH = 1000


def check_batch_size(count: int) -> None:
    """Refuse a batch status call of more than `MAX_STATUS_BATCH` items, before any is read.

    Raises:
        ValidationFailed: keyed `items`, naming the limit.
    """
    if count > MAX_STATUS_BATCH:
        raise ValidationFailed({"items": [f"at most {MAX_STATUS_BATCH} items per call; got "
                                          f"{count}: send them in several calls"]})


def validate_status_batch(statuses: type[StrEnum], changes: list[StatusChange], *,
                          extra_columns: frozenset[str] = frozenset(),
                          machine: StateMachine | None = None) -> None:
    """Check a batch status call's items before any is applied.

    Args:
        statuses: the entity's status enum (`JobStatus`).
        changes: the items.
        extra_columns: the columns an item's `extra` may set (`{"cluster_job_name"}` for a
            job); none by default.
        machine: the entity's table, whose `reported_start` says which statuses take a
            `started_at` (None: none do).

    Raises:
        ValidationFailed: more than `MAX_STATUS_BATCH` items (keyed `items`), a status or
            expected status that is not one of `statuses` (keyed `items.status`,
            `items.expected`), an `extra` column not allowed (keyed `items.extra`), or a
            `started_at` with a status that takes none (keyed `items.started_at`).
    """
    check_batch_size(len(changes))
    known = set(statuses)
    for change in changes:
        for name, value in (("status", change.status), ("expected", change.expected)):
            if value is not None and value not in known:
                raise ValidationFailed({f"items.{name}": [
                    f"{value!r} is not one of {', '.join(statuses)}"]})
        if bad := {column for column, _value in change.extra} - extra_columns:
            raise ValidationFailed({"items.extra": [
                f"cannot set {', '.join(sorted(bad))} with a status; allowed: "
                f"{', '.join(sorted(extra_columns)) or 'none'}"]})
        if change.started_at is not None:
            check_reported_start(machine or StateMachine("", {}, frozenset()), change.status,
                                 change.started_at, key="items.started_at")


@dataclass(frozen=True)
class StatusChange:
    """One item of `apply_transitions`: the arguments of one `apply_transition`.

    Attributes:
        pk: the row's primary key.
        status: the target state.
        reason, message: cause and detail, kept when None (cut as `apply_transition` cuts them).
        expected: the state the caller read; a row found elsewhere is refused with
            `TransitionRace`.
        extra: further columns set with the transition, as `((column, value), ...)`
            (`cluster_job_name`); text is cut to its column.
        started_at: the run's start as its cluster reported it (see `apply_transition`).
    """

    pk: int
    status: str
    reason: str | None = None
    message: str | None = None
    expected: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    started_at: datetime | None = None


@dataclass(frozen=True)
class StatusOutcome:
    """The result of one item of `apply_transitions`.

    Attributes:
        pk: the item's row.
        changed: the transition was applied.
        error: the `FalconError` refusing the item (NotFound, InvalidTransition,
            TransitionRace), None when the item succeeded (changed, or already there).
        status: the row's state after the item ("" when it does not exist).
    """

    pk: int
    changed: bool
    error: Exception | None = None
    status: str = ""


def apply_transitions(machine: StateMachine, model: type[models.Model],
                      changes: list[StatusChange]) -> list[StatusOutcome]:
    """Apply many guarded transitions of `model`'s rows in one transaction; one outcome each.

    Each item is the transition `apply_transition` makes (the same table, the same `expected`
    check, the same cut of reason, message and extra text), decided on its row locked for it.
    The items share one locking read (rows locked by primary key, in ascending order, as a
    single transition locks them: the lock order of `experiments.locks`), and rows moved or
    refreshed with the same values share one `UPDATE ... WHERE pk IN (...)`, so a tick's
    10,000 changes cost a few statements instead of a call each. A refused item is reported in
    its outcome and never fails the others; two items of one row apply in order. Every applied
    item is in the transition history (`record_transitions`), in the same transaction.

    Args:
        machine: the entity's transition table.
        model: the model (`Job`); its default manager and database are used.
        changes: the items; the caller bounds their number (the RPC's batch limit).

    Returns:
        One `StatusOutcome` per item, in order.

    Raises:
        InvalidTransition: an item's target is no state any transition leads to (callers
            validate statuses first, so this is a programming error).
    """
    manager = model._default_manager
    exp_column = experiment_column(model)
    now = timezone.now()
    outcomes: list[StatusOutcome] = []
    counts: dict[int, int] = {}
    for change in changes:
        counts[change.pk] = counts.get(change.pk, 0) + 1
    # Rows moved (or refreshed) with the same values go in one UPDATE ... WHERE pk IN (...):
    # a tick's messages repeat ("2 Running", "ImagePullBackOff"), so 10,000 items make a few
    # statements.
    moves: dict[tuple, list[int]] = {}
    refreshes: dict[tuple, list[int]] = {}
    # The reported starts of the moved rows, clamped (`clamp_start`); set in the moves' UPDATEs.
    starts: dict[int, datetime] = {}
    with transaction.atomic(using=manager.db):
        locked = (manager.select_for_update().filter(pk__in=sorted(counts)).order_by("pk")
                  .values_list("pk", exp_column, "status", "reason", "message", "created_at"))
        status_of = {pk: status for pk, _exp, status, _reason, _message, _c in locked}
        exp_of = {pk: exp for pk, exp, _status, _reason, _message, _c in locked}
        detail_of = {pk: (reason, message) for pk, _exp, _status, reason, message, _c in locked}
        created_of = {pk: created for pk, _exp, _status, _reason, _message, created in locked}
        # The transition history of the applied items, by the state entered (one INSERT each).
        events: dict[str, list[tuple]] = {}
        for change in changes:
            current = status_of.get(change.pk)
            if current is None:
                outcomes.append(StatusOutcome(change.pk, False, NotFound(
                    f"{machine.name} {change.pk} does not exist.")))
                continue
            detail: dict[str, Any] = {}
            if change.reason is not None:
                detail["reason"] = bounded_text(model, "reason", change.reason)
            if change.message is not None:
                detail["message"] = bounded_text(model, "message", change.message)
            for column, value in change.extra:
                detail[column] = bounded_text(model, column, value)
            sources = machine.sources(change.status)
            guard = sources if change.expected is None else sources & {change.expected}
            # A row named twice is written at once, so its items apply in order.
            repeated = counts[change.pk] > 1
            # Keyed by what the values are made of: the values themselves hold expressions
            # (Coalesce for started_at), whose hash is costly.
            key = tuple(sorted(detail.items()))
            if current in guard:
                start = None
                if change.started_at is not None and change.status in machine.reported_start:
                    start = clamp_start(change.started_at, created=created_of[change.pk],
                                        now=now, what=f"{machine.name} {change.pk}")
                if repeated:
                    updates = machine.updates_for(change.status, now)
                    if start is not None:
                        updates[START_COLUMN] = start_update({change.pk: start})
                    manager.filter(pk=change.pk).update(**updates, **detail)
                else:
                    moves.setdefault((change.status, key), []).append(change.pk)
                    if start is not None:
                        starts[change.pk] = start
                reason, message = detail_of[change.pk]
                reason, message = detail.get("reason", reason), detail.get("message", message)
                detail_of[change.pk] = (reason, message)
                event = (change.pk, exp_of[change.pk], current, reason, message)
                if repeated:  # recorded at once, so one row's events keep their order
                    record_transitions(machine, [event], target=change.status, at=now,
                                       using=manager.db)
                else:
                    events.setdefault(change.status, []).append(event)
                status_of[change.pk] = change.status
                outcomes.append(StatusOutcome(change.pk, True, status=change.status))
            elif current == change.status:
                if change.status not in machine.terminal and detail:
                    if repeated:
                        manager.filter(pk=change.pk).update(updated_at=now, **detail)
                    else:
                        refreshes.setdefault(key, []).append(change.pk)
                outcomes.append(StatusOutcome(change.pk, False, status=current))
            else:
                outcomes.append(StatusOutcome(change.pk, False, refusal(
                    machine, change, current, sources), status=current))
        for (target, detail_items), pks in moves.items():
            reported = [pk for pk in pks if pk in starts]
            if not reported:
                manager.filter(pk__in=pks).update(**machine.updates_for(target, now),
                                                  **dict(detail_items))
                continue
            # Each row's own start: the rows with one in CASE-by-pk UPDATEs of
            # `START_CASE_ROWS`, the others together, as without starts.
            if others := [pk for pk in pks if pk not in starts]:
                manager.filter(pk__in=others).update(**machine.updates_for(target, now),
                                                     **dict(detail_items))
            for first in range(0, len(reported), START_CASE_ROWS):
                chunk = reported[first:first + START_CASE_ROWS]
                manager.filter(pk__in=chunk).update(**{
                    **machine.updates_for(target, now), **dict(detail_items),
                    START_COLUMN: start_update({pk: starts[pk] for pk in chunk})})
        for values, pks in refreshes.items():
            manager.filter(pk__in=pks).update(updated_at=now, **dict(values))
        for target, changed in events.items():
            record_transitions(machine, changed, target=target, at=now, using=manager.db)
    return outcomes


def refusal(machine: StateMachine, change: StatusChange, current: str,
            sources: frozenset[str]) -> Exception:
    """The error `apply_transition` raises for `change` on a row found in `current`:
    `TransitionRace` when the caller read another state, else `InvalidTransition`."""
    if change.expected is not None and current != change.expected:
        return TransitionRace(f"{machine.name} {change.pk} is {current}, not "
                              f"{change.expected}: another writer moved it first.")
    why = (" (it is in a terminal state)." if current in machine.terminal
           else f"; {change.status} is reachable only from {', '.join(sorted(sources))}."
           if sources else f"; {change.status} is only the initial state: no transition "
           "leads to it.")
    return InvalidTransition(f"{machine.name} {change.pk} is {current} and cannot move to "
                             f"{change.status}{why}")


def delete_terminal(machine: StateMachine, queryset: models.QuerySet, *, pk: int,
                    hint: str = "") -> None:
    """Delete row `pk` only if it is in a terminal state, in one guarded DELETE.

    The status check is part of the DELETE statement, so it cannot race a status change: a row
    that may still have work in flight (a cluster job, an artifact to decide) is never deleted.

    Args:
        hint: what the caller should do instead, appended to the Conflict message.

    Raises:
        NotFound: no row has this pk.
        Conflict: the row is not terminal (HTTP 409).
    """
    deleted, _ = queryset.filter(pk=pk, status__in=machine.terminal).delete()
    if deleted:
        return
    row = queryset.filter(pk=pk).only("status").first()
    if row is None:
        raise NotFound(f"{machine.name} {pk} does not exist.")
    raise Conflict(f"{machine.name} {pk} is {row.status}; only "
                   f"{', '.join(sorted(machine.terminal))} rows can be deleted." + hint)


def run_lifecycle(name: str, statuses: type[StrEnum], *, terminal: frozenset[str]
                  ) -> StateMachine:
    """Return the table of a run, shared by Experiment and Job (docs/architecture.md).

    `<initial> -> Running -> Succeeded | Failed`; the initial state (the enum's first member,
    Created or Pending) may go straight to Succeeded or Failed, because polling can miss
    Running; any non-terminal state -> Aborting -> Aborted. `started_at` is set the first time
    the row runs, `finished_at` when it ends, `aborting_at` and `aborted_at` on the way out. A
    move to Running, Succeeded or Failed may carry the start the cluster reported
    (`reported_start`), which then becomes `started_at` if none is recorded: a run that went
    straight from its initial state to Succeeded still has a start.

    Args:
        name: the entity's name for messages ("Experiment").
        statuses: its status enum; must have RUNNING, SUCCEEDED, FAILED, ABORTING, ABORTED
            after its initial member.
        terminal: its terminal set from `core.domain.statuses` (Succeeded, Failed, Aborted).

    Raises:
        ValueError: `terminal` is not the set of states this table cannot leave.
    """
    initial = next(iter(statuses))
    running, succeeded, failed = statuses["RUNNING"], statuses["SUCCEEDED"], statuses["FAILED"]
    aborting, aborted = statuses["ABORTING"], statuses["ABORTED"]
    live = frozenset({initial, running})
    if set(terminal) != {succeeded, failed, aborted}:
        raise ValueError(f"{name}: a run's terminal states are Succeeded, Failed and Aborted")
    return StateMachine(
        name=name,
        transitions={
            initial: frozenset(),  # entered on create only
            running: frozenset({initial}),
            succeeded: live,
            failed: live,
            aborting: live,
            aborted: frozenset({aborting}),
        },
        terminal=frozenset(terminal),
        set_on_enter={succeeded: ("finished_at",), failed: ("finished_at",),
                      aborting: ("aborting_at",), aborted: ("aborted_at", "finished_at")},
        set_once_on_enter={running: (START_COLUMN,)},
        reported_start=frozenset({running, succeeded, failed}),
    )
