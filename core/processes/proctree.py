"""Whole process trees for the local runners: adopt, signal and reap every descendant.

Both local runners (the cluster backend's `controllers/cluster_backends/local_runner.py` for a
task's replica, the analyzer's `controllers.analyzer.runner` for an analysis) become a child
subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux 3.4+) before they start their command. A process
the command detaches with `setsid cmd &` or a double fork then leaves the command's process
group but is reparented to the runner instead of init, so it is still below the runner in the
process tree: stopping the runner's descendants stops it too, as a container's processes all
end with the container. A process group alone (killpg) misses such a process, and it would keep
running, and writing, after its task or analysis was cancelled and its slot given away.

Also how a run's end is worded (`describe_exit`): a return code below 0 is a signal, not a code.

Standard library only and no Django: `local_runner.py` imports it and must start in
milliseconds.
"""
from __future__ import annotations

import ctypes
import os
import signal

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants; False when the kernel refused.

    Best effort: without it only the command's process group is stopped.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """Return the pids below `root` in the process tree (read from /proc/<pid>/stat)."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parent_of[int(entry)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, ppid in parent_of.items() if ppid == pid]
        found.extend(children)
        frontier.extend(children)
    return found


def signal_descendants(sig: int, root: int | None = None) -> int:
    """Send `sig` to every process below `root` (default: this process), escaped from its
    process group or not; return how many were signalled."""
    sent = 0
    for pid in descendants(os.getpid() if root is None else root):
        try:
            os.kill(pid, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def reap_orphans() -> None:
    """Collect every exited child (adopted orphans included) so none stays a zombie."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def describe_exit(returncode: int | None) -> str:
    """Word a process's end: "exit code 2", or "terminated by SIGTERM" for a Popen return
    code of -15 (the process was killed by signal 15 and has no exit code of its own)."""
    if returncode is None:
        return "no exit code"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"terminated by {name}"
    return f"exit code {returncode}"
