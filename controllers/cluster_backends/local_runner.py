"""Run one replica of a local cluster job and record how it ended.

Usage: `python local_runner.py <started-file> <exit-file> [<times-file>] -- <argv...>`

`LocalBackend` starts this script as the leader of a new session and process group; it runs
the task's command as its child (same group, inherited stdio, environment and cwd), writes
`<started-file>` once the command runs, waits for it and writes its exit code to `<exit-file>`.
With a `<times-file>` the command's stdout and stderr go to one pipe instead, which the
runner copies to its own stdout (the log file) as a container runtime copies a container's
output, recording when each line was read (`core.processes.logtimes`; `falcon exp logs
--timestamps`); the exit file is written once the copy has reached the end of the output.
Both writes are atomic (temp file, fsync, rename), so a resource manager that restarts at any
moment reads either nothing or a whole value. The runner exists because a restarted resource
manager is no longer the parent of the command and could not learn its exit status otherwise.

The runner is also a child subreaper (`core.processes.proctree`, shared with the analyzer's runner): a
process the command detaches with `setsid cmd &` or a double fork is reparented to the runner
instead of init, so it is still found and stopped when the replica ends or is stopped, as a
container's processes all end with the container.

Standard library only (and `core.processes.proctree` and `core.processes.atomicfiles`, themselves standard library
only) and no Django: it starts in milliseconds and does not depend on settings.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

if not __package__:  # started by path (`python local_runner.py`): the project is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.processes.atomicfiles import write_atomic  # noqa: E402
from core.processes.logtimes import TimesWriter  # noqa: E402
from core.processes.proctree import become_subreaper, reap_orphans, signal_descendants  # noqa: E402

# Signals that ask the replica to stop; forwarded to the command so that killing only the runner
# (not the whole group) does not leave the command orphaned.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def exit_code_of(returncode: int) -> int:
    """Map a Popen return code to a shell/container exit code: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


COPY_CHUNK = 64 * 1024
COPY_DRAIN_SECONDS = 30.0


def copy_output(source: int, times_fd: int) -> None:
    """Copy the command's output pipe to stdout (the log, opened for appending) until every
    writer has closed it, recording each line's time in `times_fd` (then closing both)."""
    log_fd = sys.stdout.fileno()
    try:
        writer = TimesWriter(times_fd, os.fstat(log_fd).st_size)
        while True:
            data = os.read(source, COPY_CHUNK)
            if not data:
                return
            writer.feed(data, time.time_ns())  # recorded before the bytes reach the log
            view = memoryview(data)
            while view:
                view = view[os.write(log_fd, view):]
    finally:
        os.close(times_fd)
        os.close(source)


def main(argv: list[str]) -> int:
    """Run the command after `--`, record start and exit code; return the command's exit code."""
    times_file = None
    if len(argv) >= 5 and argv[3] == "--":
        times_file, argv = argv[2], argv[:2] + argv[3:]
    if len(argv) < 4 or argv[2] != "--":
        print("usage: local_runner.py STARTED_FILE EXIT_FILE [TIMES_FILE] -- ARGV...",
              file=sys.stderr)
        return 2
    started_file, exit_file, command = argv[0], argv[1], argv[3:]
    become_subreaper()
    copier = times_fd = None
    if times_file is not None:
        try:
            # Opened before the command starts, so it cannot put a link in its place first.
            times_fd = os.open(times_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                               | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:  # the log is still written, without times
            print(f"falcon local runner: no line times ({exc})", file=sys.stderr)
    try:
        if times_fd is None:
            child = subprocess.Popen(command)
        else:
            read_end, write_end = os.pipe()
            try:
                child = subprocess.Popen(command, stdout=write_end, stderr=write_end)
            except OSError:
                os.close(read_end)
                os.close(times_fd)
                raise
            finally:
                os.close(write_end)
            copier = threading.Thread(target=copy_output, args=(read_end, times_fd),
                                      daemon=True)
            copier.start()
    except OSError as exc:
        # The command could not even start (e.g. no `sh`): that is the replica's failure, and
        # 127 is what a shell reports for a command it cannot run.
        print(f"falcon local runner: cannot start {command!r}: {exc}", file=sys.stderr)
        write_atomic(exit_file, "127\n")
        return 127

    def forward(signum, _frame):
        # The command and everything it started, including processes that left the group.
        signal_descendants(signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    write_atomic(started_file, f"{child.pid}\n")
    code = exit_code_of(child.wait())
    # The replica is over when its command is: what it left running (a detached helper) is
    # stopped now, as a container's processes end with it.
    signal_descendants(signal.SIGKILL)
    reap_orphans()
    if copier is not None:
        # Every writer of the pipe is gone, so the copy reaches the end; the bound only keeps
        # an output descriptor smuggled out of the replica from holding its end back forever.
        copier.join(timeout=COPY_DRAIN_SECONDS)
    write_atomic(exit_file, f"{code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
