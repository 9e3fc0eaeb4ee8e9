"""How a Kubernetes Job and its Pods map to a Falcon `ClusterJobState` (pure).

Reads the `batch/v1` Job and `core/v1` Pods as the API returned them and decides the Falcon
status, reason and message: waiting reasons, exit codes, disruptions and evictions, lost
replicas, suspension and deletion (docs/cluster-behaviours.md). No API call and no clock: a
one-line change to how a Pod's end is reported is made here.
"""
from __future__ import annotations

import functools
import sys
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from kubernetes import client

from controllers.cluster_backends.base import STDERR_TAIL_BYTES, ClusterJobState, ClusterJobStatus
from controllers.cluster_backends.kubernetes.vocabulary import (
    CONDITION_COMPLETE,
    CONDITION_DISRUPTION_TARGET,
    CONDITION_FAILED,
    CONDITION_FAILURE_TARGET,
    CONDITION_FALSE,
    CONDITION_POD_SCHEDULED,
    CONDITION_READY,
    CONDITION_SUCCESS_CRITERIA_MET,
    CONDITION_SUSPENDED,
    CONDITION_TRUE,
    IMAGE_PULL_REASONS,
    LABEL_EXP_ID,
    LABEL_JOB_ID,
    POD_COMPLETION_INDEX,
    POD_FINISHED_PHASES,
    POD_SUCCEEDED,
    STUCK_REASONS,
)


def int_label(labels: Mapping[str, str] | None, key: str) -> int | None:
    try:
        return int((labels or {}).get(key, ""))
    except ValueError:
        return None


def label_ids(labels: Mapping[str, str] | None) -> dict[str, int]:
    """The log ids (`exp_id`, `job_id`) of a Job or Pod, from its Falcon labels."""
    ids = {"exp_id": int_label(labels, LABEL_EXP_ID), "job_id": int_label(labels, LABEL_JOB_ID)}
    return {key: value for key, value in ids.items() if value is not None}


def _tail(text: str | None) -> str:
    text = (text or "").strip()
    return text[-STDERR_TAIL_BYTES:] if len(text) > STDERR_TAIL_BYTES else text


def condition(job: client.V1Job, kind: str):
    for cond in (job.status.conditions if job.status else None) or []:
        if cond.type == kind and cond.status == CONDITION_TRUE:
            return cond
    return None


def _pod_index(pod: client.V1Pod) -> str:
    annotations = pod.metadata.annotations or {}
    labels = pod.metadata.labels or {}
    return labels.get(POD_COMPLETION_INDEX) or annotations.get(POD_COMPLETION_INDEX) or "?"


def _container_statuses(pod: client.V1Pod) -> list:
    status = pod.status
    if status is None:
        return []
    return list(status.init_container_statuses or []) + list(status.container_statuses or [])


def pending_reasons(pods: list[client.V1Pod]) -> list[tuple[str, str]]:
    """Return `(reason, detail)` for each Pod that is not running yet, most serious first.

    Sources (core/v1 PodStatus): a `PodScheduled=False` condition (`Unschedulable` with the
    scheduler's message), and containers' `state.waiting` (`ImagePullBackOff` with the image
    in its message, `ContainerCreating`, ...).
    """
    found: list[tuple[int, str, str]] = []
    for pod in pods:
        if pod.metadata.deletion_timestamp or (pod.status and pod.status.phase in
                                               POD_FINISHED_PHASES):
            continue
        for cond in (pod.status.conditions if pod.status else None) or []:
            if cond.type == CONDITION_POD_SCHEDULED and cond.status == CONDITION_FALSE:
                found.append((1, cond.reason or "Unschedulable", cond.message or ""))
        for cs in _container_statuses(pod):
            waiting = cs.state.waiting if cs.state else None
            if waiting is not None and waiting.reason:
                rank = 0 if waiting.reason in STUCK_REASONS else 2
                found.append((rank, waiting.reason, waiting.message or ""))
    found.sort(key=lambda item: item[0])
    return [(reason, detail) for _rank, reason, detail in found]


@dataclass(frozen=True)
class PodEnd:
    """Who or what ended a Pod that was not the task (`pod_end`).

    Attributes:
        verb: how a message says it: `evicted`, `preempted`, `node lost`, `stopped by a node
            shutdown`, `stopped by the kubelet`, `disrupted` (another disruption), `deleted`.
        reason: the cluster's own word for it (`Evicted`, `PreemptionByScheduler`, ...).
        detail: the cluster's message (the kubelet's for an eviction), "" when none.
    """

    verb: str
    reason: str
    detail: str = ""


