"""The Artifact state machine: Created -> Succeeded | Failed (seed 000 3.2.1)."""
from core.statemachine import StateMachine

from .models import ArtifactStatus as S

TERMINAL = frozenset({S.SUCCEEDED, S.FAILED})

MACHINE = StateMachine(
    name="Artifact",
    transitions={
        S.CREATED: frozenset(),  # initial: entered on create only
        S.SUCCEEDED: frozenset({S.CREATED}),
        S.FAILED: frozenset({S.CREATED}),
    },
    terminal=TERMINAL,
    set_on_enter={S.SUCCEEDED: ("finished_at",), S.FAILED: ("finished_at",)},
)
