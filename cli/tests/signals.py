"""Commands a test interrupts with SIGINT, as Ctrl-C does."""
from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading

# A command a non-interactive shell starts in the background (`make test` runs its two passes
# side by side with `&`) inherits SIGINT ignored, and Python then leaves it ignored, so a
# SIGINT would never reach the CLI. The launcher sets a handler, which exec resets to the
# default, and the CLI's Python then turns SIGINT into KeyboardInterrupt as in a terminal.
_LAUNCH = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
           "os.execv(sys.argv[1], sys.argv[1:])")


def interruptible(command: list[str]) -> list[str]:
    """`command` (its first item an absolute path) started so that SIGINT interrupts it."""
    return [sys.executable, "-c", _LAUNCH, *command]


@contextlib.contextmanager
def watching(command: list[str], **popen):
    """Run `command` (interruptible) with its stdout read line by line in a thread; yield
    `(process, lines)`, `lines` growing as the command prints. On leaving, the command gets
    SIGINT (as Ctrl-C) and is waited for, and the reader has read everything it printed."""
    process = subprocess.Popen(interruptible(command), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, encoding="utf-8", **popen)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        yield process, lines
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        reader.join(timeout=60)
