"""What an experiment left behind: its replicas' logs, its artifact files, and removing both.

- Logs (`exp_log_chunk`): a replica's output (stdout and stderr interleaved) is read from the
  artifact store once the replica has ended (`artifacts.store.replica_log_url`; the cluster
  backend copies it there), and while it runs on the local backend from the run folder
  (`artifacts.run_files`). Reads are by byte offset, so a client follows a live log by asking
  again from the `next_offset` it got.
- Artifact files (`exp_artifact_page`, `exp_artifact_file`): listed from and read from the
  store under the artifact path, a page at a time.
- Cleanup on DeleteExp (`exp_cleanup_files`): run folders of the local backend always go; with
  `purge`, the stored files, logs and analysis outputs too.
"""
from __future__ import annotations

import dataclasses
import os
import posixpath
from dataclasses import dataclass
from typing import Any


from artifacts.models import Artifact
from artifacts.run_files import replica_log
from artifacts.services import artifact_purge_files, local_state_dir, remove_local_run_folders
from artifacts.store import FilePage, OpenFile, artifact_logs_url, store_for
from core.processes import safefs
from core.processes.logtimes import TimesIndex, rfc3339, times_name
from core.errors import Conflict, NotFound, ValidationFailed
from core.domain.statuses import JOB_TERMINAL
from core.limits.text import utf8_page

from .models import Experiment

MAX_LOG_CHUNK = 1 << 20  # bytes one logs request returns at most
DEFAULT_LOG_CHUNK = 256 * 1024
TAIL_WINDOW_PER_LINE = 4096  # bytes read back per requested tail line, at most MAX_LOG_CHUNK


@dataclass(frozen=True)
class LogChunk:
    """A piece of one replica's log.

    Attributes:
        role, replica: whose log.
        offset: byte offset of `data` in the log.
        next_offset: where the next read starts (`offset + len(data)`).
        data: the bytes read: whole UTF-8 characters (`core.limits.text.utf8_page`), and complete
            lines at the end of a log that may still grow.
        source: `store` (the copy made when the replica ended) or `run` (the live run folder).
        complete: True when the log will not grow: the stored copy, or an ended replica.
        has_times: whether the log has a time per line (`core.processes.logtimes`); None when
            neither timestamps nor `since_ns` were asked for (the times were not read).
    """

    role: str
    replica: int
    offset: int
    next_offset: int
    data: bytes
    source: str
    complete: bool
    has_times: bool | None = None


def replica_count(task_spec: dict[str, Any]) -> int:
    """Return how many replicas a stored TaskSpec asks for: its `replica`, at least 1 (1 when the
    row holds no usable number), for the log pages of each replica."""
    try:
        return max(int(task_spec.get("replica") or 1), 1)
    except (TypeError, ValueError):
        return 1


def _pick_job(exp: Experiment, role: str | None):
    jobs = sorted(exp.jobs.all(), key=lambda j: j.role)
    roles = [j.role for j in jobs]
    if not jobs:
        raise NotFound(f"Experiment {exp.pk} has no jobs, so it has no logs.")
    if role is None or role == "":
        if len(jobs) == 1:
            return jobs[0]
        raise ValidationFailed({"role": [f"experiment {exp.pk} has roles {', '.join(roles)}; "
                                         "choose one with the role parameter (falcon exp logs --role ROLE)."]})
    for job in jobs:
        if job.role == role:
            return job
    # A well-formed role the experiment does not have names a log that does not exist: 404,
    # as an unknown id is (a 400 is for a request malformed whatever the data).
    raise NotFound(f"role: {role!r} is not a role of experiment {exp.pk}; valid roles: "
                   f"{', '.join(roles)}.")


def _whole_lines(data: bytes) -> bytes:
    """Cut `data` after its last newline (a line still being written waits for the next read);
    data without a newline is returned whole so a long line still makes progress."""
    cut = data.rfind(b"\n")
    return data[:cut + 1] if cut >= 0 else data


