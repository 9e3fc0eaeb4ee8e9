"""Keep the output of a Kubernetes job's Pods in the artifact store, so logs outlive the Pods.

The resource manager calls `keep_logs` once when it sees a job's Job finished (Succeeded or
Failed) and before it deletes the Job of an aborted job. Each Pod's log (the task container's
stdout and stderr, `GET /api/v1/namespaces/{ns}/pods/{name}/log`) is streamed to a temporary
file and stored at `artifacts.store.job_log_url(<job path>, role, <completion index>)` (asked with
`timestamps=true`: the time the container runtime gives each line is kept beside it, in
`replica-<i>.times`, `core.processes.logtimes`, and the log itself stays as written): a Pod's
completion index is its replica index when a replica is one Pod, and `replica * hosts + host`
on a multi-host slice. The API server then serves finished runs' logs from the store and needs
no cluster credentials for them.

A backend of another kind is left alone (the local backend copies its own logs, see
`local.py`). A failed copy raises `BackendError` (the resource manager retries the job next
tick) up to `MAX_ATTEMPTS` times per job; after that the job goes on without its logs, with a
warning, so a store outage never holds a job's status back for good.
"""
from __future__ import annotations

import logging
import os
import tempfile
from datetime import datetime, timezone

from artifacts.store import job_log_url, store_for
from controllers.contract import JobView
from core.processes.logtimes import TimesWriter, times_name

from .base import BackendError, ClusterBackend

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
CHUNK_BYTES = 64 * 1024
_EPOCH = datetime.min.replace(tzinfo=timezone.utc)
# Per process: jobs whose logs are kept (or given up on), and failed attempts per job.
_kept: set[tuple[str, int]] = set()
_failures: dict[tuple[str, int], int] = {}


def _has_output(pod) -> bool:
    """True when the Pod's task container has started (a Pod never scheduled has no log)."""
    for status in (pod.status.container_statuses or []) if pod.status else []:
        state = status.state
        if state is not None and (state.running is not None or state.terminated is not None):
            return True
    return False


def _index(pod) -> int | None:
    labels = pod.metadata.labels or {}
    annotations = pod.metadata.annotations or {}
    raw = (labels.get("batch.kubernetes.io/job-completion-index")
           or annotations.get("batch.kubernetes.io/job-completion-index"))
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def copy_pod_logs(backend, job: JobView) -> int:
    """Copy the log of every started Pod of `job`'s Job to the store; return how many.

    Pods are taken oldest first, so when an index ran twice (a retried Pod) the newest log
    is the one kept.

    Args:
        backend: a `KubernetesBackend` (its client, caller, namespace and container name).
        job: the Falcon job.

    Raises:
        kubernetes.client.ApiException, urllib3 errors, store errors: a call failed.
    """
    from .kubernetes import CONTAINER, POD_JOB_NAME_LABEL

    name = backend.name_of(job)
    ns = backend.config.namespace
    pods = backend.caller.call(backend.core.list_namespaced_pod, ns,
                               label_selector=f"{POD_JOB_NAME_LABEL}={name}").items or []
    pods = sorted(pods, key=lambda p: p.metadata.creation_timestamp or _EPOCH)
    copied = 0
    for pod in pods:
        index = _index(pod)
        if index is None or not _has_output(pod):
            continue
        url = job_log_url(job.artifact_path, job.role, index)
        response = backend.caller.call(backend.core.read_namespaced_pod_log, pod.metadata.name,
                                       ns, container=CONTAINER, timestamps=True,
                                       _preload_content=False)
        fd, tmp = tempfile.mkstemp(prefix="falcon-pod-log-")
        times_fd, times_tmp = tempfile.mkstemp(prefix="falcon-pod-log-times-")
        try:
            with os.fdopen(fd, "wb") as fh:
                split_timestamps(response.stream(CHUNK_BYTES), fh, TimesWriter(times_fd))
            # The times first: a stored log is complete, and its times are there with it.
            store_for(url).put_file(times_tmp, times_name(url))
            store_for(url).put_file(tmp, url)
        finally:
            response.release_conn()
            os.close(times_fd)
            os.unlink(tmp)
            os.unlink(times_tmp)
        copied += 1
    return copied


def _line_time(stamp: bytes) -> int | None:
    """Nanoseconds since the epoch of the kubelet's RFC 3339 time (`2026-01-01T00:00:00.5Z`,
    any offset, 0 to 9 fraction digits), None when it is not one."""
    from datetime import datetime

    try:
        text = stamp.decode("ascii")
        head, _, fraction = text.partition(".")
        zone = ""
        if fraction:
            digits = len(fraction) - len(fraction.lstrip("0123456789"))
            fraction, zone = fraction[:digits], fraction[digits:]
        else:
            head, zone = head[:19], head[19:]
        if not fraction.isdigit() and fraction:
            return None
        moment = datetime.fromisoformat(head + (zone.replace("Z", "+00:00") or "+00:00"))
        return int(moment.timestamp()) * 1_000_000_000 + int((fraction or "0").ljust(9, "0")[:9])
    except (UnicodeDecodeError, ValueError):
        return None


def split_timestamps(chunks, out, times: TimesWriter) -> None:
    """Write the Pod log API's `timestamps=true` text to `out` without the times, recording
    each line's time in `times` (`core.processes.logtimes`). A line whose prefix is not a time
    is written whole, with no time of its own."""
    pending = b""

    def line(raw: bytes) -> None:
        stamp, space, rest = raw.partition(b" ")
        ns = _line_time(stamp) if space else None
        if ns is None:
            rest = raw
            times.skip(rest)
        else:
            times.feed(rest, ns)
        out.write(rest)

    for data in chunks:
        pending += data
        lines = pending.split(b"\n")
        pending = lines.pop()
        for raw in lines:
            line(raw + b"\n")
    if pending:
        line(pending)


def keep_logs(backend: ClusterBackend, job: JobView) -> None:
    """Copy the Pods' logs of `job` to the store once (a no-op for non-Kubernetes backends).

    Raises:
        BackendError: the copy failed and fewer than `MAX_ATTEMPTS` attempts were made for this
            job; the caller retries it on its next tick.
    """
    from .kubernetes import KubernetesBackend

    if not isinstance(backend, KubernetesBackend):
        return
    key = (backend.cluster_name, job.id)
    if key in _kept:
        return
    try:
        count = copy_pod_logs(backend, job)
    except Exception as exc:  # noqa: BLE001 - API, network or store: all retried alike
        _failures[key] = _failures.get(key, 0) + 1
        if _failures[key] < MAX_ATTEMPTS:
            raise BackendError(f"cannot keep the logs of job {job.id} in the artifact store "
                               f"(attempt {_failures[key]} of {MAX_ATTEMPTS}): {exc}") from exc
        log.warning("job %s: giving up keeping its Pods' logs after %d attempts: %s", job.id,
                    MAX_ATTEMPTS, exc, extra={"exp_id": job.exp_id, "job_id": job.id})
    else:
        log.info("job %s: kept the logs of %d Pod(s) in the artifact store", job.id, count,
                 extra={"exp_id": job.exp_id, "job_id": job.id})
    if len(_kept) > 10_000:  # only jobs being aborted are seen again; forget the rest
        _kept.clear()
    _kept.add(key)
    _failures.pop(key, None)