# `status.reason` the kubelet writes when it ends a Pod itself, and what it means (kubelet
# eviction manager: `Evicted`; critical-pod admission: `Preempting`; graceful node shutdown:
# `Terminated`, `Shutdown` before 1.22; node lifecycle: `NodeLost`). It names the act more
# precisely than the `TerminationByKubelet` condition, which all of them share.
_STATUS_REASON_VERBS = {
    "Evicted": "evicted",
    "Preempting": "preempted",
    "Terminated": "stopped by a node shutdown",
    "Shutdown": "stopped by a node shutdown",
    "NodeLost": "node lost",
}
# `DisruptionTarget` condition reasons (Kubernetes >= 1.26, "Pod disruption conditions"):
# `EvictionByEvictionAPI` is an API-initiated eviction (a drain, a PodDisruptionBudget-aware
# evict); `DeletionByPodGC` deletes a Pod bound to a Node that no longer exists;
# `DeletionByTaintManager` deletes a Pod for a NoExecute taint it does not tolerate (an
# unreachable node often, but not always: it stays "disrupted"). Unknown reasons: "disrupted".
_DISRUPTION_VERBS = {
    "EvictionByEvictionAPI": "evicted",
    "PreemptionByScheduler": "preempted",
    "DeletionByPodGC": "node lost",
    "TerminationByKubelet": "stopped by the kubelet",
}


def pod_end(pod: client.V1Pod) -> PodEnd | None:
    """Return who ended `pod` when the cluster did, not the task; None when nothing says so.

    Pure: one table for every message that names a lost or failed Pod. Sources (core/v1
    PodStatus): the kubelet's `status.reason` (`_STATUS_REASON_VERBS`) with its `message`
    ("The node was low on resource: memory. ..."), read first because it says what the
    kubelet did; else the `DisruptionTarget=True` condition's reason (`_DISRUPTION_VERBS`)
    and message. Neither is the task's fault, so a message must say so: the container's own
    exit code (137 for the SIGKILL) would otherwise read like a crash.
    """
    status = pod.status
    if status is None:
        return None
    cond = next((c for c in status.conditions or []
                 if c.type == CONDITION_DISRUPTION_TARGET and c.status == CONDITION_TRUE), None)
    cond_message = (cond.message if cond is not None else None) or ""
    verb = _STATUS_REASON_VERBS.get(status.reason or "")
    # `Terminated` and `Shutdown` mean a node shutdown only when the kubelet says it ended
    # the Pod (the condition), or with the kubelet's own shutdown message.
    if verb is not None and (status.reason not in ("Terminated", "Shutdown") or cond is not None
                             or "node shutdown" in (status.message or "")):
        return PodEnd(verb, status.reason, status.message or cond_message)
    if cond is not None:
        reason = cond.reason or CONDITION_DISRUPTION_TARGET
        return PodEnd(_DISRUPTION_VERBS.get(reason, "disrupted"), reason, cond_message)
    return None


def _pod_end_phrase(pod: client.V1Pod, end: PodEnd) -> str:
    """`pod x-1-abcde (index 1) evicted (Evicted): The node was low on resource: memory.`"""
    text = f"pod {pod.metadata.name} (index {_pod_index(pod)}) {end.verb} ({end.reason})"
    return f"{text}: {_tail(end.detail)}" if end.detail else text


def lost_replicas(pods: list[client.V1Pod]) -> list[str]:
    """Return one phrase per Pod that stopped running without finishing its work.

    A Pod that the cluster ended (`pod_end`: evicted, preempted, its node lost or shut
    down) or that is Terminating (`metadata.deletionTimestamp` set: `deleted`) is a lost
    replica: it never counts as running, even while its container still reports ready. Each
    phrase names the Pod, its index and the cause, with the cluster's message:
    `pod x-1-abcde (index 1) evicted (Evicted): The node was low on resource: memory.`
    """
    out = []
    for pod in pods:
        if pod.status and pod.status.phase == POD_SUCCEEDED:
            continue
        end = pod_end(pod)
        if end is None and pod.metadata.deletion_timestamp:
            end = PodEnd("deleted", (pod.status.reason if pod.status else None)
                         or "Terminating", (pod.status.message if pod.status else None) or "")
        if end is not None:
            out.append(_pod_end_phrase(pod, end))
    return out


def running_pods(pods: list[client.V1Pod]) -> int:
    """Return how many Pods run and are ready: phase Running, `Ready=True`, not Terminating."""
    count = 0
    for pod in pods:
        if pod.metadata.deletion_timestamp or not pod.status or pod.status.phase != "Running":
            continue
        if any(c.type == CONDITION_READY and c.status == CONDITION_TRUE
               for c in pod.status.conditions or []):
            count += 1
    return count


