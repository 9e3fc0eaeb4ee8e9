"""The console script's entry point: a help page already drawn is printed from the help cache
(`cli.helpcache`) before click, rich-click and rich are imported; anything else runs
`cli.main.main`."""
from __future__ import annotations

import os
import sys


def escape_unencodable() -> None:
    """Make stdout and stderr write a character their encoding cannot hold as a backslash
    escape (`PYTHONIOENCODING=latin-1`, `LC_ALL=C`) instead of failing the command."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):  # a replaced, detached or missing stream
            pass


def silence_closed_streams() -> None:
    """Point the process's stdout and stderr at /dev/null, so that nothing else fails on them.

    Python flushes stdout at exit; on a closed pipe that flush fails again and prints "Exception
    ignored ... BrokenPipeError" (https://docs.python.org/3/library/signal.html#note-on-sigpipe).
    Streams without a file descriptor (a test's capture) are left alone.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)


def main() -> None:
    """Run `falcon` with `sys.argv[1:]`; exits the process with its code."""
    from . import helpcache

    escape_unencodable()
    try:
        served = helpcache.serve(sys.argv[1:])
    except BrokenPipeError:  # `falcon --help | head -1`: quiet, the documented 141
        silence_closed_streams()
        from .exit_codes import ExitCode

        sys.exit(int(ExitCode.OUTPUT_CLOSED))
    if served:
        sys.exit(0)
    from .main import main as run

    run()
