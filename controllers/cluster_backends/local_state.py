"""What the local cluster's folders and process table say about a cluster job (no writes).

Reads `/proc/<pid>/stat` (Linux), the replicas' `.started` and `.exit` files and log tails, and
maps them to a `ClusterJobState`: the pure half of `local.py`'s `observe`, kept apart so the
backend file holds the process plumbing only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from artifacts.run_files import replica_log
from controllers.cluster_backends.base import (
    STDERR_TAIL_BYTES,
    STDERR_TAIL_LINES,
    ClusterJobState,
    ClusterJobStatus,
)
from core.processes import safefs


@dataclass(frozen=True)
class Proc:
    """One line of the process table: what /proc/<pid>/stat says about a process."""

    pid: int
    state: str  # R, S, D, Z (zombie), X (dead), ...
    pgrp: int
    start_time: int  # clock ticks after boot (field 22): with the pid, identifies the process

    @property
    def live(self) -> bool:
        return self.state not in ("Z", "X")


def read_stat(pid: int) -> Proc | None:
    """Return the /proc entry of `pid`, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces and ')'.
    fields = data[data.rfind(b")") + 2:].split()
    return Proc(pid=pid, state=fields[0].decode(), pgrp=int(fields[2]),
                 start_time=int(fields[19]))


def process_table() -> dict[int, Proc]:
    """Read every process once: the local equivalent of one list call to the cluster API."""
    table: dict[int, Proc] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            proc = read_stat(int(entry))
            if proc is not None:
                table[proc.pid] = proc
    return table


def runner_alive(table: dict[int, Proc], rec: dict[str, Any]) -> bool:
    """Return True when the runner recorded in `rec` still runs (same pid AND start time)."""
    proc = table.get(rec["pid"])
    return proc is not None and proc.live and proc.start_time == rec["start_time"]


def group_alive(table: dict[int, Proc], rec: dict[str, Any]) -> bool:
    """Return True when any process of the replica's process group is still alive.

    The runner is the group leader, so the group id is the runner's pid. The kernel never
    reuses a pid while a group of that id has members; so if a process holds that pid with a
    different start time, our group has ended and the id now belongs to someone else.
    """
    pgid = rec["pid"]
    leader = table.get(pgid)
    if leader is not None and leader.start_time != rec["start_time"]:
        return False
    return any(p.pgrp == pgid and p.live for p in table.values())


def output_tail(folder: Path, index: int) -> str:
    """Return the tail of replica `index`'s output (`stderr_tail` of its log; folders written
    before stdout and stderr shared one log have `replica-<i>.stderr`)."""
    path = replica_log(folder, index)
    if not path.exists():
        path = folder / f"replica-{index}.stderr"
    return stderr_tail(path)