def failure_details(pods: list[client.V1Pod]) -> tuple[str, int | None]:
    """Return a sentence on the failed containers of `pods` and the first failing exit code.

    Names every Pod the cluster ended (`pod_end`: evicted, preempted, ...) first, then reads
    `state.terminated` (else `lastState.terminated`) of every container that ended with a
    non-zero exit code: reason (`Error`, `OOMKilled`,
    ...), `exitCode` and the termination message (the tail of the container's output when the
    Pod sets `terminationMessagePolicy: FallbackToLogsOnError`, as Falcon's Pods do).
    """
    parts: list[str] = []
    exit_code: int | None = None
    for pod in pods:
        end = pod_end(pod)
        if end is not None:
            parts.append(_pod_end_phrase(pod, end))
        for cs in _container_statuses(pod):
            term = (cs.state.terminated if cs.state else None) or (
                cs.last_state.terminated if cs.last_state else None)
            if term is None or term.exit_code == 0:
                continue
            if exit_code is None:
                exit_code = term.exit_code
            text = (f"pod {pod.metadata.name} (index {_pod_index(pod)}) container {cs.name}: "
                    f"{term.reason or 'terminated'}, exit code {term.exit_code}")
            if term.message:
                text += f": {_tail(term.message)}"
            parts.append(text)
    return "; ".join(parts), exit_code


def _ready_counts(job: client.V1Job) -> tuple[int, int]:
    """Return the `(ready, succeeded)` Pod counts of a Job's status (0 when unset).

    Args:
        job: the Job as the API returned it (`status` may be None).
    """
    status = job.status or client.V1JobStatus()
    return status.ready or 0, status.succeeded or 0


def _terminating(job: client.V1Job) -> int:
    """Return the Job's `status.terminating` (Pods being deleted; Kubernetes >= 1.28), or 0."""
    return (job.status.terminating if job.status else None) or 0


def all_ready(job: client.V1Job, pods_total: int,
              pods: list[client.V1Pod] | None = None) -> bool:
    """Return True when every index of `job` is ready or done, and at least one is ready.

    `status.active` counts Pending Pods too, so it never means running; `ready` does. A Job
    with Terminating Pods (`status.terminating`) is judged on its Pods when they are given:
    a Terminating Pod never counts as running, whatever its Ready condition says; without
    its Pods such a Job is not taken as running.

    Args:
        job: the Job as the API returned it.
        pods_total: `spec.completions` (replica x hosts).
        pods: the Job's Pods, when they were read.
    """
    ready, succeeded = _ready_counts(job)
    if _terminating(job) or (pods and any(p.metadata.deletion_timestamp for p in pods)):
        if pods is None:
            return False
        ready = running_pods(pods)
    return bool(ready) and ready + succeeded >= pods_total


def start_time(job: client.V1Job) -> datetime | None:
    """Return the Job's `status.startTime` (aware UTC), None when unset or unreadable.

    batch/v1 JobStatus `startTime`: when the Job controller started processing the Job (unset
    while it is suspended). A client model holds a datetime, a decoded LIST item (`Raw`) the
    RFC 3339 text; a value that is neither is no start, never an error (CB-25).
    """
    value = job.status.start_time if job.status is not None else None
    if isinstance(value, str):
        return _utc_of_text(value)
    if not isinstance(value, datetime):
        return None
    return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)


