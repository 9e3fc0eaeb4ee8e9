"""The console script's entry point: a help page already drawn is printed from the help cache
(`cli.helpcache`) before click, rich-click and rich are imported; anything else runs
`cli.main.main`."""
from __future__ import annotations

import os
import sys


def main() -> None:
    """Run `falcon` with `sys.argv[1:]`; exits the process with its code."""
    from . import helpcache

    for stream in (sys.stdout, sys.stderr):  # as cli.main.main: escape what cannot be encoded
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):
            pass
    try:
        served = helpcache.serve(sys.argv[1:])
    except BrokenPipeError:  # `falcon --help | head -1`: quiet, the documented 141
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        from .exit_codes import ExitCode

        sys.exit(int(ExitCode.OUTPUT_CLOSED))
    if served:
        sys.exit(0)
    from .main import main as run

    run()