def exp_log_chunk(*, exp: Experiment, role: str | None = None, replica: int = 0,
                  offset: int = 0, limit: int = DEFAULT_LOG_CHUNK,
                  tail: int | None = None, timestamps: bool = False,
                  since_ns: int | None = None) -> LogChunk:
    """Read part of the log of replica `replica` of role `role`.

    Args:
        exp: the experiment (its jobs are read).
        role: the job's role; may be omitted when the experiment has a single role.
        replica: replica index, 0 to `replica - 1` of the role's TaskSpec.
        offset: first byte to return.
        limit: most bytes to return (1 to `MAX_LOG_CHUNK`).
        tail: return the last `tail` lines instead (from an offset found by reading back at
            most `TAIL_WINDOW_PER_LINE` bytes per line); `offset` is then ignored.
        timestamps: start each line that begins in the chunk with the time it was produced
            (`core.processes.logtimes.rfc3339` and a space, as `kubectl logs --timestamps`);
            `offset` and `next_offset` stay offsets in the log as written. A log kept without
            times gets no prefix (`has_times` False).
        since_ns: only lines produced at or after this time (nanoseconds since the epoch): the
            chunk starts at the first such line when that is after `offset` (and `tail` counts
            among them only).

    Raises:
        ValidationFailed: no role given for an experiment of several roles, a negative
            replica, or offset/limit/tail out of range.
        NotFound: the role or replica does not exist (the message names the field and lists
            the valid values).
        NotFound: no log exists (yet) for this replica: not started, or a Kubernetes replica
            still running (its log reaches the store when it ends).
        Conflict: `since_ns` for a log kept without times (before Falcon recorded them).
    """
    job = _pick_job(exp, role)
    count = replica_count(job.task_spec or {})
    if replica < 0:
        raise ValidationFailed({"replica": [f"must be >= 0; got {replica}."]})
    if offset < 0:
        raise ValidationFailed({"offset": [f"must be >= 0; got {offset}."]})
    if not 1 <= limit <= MAX_LOG_CHUNK:
        raise ValidationFailed({"limit": [f"must be 1 to {MAX_LOG_CHUNK}; got {limit}."]})
    if tail is not None and tail < 0:
        raise ValidationFailed({"tail": [f"must be >= 0; got {tail}."]})

    # The copy is read below the logs folder (`<path>.logs`), component by component with no
    # link followed: a task that plants a link there reads as no log.
    job_path = (job.artifact_path or f"{exp.artifact_path}/{job.role}").rstrip("/")
    exp_path = job_path[:-len(job.role) - 1] if job_path.endswith(f"/{job.role}") else job_path
    logs_root, log_name = artifact_logs_url(exp_path), f"{job.role}/replica-{replica}.log"
    store = store_for(logs_root)
    with safefs.request_errors(field="role", what=f"{log_name!r} of experiment {exp.pk}"):
        size = store.size_in(logs_root, log_name)
    if size is None and replica >= count:
        # (A multi-host slice keeps one log per Pod, `replica * hosts + host`: those indexes
        # are served when stored, beyond the TaskSpec's replica count.)
        raise NotFound(f"replica: role {job.role!r} has {count} replica(s); valid values: 0 "
                       f"to {count - 1}; got {replica}.")
    want_times = timestamps or since_ns is not None
    times_fd = None
    times = None
    if size is not None:
        read = lambda start, n: store.read_in(logs_root, log_name, start, n)  # noqa: E731
        source, complete = "store", True
        if want_times:
            times_size = store.size_in(logs_root, times_name(log_name))
            if times_size is not None:
                times = TimesIndex(lambda start, n: store.read_in(
                    logs_root, times_name(log_name), start, n), times_size)
    else:
        state_dir = local_state_dir(job.cluster_name)
        path = (replica_log(state_dir / job.cluster_job_name, replica)
                if state_dir is not None and job.cluster_job_name else None)
        try:
            # The run folder's log, opened without following a link (a task may replace its
            # log by one) and read from that descriptor.
            with safefs.request_errors(field="role", what=f"{log_name!r} of experiment "
                                                          f"{exp.pk}"):
                log_fd = safefs.open_in(path.parent, path.name) if path is not None else None
        except NotFound:
            log_fd = None
        if log_fd is None:
            where = ("it has not started yet" if job.status not in JOB_TERMINAL else
                     "none was kept")
            if state_dir is None and job.status not in JOB_TERMINAL:
                where = ("on this cluster a replica's log reaches the artifact store when the "
                         "replica ends; until then read it from the cluster (kubectl logs)")
            raise NotFound(f"No log for replica {replica} of role {job.role!r} of experiment "
                           f"{exp.pk}: {where}.")
        size = os.fstat(log_fd).st_size
        read = lambda start, n: safefs.read_at(log_fd, start, n)  # noqa: E731

        source, complete = "run", job.status in JOB_TERMINAL
        if want_times:
            try:
                times_fd = safefs.open_in(path.parent, times_name(path.name))
            except (OSError, safefs.UnsafeName):
                times_fd = None  # a run started before times were recorded
            if times_fd is not None:
                times = TimesIndex(lambda start, n: safefs.read_at(times_fd, start, n),
                                   os.fstat(times_fd).st_size)

    try:
        if since_ns is not None and times is None:
            raise Conflict(f"since_seconds: the log of replica {replica} of role {job.role!r} "
                           f"of experiment {exp.pk} was kept without line times (before "
                           "Falcon recorded them), so it cannot be cut by time; ask without "
                           "since_seconds (falcon exp logs without --since).")
        with safefs.request_errors(field="role", what=f"{log_name!r} of experiment {exp.pk}"):
            chunk = _chunk(job, replica, offset, limit, tail, size, read, source, complete,
                           since=None if since_ns is None else times.first_line_since(
                               since_ns, size))
            if not want_times:
                return chunk
            data = _stamped(chunk.data, chunk.offset, read, times) if timestamps else chunk.data
            return dataclasses.replace(chunk, data=data, has_times=times is not None)
    finally:
        if source == "run":
            os.close(log_fd)
        if times_fd is not None:
            os.close(times_fd)


