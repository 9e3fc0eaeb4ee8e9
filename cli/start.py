"""The console script's entry point: a help page already drawn is printed from the help cache
(`cli.helpcache`) before click, rich-click and rich are imported; anything else runs
`cli.main.main`."""
from __future__ import annotations

import io
import os
import sys


class WholeWrites(io.RawIOBase):
    """A raw writer on a file descriptor whose `write` returns only once every byte is written.

    Under `python -u` or `PYTHONUNBUFFERED=1` Python puts sys.stdout's text layer straight on a
    raw `FileIO` and writes each chunk once, ignoring how many bytes the kernel took: into a pipe
    whose reader went away mid-write (`falcon exp list -o json | head -1`), `write` returned
    65536 of 400 KB and the command exited 0 with the rest dropped. Writing the rest here makes
    that second write fail with EPIPE (`BrokenPipeError`), which the root group turns into the
    documented 141. `os.write` already retries a write interrupted by a signal (PEP 475).
    """

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.write(self._fd, view[done:])
        return done


def whole_writes() -> None:
    """Make sys.stdout and sys.stderr write every byte of each write (`WholeWrites`) when
    Python runs unbuffered (their text layer then sits on a raw `FileIO`, which may write part
    of a chunk); buffered streams already write the rest and are left alone."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        raw = getattr(stream, "buffer", None)
        if not isinstance(stream, io.TextIOWrapper) or not isinstance(raw, io.FileIO):
            continue
        try:
            fd = raw.fileno()
        except (OSError, ValueError):
            continue
        setattr(sys, name, io.TextIOWrapper(
            WholeWrites(fd), encoding=stream.encoding, errors=stream.errors,
            line_buffering=stream.line_buffering, write_through=True))


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

    whole_writes()
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