@functools.lru_cache(maxsize=4096)
def _utc_of_text(text: str) -> datetime | None:
    """An RFC 3339 time as an aware UTC datetime, None when unreadable. Cached: the Jobs a
    cluster started in the same second share one (datetimes are immutable), and a state
    kept for each of 100,000 Jobs does not hold a datetime of its own."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _missing_state(name: str) -> ClusterJobState:
    """Return the state of a Job that does not exist: Missing.

    Args:
        name: the Job's name, for the message.
    """
    return ClusterJobState(name=name, status=ClusterJobStatus.MISSING,
                           reason="ClusterJobMissing",
                           message=f"cluster Job {name} does not exist (deleted?)")


def _succeeded_state(name: str, job: client.V1Job, pods_total: int) -> ClusterJobState | None:
    """Return Succeeded when `job` has a `Complete` or `SuccessCriteriaMet` condition, else None.

    Args:
        name: the Job's name, for the message.
        job: the Job as the API returned it.
        pods_total: `spec.completions` (replica x hosts), for the message.
    """
    if condition(job, CONDITION_COMPLETE) is None and \
            condition(job, CONDITION_SUCCESS_CRITERIA_MET) is None:
        return None
    return ClusterJobState(name=name, status=ClusterJobStatus.SUCCEEDED, reason="Completed",
                           message=f"all {pods_total} pods of Job {name} completed", exit_code=0)


def _failed_state(name: str, job: client.V1Job,
                  pods: list[client.V1Pod]) -> ClusterJobState | None:
    """Return Failed when `job` has a `Failed` or `FailureTarget` condition, else None.

    The reason is the condition's (`BackoffLimitExceeded`, `DeadlineExceeded`, ...), the
    message adds the failed containers' reasons, exit codes and output tails
    (`failure_details`). `status.failed > 0` alone is not failure: the Job may still retry.

    Args:
        name: the Job's name, for the state.
        job: the Job as the API returned it.
        pods: the Job's Pods (may be empty).
    """
    failed = condition(job, CONDITION_FAILED) or condition(job, CONDITION_FAILURE_TARGET)
    if failed is None:
        return None
    details, exit_code = failure_details(pods)
    reason = failed.reason or "JobFailed"
    message = f"{reason}: {failed.message or 'the Job failed'}"
    if details:
        message += f"; {details}"
    return ClusterJobState(name=name, status=ClusterJobStatus.FAILED, reason=reason,
                           message=message, exit_code=exit_code)


def _suspended_state(name: str, job: client.V1Job) -> ClusterJobState | None:
    """Return Pending with `suspended` set when `job` is held back on purpose, else None.

    A suspended Job (`spec.suspend: true` or a `Suspended=True` condition) has no Pods on
    purpose (a queue such as Kueue admits it when quota is free, or an operator paused it): it
    is waiting its turn, not failing to start, so the pending timeout does not apply.

    Args:
        name: the Job's name, for the message.
        job: the Job as the API returned it.
    """
    suspended = condition(job, CONDITION_SUSPENDED)
    if not ((job.spec is not None and job.spec.suspend) or suspended is not None):
        return None
    why = f": {suspended.message}" if suspended is not None and suspended.message else ""
    return ClusterJobState(name=name, status=ClusterJobStatus.PENDING, reason="Suspended",
                           message=f"Job {name} is suspended (spec.suspend: true){why}; "
                           "it starts when resumed", suspended=True)


def _running_state(name: str, job: client.V1Job, pods_total: int,
                   pods: list[client.V1Pod] | None = None) -> ClusterJobState | None:
    """Return Running when every index is ready or done (`all_ready`), else None.

    Args:
        name: the Job's name, for the state.
        job: the Job as the API returned it.
        pods_total: `spec.completions` (replica x hosts).
        pods: the Job's Pods when they were read (judges Terminating ones).
    """
    if not all_ready(job, pods_total, pods):
        return None
    ready, succeeded = _ready_counts(job)
    done_note = f", {succeeded} completed" if succeeded else ""
    # Interned: the states of every running Job are kept between ticks, and most say the same.
    return ClusterJobState(name=name, status=ClusterJobStatus.RUNNING, reason="AllReplicasReady",
                           message=sys.intern(f"{ready}/{pods_total} pods ready{done_note}"))


def _pending_message(reasons: list[tuple[str, str]], image: str) -> str:
    """Return the Pods' pending reasons as one sentence, counted: `2 pods Unschedulable: ...`.

    Args:
        reasons: `(reason, detail)` per waiting Pod or container, as `pending_reasons` returns.
        image: the task image, added to an image-pull reason whose detail does not name it.
    """
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for item in reasons:
        counts[item] += 1
    texts = []
    for (reason, detail), count in counts.items():
        text = f"{count} pod{'s' if count > 1 else ''} {reason}"
        if detail:
            text += f": {detail}"
        if reason in IMAGE_PULL_REASONS and image and image not in detail:
            text += f" (image {image})"
        texts.append(text)
    return "; ".join(texts)


def _pending_state(name: str, job: client.V1Job, pods: list[client.V1Pod], pods_total: int,
                   image: str) -> ClusterJobState:
    """Return Pending with the Pods' reasons (`Unschedulable`, `ImagePullBackOff`, ...).

    Args:
        name: the Job's name, for the state.
        job: the Job as the API returned it.
        pods: the Job's Pods (may be empty: then the reason is `PodsStarting`).
        pods_total: `spec.completions` (replica x hosts).
        image: the task image, named in image-pull messages.
    """
    ready, _succeeded = _ready_counts(job)
    if _terminating(job) or any(p.metadata.deletion_timestamp for p in pods):
        ready = running_pods(pods)
    summary = f"{ready}/{pods_total} pods ready"
    lost = lost_replicas(pods)
    reasons = pending_reasons(pods)
    if lost:
        # A replica stopped without finishing (evicted, preempted, node lost): say which and
        # why first; the resource manager fails a job that stays so past its progress
        # deadline, whether it was Running or never got there (CB-21).
        waiting = f"; {_pending_message(reasons, image)}" if reasons else ""
        return ClusterJobState(name=name, status=ClusterJobStatus.PENDING, reason="ReplicaLost",
                               message=f"{summary}; {'; '.join(lost)}{waiting}",
                               replica_lost=True)
    if not reasons:
        return ClusterJobState(name=name, status=ClusterJobStatus.PENDING, reason="PodsStarting",
                               message=f"{summary}; waiting for pods to start")
    return ClusterJobState(name=name, status=ClusterJobStatus.PENDING, reason=reasons[0][0],
                           message=f"{summary}; {_pending_message(reasons, image)}")


def job_state(name: str, job: client.V1Job | None, pods: list[client.V1Pod], *,
              pods_total: int, image: str = "") -> ClusterJobState:
    """Map a `batch/v1` Job and its Pods to the Falcon view of it.

    Pure (no API call): one helper per rule below, the first rule that applies decides.

    Rules (docs/cluster-behaviours.md; cases in controllers/tests/fixtures/k8s-job-status.yaml):
    - no Job: Missing (the resource manager fails the Falcon Job, CB-12);
    - a `Complete` or `SuccessCriteriaMet` condition: Succeeded;
    - a `Failed` or `FailureTarget` condition: Failed, with the condition's reason
      (`BackoffLimitExceeded`, `DeadlineExceeded`, ...) and the failed containers' reason and
      exit code (FailureTarget is final: the Failed condition follows once Pods are gone);
      `status.failed > 0` alone is NOT failure, the Job may still retry (CB-10); an evicted or
      preempted Pod is named as such (`pod_end`);
    - `spec.suspend: true` or a `Suspended=True` condition (batch/v1 JobSpec `suspend`):
      Pending with reason `Suspended` and `suspended` set (no pending timeout);
    - being deleted (`deletionTimestamp`) without an outcome: Failed `ClusterJobDeleted`;
    - every index ready or done (`ready + succeeded >= pods_total`, at least one ready):
      Running. `status.active` counts Pending Pods too, so it never means running (CB-5);
      a Terminating Pod never counts as running;
    - a Pod lost without finishing (Terminating, evicted, preempted, node lost): Pending with
      reason `ReplicaLost` naming the Pod and the cause;
    - otherwise Pending, with the Pods' reasons (`Unschedulable`, `ImagePullBackOff` and the
      image, ...) in the message.
    Every state of an existing Job carries its `status.startTime` as `started_at` (CB-25).

    Args:
        name: the Job's name, for messages.
        job: the Job as the API returned it, or None when it does not exist.
        pods: the Job's Pods (may be empty when they were not listed or are gone).
        pods_total: `spec.completions` the Falcon Job asked for (replica x hosts).
        image: the task image, named in image-pull messages.
    """
    if job is None:
        return _missing_state(name)
    state = (_succeeded_state(name, job, pods_total)
             or _failed_state(name, job, pods)
             or _deleted_state(name, job)
             or _suspended_state(name, job)
             or _running_state(name, job, pods_total, pods)
             or _pending_state(name, job, pods, pods_total, image))
    started = start_time(job)
    return state if started is None else replace(state, started_at=started)


def _deleted_state(name: str, job: client.V1Job) -> ClusterJobState | None:
    """Return Failed for an unfinished Job that is being deleted, else None.

    Falcon deletes a Job only for a Falcon job that is Aborting or already terminal, which is
    never observed; a Job observed with `metadata.deletionTimestamp` and no outcome was deleted
    by someone else (`kubectl delete`), and Falcon's finalizer kept it visible long enough to
    say so instead of reporting it missing.

    Args:
        name: the Job's name, for the message.
        job: the Job as the API returned it.
    """
    if not job.metadata.deletion_timestamp:
        return None
    return ClusterJobState(name=name, status=ClusterJobStatus.FAILED, reason="ClusterJobDeleted",
                           message=f"Job {name} was deleted before it finished (deleted "
                           f"outside Falcon at {job.metadata.deletion_timestamp}); it is not "
                           "re-created")
