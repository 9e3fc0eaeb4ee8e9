"""Commands a test interrupts with SIGINT, as Ctrl-C does."""
from __future__ import annotations

import sys

# A command a non-interactive shell starts in the background (`make test` runs its two passes
# side by side with `&`) inherits SIGINT ignored, and Python then leaves it ignored, so a
# SIGINT would never reach the CLI. The launcher sets a handler, which exec resets to the
# default, and the CLI's Python then turns SIGINT into KeyboardInterrupt as in a terminal.
_LAUNCH = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
           "os.execv(sys.argv[1], sys.argv[1:])")


def interruptible(command: list[str]) -> list[str]:
    """`command` (its first item an absolute path) started so that SIGINT interrupts it."""
    return [sys.executable, "-c", _LAUNCH, *command]