def _stamped(data: bytes, offset: int, read, times: TimesIndex | None) -> bytes:
    """`data` (from `offset` of the log) with each line that starts in it preceded by its time
    and a space; a line whose time is unknown by `-` and a space; no prefix at all when the
    log has no times."""
    if times is None or not data:
        return data
    out = []
    start = 0
    at_line_start = offset == 0 or read(offset - 1, 1) == b"\n"
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        if at_line_start:
            ns = times.time_of(offset + start)
            out.append(b"- " if ns is None else rfc3339(ns).encode() + b" ")
        out.append(data[start:end])
        at_line_start, start = True, end
    return b"".join(out)


def _lines(data: bytes) -> list[bytes]:
    """Split `data` after each `\n`, the one line end: a `\r` (a progress bar redrawn in
    place), `\x0b`, `\x0c`, U+2028 and the others `bytes.splitlines` also breaks at are part
    of the line, as a terminal and `tail -n` see it. A last line without `\n` is a line."""
    parts = data.split(b"\n")
    return [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _chunk(job, replica, offset, limit, tail, size, read, source, complete, *,
           since: int | None = None) -> LogChunk:
    """Read the chunk; `since`: the offset of the first line to give (a line start), or None."""
    if tail is not None:
        window = min(size, MAX_LOG_CHUNK, max(tail, 1) * TAIL_WINDOW_PER_LINE)
        start = size - window
        # One byte more before the window: the first line read is either cut by the window or
        # that byte's `\n` alone, dropped either way (a line starting the window is kept).
        data = read(start - 1, window + 1) if start > 0 else read(0, window) if window else b""
        lines = _lines(data)[1:] if start > 0 else _lines(data)
        if since is not None:  # only the lines from `since` on count
            first = size - sum(len(line) for line in lines)
            while lines and first < since:
                first += len(lines.pop(0))
        keep = lines[-tail:] if tail else []
        data = b"".join(keep)
        return LogChunk(job.role, replica, size - len(data), size, data, source, complete)
    if since is not None:
        offset = max(offset, since)
    if offset >= size:
        return LogChunk(job.role, replica, offset, offset, b"", source, complete)
    # Pages start and end on UTF-8 character boundaries (`core.limits.text.utf8_page`, the rule of
    # the analysis log too); a page starting inside a character says where it starts.
    offset, data = utf8_page(read, offset, limit, growing=not complete)
    if not complete and offset + len(data) >= size:
        data = _whole_lines(data)
    return LogChunk(job.role, replica, offset, offset + len(data), data, source, complete)


def _artifact_of(exp: Experiment) -> Artifact:
    artifact = Artifact.objects.filter(experiment_id=exp.pk).first()
    if artifact is None:
        raise NotFound(f"Experiment {exp.pk} has no artifact.")
    return artifact


def exp_artifact_page(*, exp: Experiment, after: str | None, limit: int) -> tuple[Artifact,
                                                                                   FilePage]:
    """One page of the files under the experiment's artifact path, sorted by name.

    Raises:
        NotFound: the experiment has no artifact.
        ValidationFailed: `limit` is not 1 to 1000.
    """
    if not 1 <= limit <= 1000:
        raise ValidationFailed({"page_size": [f"must be 1 to 1000; got {limit}."]})
    artifact = _artifact_of(exp)
    with safefs.request_errors(field="after", what=f"under the artifact path of experiment "
                                                   f"{exp.pk}"):
        return artifact, store_for(artifact.path).list_page(artifact.path, after=after or None,
                                                             limit=limit)


def exp_artifact_file(*, exp: Experiment, name: str) -> OpenFile:
    """Open the file `name` under the experiment's artifact path; the caller closes it.

    The local store opens every component of `name` below the artifact folder without
    following a link and reads from that descriptor: a link (to `/etc/passwd`, to the
    database, to `/`, in any component), a FIFO or a device is no file (404), as is a folder
    swapped for a link after it was listed.

    Raises:
        ValidationFailed: `name` is empty, absolute, leaves the artifact path ('..') or is
            longer than any file's (255 bytes a component: `core.processes.safefs.request_errors`).
        NotFound: no artifact, no such regular file, or one the server may not read.
    """
    norm = posixpath.normpath(name) if name else ""
    if not name or name.startswith("/") or norm.startswith("..") or norm in (".", "") \
            or "\x00" in name or norm != name:
        raise ValidationFailed({"name": [f"must be a file's relative path as `falcon exp "
                                         f"artifacts` lists it, e.g. main/trace.json; got "
                                         f"{name[:200]!r}."]})
    artifact = _artifact_of(exp)
    with safefs.request_errors(field="name", what=f"{name[:200]!r} under the artifact path of "
                                                  f"experiment {exp.pk}"):
        opened = store_for(artifact.path).open_in(artifact.path, name)
    if opened is None:
        raise NotFound(f"No file {name!r} under the artifact path of experiment {exp.pk}.")
    return opened


def exp_cleanup_files(*, exp: Experiment, purge: bool) -> list[str]:
    """Remove what a deleted experiment leaves outside the database, before its rows go.

    Always: the run folders of its jobs on local clusters (their logs are copied to the store
    first). With `purge`: also the stored artifact files, every replica log and every
    analysis output (results and `output.log`: `exp_analysis_output_urls`), so nothing stored
    for the experiment is left.

    Returns what could not be removed yet (a sentence each; a run folder whose replica is still
    being stopped), which the caller reports; store errors propagate so that a purge that failed
    leaves the experiment to try again.

    Raises:
        ValueError, OSError, google.api_core.exceptions.GoogleAPIError: the store refused.
    """
    left = remove_local_run_folders(exp_id=exp.pk)
    if purge:
        artifact = Artifact.objects.filter(experiment_id=exp.pk).first()
        if artifact is not None:
            artifact_purge_files(artifact=artifact)
        for url in exp_analysis_output_urls(exp=exp):
            store_for(url).delete_tree(url)
    return left


def exp_analysis_output_urls(*, exp: Experiment) -> list[str]:
    """The folders holding an experiment's analysis outputs: `{root}/analysis/{exp_id}/`.

    The analyzer writes each analysis' results and `output.log` under
    `{root}/analysis/{exp_id}/{analysis_id}/` (docs/analyzer.md, "Storage layout"). The
    folder is taken under `FALCON_ANALYSIS_ROOT` and under the root of every analysis record
    of the experiment (a controller configured with another root wrote there), so a purge
    removes the outputs of analyses deleted earlier without purge too: their records are
    gone, their files are still in the experiment's folder.

    The records are read through the experiment's reverse relation (`exp.analyses`):
    experiments sit below analysis in the layers and do not import it.
    """
    from django.conf import settings

    tail = f"/analysis/{exp.pk}/"
    urls = {settings.FALCON_ANALYSIS_ROOT.rstrip("/") + tail}
    for result_path in exp.analyses.values_list("result_path", flat=True):
        folder = result_path.rstrip("/").rsplit("/", 1)[0] + "/"
        if folder.endswith(tail):  # anything else is not this layout: never deleted
            urls.add(folder)
    return sorted(urls)


def exp_delete_with_files(*, exp_id: int, actor, purge: bool = False) -> list[str]:
    """DeleteExp with its files: check that `actor` may delete the experiment and that it is
    terminal, remove its local run folders (and with `purge` its stored artifact files and
    logs: `exp_cleanup_files`), then delete the rows (`services.exp_delete`, which checks
    again under its lock).

    The files go first: a store error leaves the experiment in place, so the same delete can be
    repeated; a row deleted first would leave files nobody can find.

    Returns what `exp_cleanup_files` could not remove yet.

    Raises:
        NotFound, PermissionDenied, Conflict: as `services.exp_delete`.
        ValueError, OSError, google.api_core.exceptions.GoogleAPIError: the store refused.
    """
    from . import selectors, services

    exp = selectors.exp_get(exp_id=exp_id)
    # Checked before the files go, with the service's own rules and words.
    services.exp_require_may_change(exp=exp, actor=actor, verb="delete")
    refusal = services.exp_delete_refusal(exp=exp)
    if refusal is not None:
        raise refusal
    left = exp_cleanup_files(exp=exp, purge=purge)
    services.exp_delete(exp_id=exp_id, actor=actor)
    return left
