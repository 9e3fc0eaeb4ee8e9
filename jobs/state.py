"""The Job state machine: ONE transition table (seed 000 3.2.1, architecture page).

Pending -> Running (all tasks running) -> Succeeded (all tasks succeeded) | Failed (any task
failed); Pending may go straight to Succeeded or Failed (polling can miss Running); any
non-terminal -> Aborting -> Aborted.
"""
from core.statemachine import StateMachine

from .models import JobStatus as S

TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.ABORTED})
NON_TERMINAL = frozenset(set(S) - TERMINAL)

MACHINE = StateMachine(
    name="Job",
    transitions={
        S.PENDING: frozenset(),  # initial: entered on create only
        S.RUNNING: frozenset({S.PENDING}),
        S.SUCCEEDED: frozenset({S.PENDING, S.RUNNING}),
        S.FAILED: frozenset({S.PENDING, S.RUNNING}),
        S.ABORTING: frozenset({S.PENDING, S.RUNNING}),
        S.ABORTED: frozenset({S.ABORTING}),
    },
    terminal=TERMINAL,
    set_on_enter={
        S.SUCCEEDED: ("finished_at",),
        S.FAILED: ("finished_at",),
        S.ABORTING: ("aborting_at",),
        S.ABORTED: ("aborted_at", "finished_at"),
    },
    set_once_on_enter={S.RUNNING: ("started_at",)},
)
