"""Run one replica of a local cluster job and record how it ended.

Usage: `python local_runner.py <started-file> <exit-file> -- <argv...>`

`LocalBackend` starts this script as the leader of a new session and process group; it runs
the task's command as its child (same group, inherited stdio, environment and cwd), writes
`<started-file>` once the command runs, waits for it and writes its exit code to `<exit-file>`.
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
from pathlib import Path

if not __package__:  # started by path (`python local_runner.py`): the project is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.processes.atomicfiles import write_atomic  # noqa: E402
from core.processes.proctree import become_subreaper, reap_orphans, signal_descendants  # noqa: E402

# Signals that ask the replica to stop; forwarded to the command so that killing only the runner
# (not the whole group) does not leave the command orphaned.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def exit_code_of(returncode: int) -> int:
    """Map a Popen return code to a shell/container exit code: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def main(argv: list[str]) -> int:
    """Run the command after `--`, record start and exit code; return the command's exit code."""
    if len(argv) < 4 or argv[2] != "--":
        print("usage: local_runner.py STARTED_FILE EXIT_FILE -- ARGV...", file=sys.stderr)
        return 2
    started_file, exit_file, command = argv[0], argv[1], argv[3:]
    become_subreaper()
    try:
        child = subprocess.Popen(command)
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
    write_atomic(exit_file, f"{code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