def stderr_tail(path: Path) -> str:
    """Return the last `STDERR_TAIL_LINES` lines within the last `STDERR_TAIL_BYTES` of a log."""
    try:
        # Not following a link: the task may have replaced its log by a link to a secret,
        # whose tail would become the job's status message.
        with os.fdopen(safefs.open_regular(path), "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - STDERR_TAIL_BYTES))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    if size > STDERR_TAIL_BYTES and "\n" in text:
        text = text.split("\n", 1)[1]  # the first line was cut mid-way
    return "\n".join(text.rstrip("\n").splitlines()[-STDERR_TAIL_LINES:])


def mtime(path: Path) -> float | None:
    """Return the mtime of `path` in seconds since the epoch, None when it does not exist."""
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


@dataclass
class ReplicaScan:
    """Where each replica of a local cluster job stands, by replica index.

    Attributes:
        exited: index -> (exit code, mtime of its exit file in seconds since the epoch; 0.0
            when the file vanished meanwhile).
        running: replicas whose runner is alive and whose command has started.
        waiting: replicas not spawned yet, or whose runner has not started the command.
        lost: replicas whose runner is gone without an exit file.
        started: index -> when its command started (the mtime of `replica-<i>.started`, in
            seconds since the epoch), for every replica whose runner wrote it.
    """

    exited: dict[int, tuple[int, float]] = field(default_factory=dict)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    started: dict[int, float] = field(default_factory=dict)

    def first_start(self) -> datetime | None:
        """Return when the first replica's command started (aware UTC), None before any did.

        The job's start as Kubernetes' `status.startTime` is a Job's: the first replica's, not
        the last one's (CB-25).
        """
        if not self.started:
            return None
        return datetime.fromtimestamp(min(self.started.values()), tz=timezone.utc)

    def first_failure(self) -> tuple[int, int] | None:
        """Return `(index, exit code)` of the replica that exited non-zero first, or None."""
        failures = sorted((when, i, code) for i, (code, when) in self.exited.items()
                          if code != 0)
        return (failures[0][1], failures[0][2]) if failures else None


def scan_replicas(folder: Path, manifest: dict[str, Any],
                   table: dict[int, Proc]) -> ReplicaScan:
    """Sort the replicas of one local cluster job by their exit files and processes.

    Args:
        folder: the job's state folder (`replica-<i>.exit`, `replica-<i>.started`).
        manifest: the job's manifest (`replica` count, `replicas` runner records by index).
        table: the process table read before the exit files (`process_table`).
    """
    scan = ReplicaScan()
    for index in range(manifest["replica"]):
        exit_file = folder / f"replica-{index}.exit"
        code = read_int(exit_file)
        rec = manifest["replicas"].get(str(index))
        started = mtime(folder / f"replica-{index}.started") if rec is not None else None
        if started is not None:
            scan.started[index] = started
        if code is not None:
            try:
                scan.exited[index] = (code, exit_file.stat().st_mtime)
            except FileNotFoundError:
                scan.exited[index] = (code, 0.0)
        elif rec is None:
            scan.waiting.append(index)
        elif runner_alive(table, rec):
            (scan.running if started is not None else scan.waiting).append(index)
        else:
            # The process table was read before the exit file: a runner already gone then
            # had written its exit file (if it ever would) before we looked for it.
            scan.lost.append(index)
    return scan


def failed_state(folder: Path, name: str, count: int,
                  scan: ReplicaScan) -> ClusterJobState | None:
    """Return Failed when a replica exited non-zero or was lost, else None.

    The first replica to fail explains the job (later failures are often its echo); a lost
    replica fails the job with no exit code. The message ends with the tail of the replica's
    output (stdout and stderr share one log, as Kubernetes' `FallbackToLogsOnError` termination
    message reads the container's log).

    Args:
        folder: the job's state folder (`replica-<i>.log`).
        name: the cluster job's name.
        count: the number of replicas.
        scan: the replicas' states (`scan_replicas`).
    """
    failure = scan.first_failure()
    if failure is not None:
        index, code = failure
        tail = output_tail(folder, index)
        return ClusterJobState(
            name=name, status=ClusterJobStatus.FAILED, reason="ReplicaFailed",
            exit_code=code,
            message=f"Replica {index} of {count} exited with code {code}."
                    + (f" Last lines of its output:\n{tail}" if tail else ""))
    if scan.lost:
        index = scan.lost[0]
        tail = output_tail(folder, index)
        return ClusterJobState(
            name=name, status=ClusterJobStatus.FAILED, reason="ReplicaLost",
            message=f"Replica {index} of {count} stopped without recording an exit code "
                    "(killed, or the machine restarted)."
                    + (f" Last lines of its output:\n{tail}" if tail else ""))
    return None


def progress_state(name: str, count: int, scan: ReplicaScan, note: str) -> ClusterJobState:
    """Return Succeeded, Running or Pending for a job none of whose replicas failed.

    Args:
        name: the cluster job's name.
        count: the number of replicas.
        scan: the replicas' states (`scan_replicas`), none failed or lost.
        note: the manifest's note (fields the backend ignored), appended to the message.
    """
    def sentence(text: str) -> str:
        """Append the note to `text`, when there is one."""
        return " ".join(p for p in (text, note) if p)

    if len(scan.exited) == count:
        return ClusterJobState(name=name, status=ClusterJobStatus.SUCCEEDED, reason="Completed",
                               exit_code=0, message=sentence("The replica exited 0." if count == 1
                                                else f"All {count} replicas exited 0."))
    if not scan.waiting:
        # Every replica has started; those already done exited 0 (all running, not any).
        return ClusterJobState(
            name=name, status=ClusterJobStatus.RUNNING, reason="",
            message=sentence(f"{len(scan.running)} of {count} replicas running, "
                             f"{len(scan.exited)} succeeded."))
    return ClusterJobState(
        name=name, status=ClusterJobStatus.PENDING, reason="ReplicasStarting",
        message=sentence(f"{len(scan.running)} of {count} replicas running; waiting for "
                         f"replica(s) {', '.join(map(str, scan.waiting))} to start."))

