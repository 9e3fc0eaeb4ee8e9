"""Riding out a server restart while the CLI follows something (`--wait`, `logs --follow`).

A server restarting (runlocal, a rolling deploy) is not the end of what is followed: the CLI
keeps polling while the server answers UNAVAILABLE, for `UNAVAILABLE_GRACE` seconds in a row.
"""
from __future__ import annotations

from collections.abc import Callable

from .errors import CLIError
from .exit_codes import ExitCode

UNAVAILABLE_GRACE = 60.0  # seconds of UNAVAILABLE in a row before a follow gives up


class OutageGrace:
    """How long the server has been unavailable, on the CLI's monotonic clock.

    Use: `grace.answered()` after each answer; on a `CLIError`, `if not grace.tolerates(exc):
    raise`.
    """

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.down_since: float | None = None

    def answered(self) -> None:
        """The server answered: an outage, if any, is over."""
        self.down_since = None

    def tolerates(self, exc: CLIError) -> bool:
        """Whether to keep polling after `exc`: UNAVAILABLE, for at most `UNAVAILABLE_GRACE`
        seconds since the first of a run of them."""
        if exc.code != ExitCode.UNAVAILABLE:
            return False
        now = self.clock()
        if self.down_since is None:
            self.down_since = now
        return now - self.down_since <= UNAVAILABLE_GRACE
