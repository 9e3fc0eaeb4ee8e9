"""The files of a local run (one folder per cluster job of the local backend) and the copy of
each replica's output into the artifact store.

Shared by the local cluster backend (which writes the folders) and the API server (which reads
logs from them while a run is live, and removes the folder when its experiment is deleted). No
Django imports.

Layout of one run folder (`<state_dir>/<cluster job name>/`)::

    manifest.json         job id, experiment id, role, artifact path, runner pid per replica
    replica-<i>.log       the replica's stdout and stderr, interleaved as written (one file,
                          as a container runtime keeps a container's log)
    replica-<i>.times     when each line of the log was read (`core.processes.logtimes`)
    replica-<i>.copied    written once replica-<i>.log was copied to the artifact store
    replica-<i>.exit      the command's exit code (written by the runner)

A replica's output is copied to `job_log_url(<job's artifact path>, role, i)` when it has ended
(exit file present, or its process is gone), so logs outlive the run folder.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.processes.logtimes import times_name

from .store import job_log_url, store_for

MANIFEST = "manifest.json"
LOCK = ".lock"


def replica_log(folder: Path, index: int) -> Path:
    """Return the log file of replica `index` in a run folder."""
    return folder / f"replica-{index}.log"


def replica_times(folder: Path, index: int) -> Path:
    """Return the times file of replica `index`'s log (`core.processes.logtimes`)."""
    return folder / times_name(f"replica-{index}.log")


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """Return the run folder's manifest, None when there is none (or it cannot be parsed)."""
    try:
        return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextmanager
def state_lock(state_dir: Path) -> Iterator[None]:
    """Hold the state directory's lock (flock on `<state_dir>/.lock`): the local backend's
    submit and delete take it too, so a folder is never removed while a replica starts."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _process_start(pid: int) -> int | None:
    """Start time (clock ticks after boot) of a live process, None when gone or a zombie."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def replica_ended(folder: Path, manifest: dict[str, Any], index: int) -> bool:
    """True when replica `index` will write no more output: its exit file exists, or its runner
    (pid and start time from the manifest) is gone, or it was never started."""
    if (folder / f"replica-{index}.exit").exists():
        return True
    rec = (manifest.get("replicas") or {}).get(str(index))
    if rec is None:
        return manifest.get("deleting_since") is not None
    return _process_start(rec["pid"]) != rec.get("start_time")


def copy_replica_log(folder: Path, manifest: dict[str, Any], index: int) -> bool:
    """Copy the log of replica `index` to the artifact store once, when it has ended.

    Returns True when the copy exists (made now or before), False when the replica still runs
    or the manifest names no artifact path (folders written before logs were copied).

    Raises:
        OSError, google.api_core.exceptions.GoogleAPIError: the store refused the write (the
            caller retries on its next pass; the marker is only written after a full copy).
    """
    marker = folder / f"replica-{index}.copied"
    if marker.exists():
        return True
    artifact_path = manifest.get("artifact_path")
    if not artifact_path or not replica_ended(folder, manifest, index):
        return False
    source = replica_log(folder, index)
    if not source.exists() and not source.is_symlink():
        source.touch()  # a replica that never wrote a byte still has a (empty) log
    url = job_log_url(artifact_path, manifest["role"], index)
    times = replica_times(folder, index)
    if times.is_file() and not times.is_symlink():
        # Before the log: a stored log is complete, and its times (if any) are there with it.
        try:
            store_for(url).put_file(times, times_name(url))
        except FileNotFoundError:
            pass  # replaced by a link or a FIFO meanwhile: the log is kept without its times
    try:
        store_for(url).put_file(source, url)  # opened without following a link
    except FileNotFoundError:
        # The task replaced its log by a link (to /etc/passwd, to the database) or a FIFO:
        # what it points to is never copied; the replica's stored log is empty.
        empty = folder / f".replica-{index}.empty"
        empty.unlink(missing_ok=True)
        empty.touch()
        store_for(url).put_file(empty, url)
        empty.unlink(missing_ok=True)
    marker.write_text(url + "\n", encoding="utf-8")
    return True


def copy_ended_logs(folder: Path, manifest: dict[str, Any]) -> int:
    """Copy the log of every replica of a run folder that has ended; return how many are
    in the store now."""
    return sum(copy_replica_log(folder, manifest, i) for i in range(int(manifest["replica"])))


def remove_run_folder(state_dir: Path, name: str) -> bool:
    """Remove the run folder `name` once every replica has ended, copying their logs first.

    Called when an experiment is deleted: its jobs are terminal, so their replicas have ended
    or are being stopped. Renamed before removal, so the local backend never sees half a folder.

    Returns True when the folder is gone (or never existed), False when a replica still runs
    (the caller may try again later).

    Raises:
        OSError or a store error: a log could not be copied (the folder is kept).
    """
    folder = state_dir / name
    with state_lock(state_dir):
        if not folder.exists():
            return True
        manifest = read_manifest(folder)
        if manifest is not None:
            count = int(manifest.get("replica") or 0)
            if not all(replica_ended(folder, manifest, i) for i in range(count)):
                return False
            copy_ended_logs(folder, manifest)
        trash = state_dir / f".trash-{name}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(folder, trash)
        except FileNotFoundError:
            return True
        shutil.rmtree(trash, ignore_errors=True)
        return True
