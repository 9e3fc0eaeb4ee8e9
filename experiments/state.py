"""The Experiment state machine: ONE transition table (seed 000 3.2.1, architecture page).

Created -> Running -> Succeeded | Failed; any non-terminal -> Aborting -> Aborted. Polling can
miss Running, so Created may go straight to Succeeded or Failed.
"""
from core.statemachine import StateMachine

from .models import ExpStatus as S

TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.ABORTED})

MACHINE = StateMachine(
    name="Experiment",
    transitions={
        S.CREATED: frozenset(),  # initial: entered on create only
        S.RUNNING: frozenset({S.CREATED}),
        S.SUCCEEDED: frozenset({S.CREATED, S.RUNNING}),
        S.FAILED: frozenset({S.CREATED, S.RUNNING}),
        S.ABORTING: frozenset({S.CREATED, S.RUNNING}),
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
