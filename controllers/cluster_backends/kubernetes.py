"""The Kubernetes cluster backend: one `batch/v1` Indexed Job per Falcon Job.

What a Falcon Job becomes (Kubernetes API reference, batch/v1 JobSpec; GKE TPU and GPU docs):

- a Job named `cluster_job_name(job)` (deterministic, a DNS-1123 label of at most
  `K8S_JOB_NAME_MAX` characters so that the Pod hostnames `<name>-<index>` an Indexed Job
  derives stay within 63), labelled `falcon.io/exp-id`, `falcon.io/job-id`, `falcon.io/role`
  and `app.kubernetes.io/managed-by: falcon` (the selector of every LIST), on the Job and its
  Pods;
- `completionMode: Indexed`, `parallelism = completions = replica x hosts` (CB-9: the
  Job succeeds only when every index completed), `restartPolicy: Never`, `backoffLimit`
  (default 0: a profiling run is not silently retried), `ttlSecondsAfterFinished` (default one
  day, at least 300 s: the failed Pods' exit codes stay readable; the finalizer keeps the Job
  itself until its outcome is recorded);
- one container `main` running the TaskSpec `command` through `/bin/sh -c`, with the TaskSpec
  `envs`, `CUSTOM_CONFIG_KEY` (the experiment config, verbatim) and the `FALCON_*` variables;
- accelerators from `devices.DeviceTable`: resource requests and limits, node selectors; a
  multi-host TPU slice runs one Pod per host, and a Job with more than one Pod gets a headless
  Service of the same name (owned by the Job, so it is garbage-collected with it) and
  `subdomain`, so Pods reach each other as `<name>-<index>.<name>`.

Reading state (`observe`): list-then-watch caches of the Jobs and Pods with the managed-by label
selector (`kubeclient.Informer`), caught up each tick to the resourceVersion of a one-item LIST;
a Job such a cache lacks is missing only when the cache is known to be as new as the Job, or a
direct read says so, and a Job this process created is known from the create's answer without
waiting for the watch (`_known_jobs`, docs/cluster-behaviours.md CB-24);
with `watch: false`, one paged LIST of Jobs per tick plus one LIST of the Pods of the Jobs that
need them (not yet running, failed, losing replicas: their waiting reasons, exit codes and
disruptions go into the message). Answers are decoded JSON read through `kubeclient.Raw`.
Status mapping is `job_state` below.

Outcomes and orphans: each Job carries Falcon's finalizer (`FINALIZER`), so Kubernetes cannot
remove it before its outcome is recorded; each tick the resource manager asks `held_outcomes`
which Jobs hold it and `release_outcomes` those whose Falcon job is terminal (CB-19), and
`sweep` releases the Jobs of unknown Falcon jobs and deletes what no open Falcon job owns
(docs/cluster-behaviours.md, CB-19 and CB-20).
"""
from __future__ import annotations

import json
import logging
import time
import weakref
from datetime import datetime, timezone
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import urllib3
from kubernetes import client
# The API classes load lazily on first use, which takes a second on a busy machine: they load
# with this module (the resource manager's start-up), not inside its first tick.
from kubernetes.client import BatchV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from controllers.contract import JobView
from controllers.cluster_backends.base import (
    STDERR_TAIL_BYTES,
    BackendError,
    ClusterBackend,
    ClusterJobState,
    ClusterJobStatus,
    PermanentBackendError,
    SubmitResult,
    cluster_job_name_for,
)
from clusters.validation import kubernetes_task_spec_problems
from clusters.devices import TPU_TOPOLOGY_LABEL, DeviceTable, DeviceType
from controllers.pod_security import security_contexts
from controllers.kubeclient import (
    Informer, KubeCaller, KubeConnection, Raw, api_client, list_all_raw,
)
from core.statuses import CONFIG_ENV

log = logging.getLogger("falcon.controllers.kubernetes")

LABEL_EXP_ID = "falcon.io/exp-id"
LABEL_JOB_ID = "falcon.io/job-id"
LABEL_ROLE = "falcon.io/role"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "falcon"
SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
ANNOTATION_EXP_NAME = "falcon.io/exp-name"
# Falcon's finalizer on each Job it creates (API conventions, "Finalizers"): Kubernetes (the TTL
# controller, a `kubectl delete`) cannot remove the Job before the resource manager recorded
# its outcome; the resource manager removes it once the Falcon job is terminal
# (`release_outcomes`, every tick), when nobody will record one (`sweep`), or when it deletes
# the Job itself (`delete`).
FINALIZER = "falcon.io/outcome"
# Set by the Job controller on every Pod it creates (Kubernetes >= 1.27; `job-name` before).
POD_JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTAINER = "main"
# An Indexed Job's Pod hostname is `<job name>-<index>` and must be a DNS label (<= 63); room
# for '-' and a 10-digit index.
K8S_JOB_NAME_MAX = 52
# Waiting reasons that will not clear by themselves: named first in a Pending message (CB-6).
STUCK_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff",
                 "RunContainerError")
# Waiting reasons about the image: the message names the image when the detail does not.
IMAGE_PULL_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName")
PROPAGATION_POLICIES = ("Foreground", "Background")
# 4xx answers to a create that a later attempt can get past (API conventions, "HTTP Status
# codes"): 409 is an adoption or a kept Service, 429 and 408 say "try again later", 401 means
# this controller's credentials are stale (a rotated service-account token), and 403 is either
# a full namespace ResourceQuota ("exceeded quota", which clears as other jobs finish) or an
# RBAC rule an operator fixes; Kubernetes gives both the same status and reason, and failing
# every Pending job for either would turn a passing squeeze or an operator's fix into mass
# failures (the job's message names the refusal meanwhile). Every other 4xx (400, 404, 422, ...)
# is the API server's decision about this object: final.
RETRYABLE_CLIENT_ERRORS = frozenset({401, 403, 408, 409, 429})

# Kubernetes API vocabulary, not Falcon statuses (core/v1 PodStatus, batch/v1 JobStatus).
# Pod phases: not started yet, and the two a Pod never leaves.
POD_PENDING = "Pending"
POD_SUCCEEDED = "Succeeded"
POD_FAILED = "Failed"
POD_FINISHED_PHASES = (POD_SUCCEEDED, POD_FAILED)
# Job condition types: the Job is done, is failing for good, or is held back.
CONDITION_COMPLETE = "Complete"
CONDITION_SUCCESS_CRITERIA_MET = "SuccessCriteriaMet"
CONDITION_FAILED = "Failed"
CONDITION_FAILURE_TARGET = "FailureTarget"
CONDITION_SUSPENDED = "Suspended"
# Pod condition types: not scheduled yet, or ended by someone else than the task.
CONDITION_POD_SCHEDULED = "PodScheduled"
CONDITION_DISRUPTION_TARGET = "DisruptionTarget"
# A condition's `status` field.
CONDITION_TRUE = "True"
CONDITION_FALSE = "False"


# Above this many Jobs needing their Pods in one tick, one LIST of every Falcon Pod is cheaper
# than label selectors naming them (and keeps the URL short).
POD_SELECTOR_NAMES = 50
# Above this many Jobs a lagging cache lacks in one tick, one LIST of every Falcon Job reads
# them directly instead of one GET each (`_read_directly`).
DIRECT_READ_GETS = 50
# How long a Job this process created or read directly counts as present while the Jobs cache
# has not seen it, seconds: kube-controller-manager's `ExpectationsTimeout` (5 min). Past it
# the Job is read directly again (a cache that never catches up must not hide a deletion).
EXPECTATION_TIMEOUT = 300.0


@dataclass
class _Known:
    """A Job known from a direct answer of the API server (its create response, an adoption's
    GET, a direct read), for as long as the Jobs cache has not caught up with it.

    Attributes:
        obj: the Job as that answer returned it (decoded JSON).
        rv: its resourceVersion as an integer, None when it is not one.
        since: the backend's clock when it was learnt.
    """

    obj: dict[str, Any]
    rv: int | None
    since: float


def _int_rv(obj: Mapping[str, Any]) -> int | None:
    """An object's `metadata.resourceVersion` as an integer (None when it is not one)."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


@dataclass
class ReleaseResult:
    """What one `KubernetesBackend.release_outcomes` did: the Jobs whose finalizer was
    removed, and the error of each Job it could not release (retried next tick)."""

    released: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass
class SweepResult:
    """What one `KubernetesBackend.sweep` did: names of Jobs whose finalizer was removed, of
    Jobs and Pods deleted, and of those still terminating (tracked until they are gone)."""

    released: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    terminating: list[str] = field(default_factory=list)


def _age(meta: Mapping[str, Any], now: datetime) -> float:
    """Seconds since `metadata.creationTimestamp` (RFC 3339); infinite when it is absent."""
    stamp = meta.get("creationTimestamp")
    if not stamp:
        return float("inf")
    try:
        created = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    return (now - created).total_seconds()


def _stop_all(caches) -> None:
    for cache in caches:
        if cache is not None:
            cache.stop()


@dataclass(frozen=True)
class KubernetesClusterConfig:
    """One `backend: kubernetes` entry of the clusters file.

    Attributes:
        namespace: where Jobs, Pods and Services of this cluster's Falcon Jobs live.
        connection: how to reach the API server (`kubeclient.KubeConnection`).
        backoff_limit: `spec.backoffLimit`; 0 means any failed Pod fails the Job.
        ttl_seconds_after_finished: `spec.ttlSecondsAfterFinished`, seconds.
        active_deadline_seconds: `spec.activeDeadlineSeconds` (None: no deadline).
        termination_grace_period_seconds: the Pods' SIGTERM-to-SIGKILL time on delete.
        propagation_policy: `Foreground` (the Job is gone only once its Pods are) or
            `Background`; never `Orphan`, which leaves Pods running (CB-13).
        service_account: `serviceAccountName` of task Pods ("" = the namespace default).
        image_pull_secrets: names of Secrets for private registries.
        node_selector: extra node labels every task Pod selects.
        list_page_size: `limit` of each LIST page.
        devices: the device table (built-in types plus the file's `devices:` entries).
        watch: keep a list-then-watch cache of the Falcon-labelled Jobs and Pods
            (`kubeclient.Informer`) and read it each tick; False LISTs them every tick.
        watch_timeout: `timeoutSeconds` of each WATCH request, seconds.
        cache_sync_wait: seconds a tick waits for the cache to reach the resourceVersion of
            a one-item LIST made at its start (read-after-write for the tick); past it the
            tick reads the cache as it is (the next tick catches up).
        pod_security: the task Pods' Pod Security Standard level (`restricted`, `baseline`,
            `privileged`; `controllers.pod_security`).
        run_as_user: the task containers' uid, None for the image's own `USER`.
    """

    namespace: str
    connection: KubeConnection = field(default_factory=KubeConnection)
    backoff_limit: int = 0
    ttl_seconds_after_finished: int = 86400
    active_deadline_seconds: int | None = None
    termination_grace_period_seconds: int = 30
    propagation_policy: str = "Foreground"
    service_account: str = ""
    image_pull_secrets: tuple[str, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    list_page_size: int = 5000
    devices: DeviceTable = field(default_factory=DeviceTable)
    watch: bool = True
    watch_timeout: float = 60.0
    cache_sync_wait: float = 1.0
    pod_security: str = "restricted"
    run_as_user: int | None = None


def _status_message(exc: ApiException) -> str:
    """Return the `message` of the `meta/v1 Status` body of an API error ("" when absent)."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return ""
    return str(body.get("message") or "") if isinstance(body, dict) else ""


def _int_label(labels: Mapping[str, str] | None, key: str) -> int | None:
    try:
        return int((labels or {}).get(key, ""))
    except ValueError:
        return None


def _label_ids(labels: Mapping[str, str] | None) -> dict[str, int]:
    """The log ids (`exp_id`, `job_id`) of a Job or Pod, from its Falcon labels."""
    ids = {"exp_id": _int_label(labels, LABEL_EXP_ID), "job_id": _int_label(labels, LABEL_JOB_ID)}
    return {key: value for key, value in ids.items() if value is not None}


def _tail(text: str | None) -> str:
    text = (text or "").strip()
    return text[-STDERR_TAIL_BYTES:] if len(text) > STDERR_TAIL_BYTES else text


def _condition(job: client.V1Job, kind: str):
    for cond in (job.status.conditions if job.status else None) or []:
        if cond.type == kind and cond.status == CONDITION_TRUE:
            return cond
    return None


def _pod_index(pod: client.V1Pod) -> str:
    annotations = pod.metadata.annotations or {}
    labels = pod.metadata.labels or {}
    return (labels.get("batch.kubernetes.io/job-completion-index")
            or annotations.get("batch.kubernetes.io/job-completion-index") or "?")


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
        if any(c.type == "Ready" and c.status == CONDITION_TRUE
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
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(value, datetime):
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
    if _condition(job, CONDITION_COMPLETE) is None and \
            _condition(job, CONDITION_SUCCESS_CRITERIA_MET) is None:
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
    failed = _condition(job, CONDITION_FAILED) or _condition(job, CONDITION_FAILURE_TARGET)
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
    suspended = _condition(job, CONDITION_SUSPENDED)
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
    return ClusterJobState(name=name, status=ClusterJobStatus.RUNNING, reason="AllReplicasReady",
                           message=f"{ready}/{pods_total} pods ready{done_note}")


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


class KubernetesBackend(ClusterBackend):
    """Run Falcon Jobs as `batch/v1` Indexed Jobs in one namespace of one cluster.

    Args:
        cluster_name: the `cluster_name` experiments use (for `FALCON_CLUSTER` and messages).
        config: the cluster's settings (`KubernetesClusterConfig`).
        api: an `ApiClient` to use; None builds one from `config.connection` on first use
            (so that CreateExp validation in the API server never touches the cluster).

    Every call goes through `KubeCaller`: a timeout, bounded retries with backoff, a QPS cap.
    Failures the next tick may retry are raised as `BackendError`; a job the API server (or
    this backend) refuses for good as `PermanentBackendError`.
    """

    name = "kubernetes"

    def __init__(self, cluster_name: str, config: KubernetesClusterConfig, *,
                 api: client.ApiClient | None = None, clock=time.monotonic):
        if config.propagation_policy not in PROPAGATION_POLICIES:
            raise ValueError(f"propagation_policy must be one of {PROPAGATION_POLICIES}")
        self.cluster_name = cluster_name
        self.config = config
        self.caller = KubeCaller(config.connection)
        self._api = api
        self._clock = clock
        # Jobs by name that this process created, adopted or read directly and the Jobs cache
        # has not shown yet (kube-controller-manager's ControllerExpectations): present, as
        # the API server answered, until the cache has caught up with them (`_known_jobs`).
        self._known: dict[str, _Known] = {}
        self._job_cache: Informer | None = None
        self._pod_cache: Informer | None = None
        # The state each Job of the last tick mapped to (see `observe`), keyed by (Job name,
        # resourceVersion, Falcon job id, image), plus the sorted (name, resourceVersion) of
        # its Pods for a Job whose Pods were read.
        self._states: dict[tuple, ClusterJobState] = {}
        # The Jobs (by the same key) whose Pods the last tick read, with their pod count.
        self._needs_pods: dict[tuple[str, str, int, str], int] = {}
        # Job name -> the resourceVersion of the copy whose finalizer this backend removed:
        # a cache still holding that copy must not make the next call patch it again. Only
        # saves calls; nothing is concluded from it (a restart forgets it harmlessly).
        self._released: dict[str, str | None] = {}

    # -- clients -----------------------------------------------------------------------------

    @property
    def api(self) -> client.ApiClient:
        """The `ApiClient`, built from the connection settings on first use."""
        if self._api is None:
            try:
                self._api = api_client(self.config.connection)
            except Exception as exc:  # ConfigException, missing files: retry next tick
                raise BackendError(f"cluster {self.cluster_name}: cannot load the Kubernetes "
                                   f"client configuration: {exc}") from exc
        return self._api

    @property
    def batch(self) -> BatchV1Api:
        """The batch/v1 API (Jobs) on `api`."""
        return BatchV1Api(self.api)

    @property
    def core(self) -> CoreV1Api:
        """The core/v1 API (Pods, Services, logs) on `api`."""
        return CoreV1Api(self.api)

    def _fail(self, what: str, exc: BaseException) -> BackendError:
        """Return the error to raise for a failed call: permanent for a final 4xx.

        The message carries the API server's own `Status.message` (e.g. `Job.batch "x" is
        invalid: spec.template.spec.containers[0].image: Required value`), which says what to
        fix; the status code and reason alone do not.
        """
        if not isinstance(exc, ApiException):
            return BackendError(f"cluster {self.cluster_name}: {what}: {exc!r}")
        detail = f"{exc.status} {exc.reason}"
        message = _status_message(exc)
        if message:
            detail += f": {message}"
        text = f"cluster {self.cluster_name}: {what}: {detail}"
        if 400 <= (exc.status or 0) < 500 and exc.status not in RETRYABLE_CLIENT_ERRORS:
            return PermanentBackendError(text)
        return BackendError(text)

    # -- naming and building ----------------------------------------------------------------

    def cluster_job_name(self, job: JobView) -> str:
        """Return the Job name: `falcon-<exp id>-<exp name>-<role>`, at most 52 characters."""
        return cluster_job_name_for(exp_id=job.exp_id, exp_name=job.exp_name, role=job.role,
                                    max_len=K8S_JOB_NAME_MAX)

    def _device(self, spec: Mapping[str, Any]) -> DeviceType | None:
        device_type = spec.get("device_type") or ""
        if not device_type:
            return None
        device = self.config.devices.get(device_type)
        if device is None:
            raise PermanentBackendError(
                f"cluster {self.cluster_name}: device_type {device_type!r} has no mapping "
                "(was the clusters file changed after CreateExp?)")
        return device

    def shape(self, spec: Mapping[str, Any]) -> tuple[int, int, DeviceType | None]:
        """Return `(replica, hosts per replica, device)` of a validated TaskSpec.

        Raises:
            PermanentBackendError: the device type has no mapping, or a TPU role asks for more
                than one replica (accepted before `validate` refused it; one Job would be
                wired by GKE as one slice, see `validate`).
        """
        device = self._device(spec)
        hosts = device.hosts(int(spec.get("device_count") or 0)) if device else 1
        replica = int(spec.get("replica") or 1)
        if device is not None and device.kind == "tpu" and replica > 1:
            raise PermanentBackendError(
                f"cluster {self.cluster_name}: replica is {replica}, but TPU slices run one "
                "replica per role; use several roles")
        return replica, hosts, device

    def labels(self, job: JobView) -> dict[str, str]:
        """Return the labels of the Job, its Pods and its Service."""
        return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_EXP_ID: str(job.exp_id),
                LABEL_JOB_ID: str(job.id), LABEL_ROLE: job.role}

    def _task_env(self, job: JobView, *, name: str, replica: int, hosts: int) -> dict[str, str]:
        """Return the environment of every task container of `job`.

        The TaskSpec `envs` come first; Falcon's own variables are set last and win (CreateExp
        refuses these names in `envs`): the experiment config as `CONFIG_ENV` and the
        `FALCON_*` variables, with `FALCON_WORKER_HOSTNAMES` when the Job has several Pods.

        Args:
            job: the Falcon job.
            name: the Job's name; Pods are `<name>-<index>.<name>` in its headless Service.
            replica: the TaskSpec `replica`.
            hosts: Pods per replica (several for a multi-host TPU slice, else 1).
        """
        total = replica * hosts
        env = {str(k): str(v) for k, v in (job.task_spec.get("envs") or {}).items()}
        env.update({
            CONFIG_ENV: job.config,
            "FALCON_EXP_ID": str(job.exp_id),
            "FALCON_EXP_NAME": job.exp_name,
            "FALCON_JOB_ID": str(job.id),
            "FALCON_ROLE": job.role,
            "FALCON_CLUSTER": self.cluster_name,
            "FALCON_REPLICA_COUNT": str(replica),
            "FALCON_HOSTS_PER_REPLICA": str(hosts),
            "FALCON_ARTIFACT_PATH": job.artifact_path,
        })
        if total > 1:
            env["FALCON_WORKER_HOSTNAMES"] = ",".join(f"{name}-{i}.{name}" for i in range(total))
        return env

    def _accelerators(self, spec: Mapping[str, Any], device: DeviceType | None
                     ) -> tuple[client.V1ResourceRequirements | None, dict[str, str]]:
        """Return the container's resources and the Pod's node selector for a TaskSpec.

        Args:
            spec: the validated TaskSpec (`device_count`, `device_topo` are read).
            device: the TaskSpec's device type (`shape`), None when it uses no accelerator.

        Returns:
            `(resources, node_selector)`: requests = limits = the device's chips per Pod (None
            without a device), and the cluster's node selector plus the device's (and the TPU
            topology label for a TPU).
        """
        node_selector = dict(self.config.node_selector)
        if device is None:
            return None, node_selector
        per_pod = str(device.chips_per_pod(int(spec["device_count"])))
        resources = client.V1ResourceRequirements(limits={device.resource: per_pod},
                                                  requests={device.resource: per_pod})
        node_selector.update(device.node_selector)
        if device.kind == "tpu":
            node_selector[TPU_TOPOLOGY_LABEL] = spec["device_topo"]
        return resources, node_selector

    def _pod_spec(self, job: JobView, *, name: str, replica: int, hosts: int,
                 device: DeviceType | None) -> client.V1PodSpec:
        """Return the Pod spec of the Job's Pods: one container running the TaskSpec command.

        The command runs through `/bin/sh -c` after the replica and host index are computed
        from `JOB_COMPLETION_INDEX` (set by Kubernetes in Indexed Jobs).

        Args:
            job: the Falcon job; `task_spec` is validated.
            name: the Job's name (the Pods' `subdomain` when there are several).
            replica: the TaskSpec `replica`.
            hosts: Pods per replica.
            device: the TaskSpec's device type, or None.
        """
        spec = job.task_spec
        total = replica * hosts
        env = self._task_env(job, name=name, replica=replica, hosts=hosts)
        script = (f"export FALCON_REPLICA_INDEX=$(( ${{JOB_COMPLETION_INDEX:-0}} / {hosts} )) "
                  f"FALCON_HOST_INDEX=$(( ${{JOB_COMPLETION_INDEX:-0}} % {hosts} ))\n"
                  f"{spec['command']}")
        resources, node_selector = self._accelerators(spec, device)
        pod_security, container_security = security_contexts(
            self.config.pod_security, run_as_user=self.config.run_as_user)
        container = client.V1Container(
            name=CONTAINER, image=spec.get("image") or "", command=["/bin/sh", "-c", script],
            env=[client.V1EnvVar(name=k, value=v) for k, v in env.items()],
            resources=resources,
            # The tail of the output becomes the termination message when the container fails
            # without writing one: the failure reason Falcon shows.
            termination_message_policy="FallbackToLogsOnError",
            security_context=container_security)
        return client.V1PodSpec(
            restart_policy="Never", containers=[container],
            # A user's code gets no credential of the cluster (no service-account token: a
            # task has no business with the Kubernetes API) and runs at the cluster's Pod
            # Security level (`KubernetesClusterConfig.pod_security`, restricted by default).
            automount_service_account_token=False, security_context=pod_security,
            node_selector=node_selector or None,
            subdomain=name if total > 1 else None,
            service_account_name=self.config.service_account or None,
            image_pull_secrets=[client.V1LocalObjectReference(name=s)
                                for s in self.config.image_pull_secrets] or None,
            termination_grace_period_seconds=self.config.termination_grace_period_seconds,
            # Thousands of Services in the namespace would otherwise become env variables.
            enable_service_links=False)

    def build_job(self, job: JobView, name: str | None = None) -> client.V1Job:
        """Return the `batch/v1` Job for `job` (pure: no API call).

        Raises:
            PermanentBackendError: the TaskSpec cannot be run here (see `shape`).
        """
        name = name or self.cluster_job_name(job)
        replica, hosts, device = self.shape(job.task_spec)
        total = replica * hosts
        labels = self.labels(job)
        pod_spec = self._pod_spec(job, name=name, replica=replica, hosts=hosts, device=device)
        return client.V1Job(
            api_version="batch/v1", kind="Job",
            metadata=client.V1ObjectMeta(name=name, namespace=self.config.namespace,
                                         labels=labels, finalizers=[FINALIZER],
                                         annotations={ANNOTATION_EXP_NAME: job.exp_name}),
            spec=client.V1JobSpec(
                completion_mode="Indexed", completions=total, parallelism=total,
                backoff_limit=self.config.backoff_limit,
                ttl_seconds_after_finished=self.config.ttl_seconds_after_finished,
                active_deadline_seconds=self.config.active_deadline_seconds,
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels), spec=pod_spec)))

    def build_service(self, job: JobView, name: str, owner_uid: str) -> client.V1Service:
        """Return the headless Service giving each Pod of the Job a DNS name.

        `clusterIP: None` and `publishNotReadyAddresses` (workers must find each other before
        they are ready); owned by the Job, so deleting the Job deletes it.
        """
        labels = self.labels(job)
        return client.V1Service(
            api_version="v1", kind="Service",
            metadata=client.V1ObjectMeta(
                name=name, namespace=self.config.namespace, labels=labels,
                owner_references=[client.V1OwnerReference(
                    api_version="batch/v1", kind="Job", name=name, uid=owner_uid,
                    controller=True, block_owner_deletion=True)]),
            spec=client.V1ServiceSpec(cluster_ip="None", selector={LABEL_JOB_ID: str(job.id),
                                                                   LABEL_MANAGED_BY: MANAGED_BY},
                                      publish_not_ready_addresses=True))

    # -- ClusterBackend ---------------------------------------------------------------------

    def submit(self, job: JobView) -> SubmitResult:
        """Create the Job (and its headless Service), or adopt the Job of that name (CB-3).

        A create answering 409 AlreadyExists is an adoption when the existing Job carries this
        Falcon Job's `falcon.io/job-id`; a Job of that name belonging to something else is an
        error, never adopted. An adopted Job with more than one Pod gets its headless Service
        created when it is missing (a previous `submit` may have died between the two
        creates); a Service that exists answers 409 and is kept.

        Raises:
            PermanentBackendError: the API server refused the Job or its Service with a final
                4xx (422 Invalid, 400 Bad Request, ...; see `RETRYABLE_CLIENT_ERRORS`), or the
                TaskSpec cannot be built (`shape`).
            BackendError: the API failed in a way a retry may fix, or the name is taken by
                another Job.
        """
        name = self.cluster_job_name(job)
        made, created = self._create_or_adopt_job(job, name)
        self._ensure_service(job, name, made)
        verb = "created" if created else "adopted existing"
        return SubmitResult(cluster_job_name=name, created=created,
                            message=f"{verb} Job {self.config.namespace}/{name}")

    def _create_or_adopt_job(self, job: JobView, name: str) -> tuple[client.V1Job, bool]:
        """Create the Job of `job`, or read the one of that name when it exists and is its own.

        Args:
            job: the Falcon job.
            name: the Job's name (`cluster_job_name`).

        Returns:
            `(Job as the API returned it, created)`: created is False for an adoption.

        Raises:
            PermanentBackendError: the API server refused the Job for good, or the TaskSpec
                cannot be built (`shape`).
            BackendError: a call failed in a way a retry may fix, or a Job of that name
                belongs to another Falcon job.
        """
        ns = self.config.namespace
        body = self.build_job(job, name)
        try:
            made = self.caller.call(self.batch.create_namespaced_job, ns, body)
            self._learn(name, made)  # known now: the watch may show it much later
            return made, True
        except ApiException as exc:
            if exc.status != 409:
                raise self._fail(f"create Job {name}", exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise self._fail(f"create Job {name}", exc) from exc
        try:
            made = self.caller.call(self.batch.read_namespaced_job, name, ns)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise self._fail(f"read existing Job {name}", exc) from exc
        owner = _int_label(made.metadata.labels, LABEL_JOB_ID)
        if owner != job.id:
            raise BackendError(f"cluster {self.cluster_name}: a Job named {name} exists "
                               f"but belongs to falcon job {owner}, not {job.id}")
        self._learn(name, made)
        return made, False

    def _learn(self, name: str, obj: client.V1Job | dict[str, Any]) -> None:
        """Remember Job `name` as the API server just answered it (`_known`)."""
        raw = obj if isinstance(obj, dict) else self.api.sanitize_for_serialization(obj)
        self._known[name] = _Known(raw, _int_rv(raw), self._clock())

    def _ensure_service(self, job: JobView, name: str, made: client.V1Job) -> None:
        """Create the headless Service of a Job with more than one Pod; keep one that exists.

        Args:
            job: the Falcon job.
            name: the Job's (and the Service's) name.
            made: the Job as the API returned it (its `uid` owns the Service).

        Raises:
            PermanentBackendError: the API server refused the Service for good.
            BackendError: the call failed in a way a retry may fix.
        """
        if (made.spec.completions or 1) <= 1:
            return
        service = self.build_service(job, name, made.metadata.uid)
        try:
            self.caller.call(self.core.create_namespaced_service, self.config.namespace, service)
        except ApiException as exc:
            if exc.status != 409:
                raise self._fail(f"create Service {name}", exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise self._fail(f"create Service {name}", exc) from exc

    def _list(self, fn, what: str) -> list:
        try:
            return self.caller.list_all(fn, self.config.namespace, label_selector=SELECTOR,
                                        page_size=self.config.list_page_size)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise self._fail(f"list {what}", exc) from exc

    def _list_raw(self, fn, what: str) -> list[Raw]:
        """Every Falcon-labelled object of one kind, decoded without client models."""
        try:
            items, _rv = list_all_raw(self.caller, fn, self.config.namespace,
                                      label_selector=SELECTOR,
                                      page_size=self.config.list_page_size)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise self._fail(f"list {what}", exc) from exc
        return [Raw(item) for item in items]

    # -- reading the cluster ------------------------------------------------------------------

    def _informers(self) -> tuple[Informer, Informer]:
        """The Jobs and Pods caches, started on first use (never by CreateExp validation)."""
        if self._job_cache is None:
            common = {"label_selector": SELECTOR, "page_size": self.config.list_page_size,
                      "watch_timeout": self.config.watch_timeout}
            self._job_cache = Informer(self.caller, self.batch.list_namespaced_job,
                                       self.config.namespace, what="Jobs", **common).start()
            self._pod_cache = Informer(self.caller, self.core.list_namespaced_pod,
                                       self.config.namespace, what="Pods", **common).start()
            # A backend dropped without close() (tests, a reloaded clusters file) stops its
            # threads when it is garbage-collected.
            weakref.finalize(self, _stop_all, (self._job_cache, self._pod_cache))
        return self._job_cache, self._pod_cache

    def close(self) -> None:
        """Stop the Jobs and Pods caches' threads (a new call starts them again)."""
        caches = (self._job_cache, self._pod_cache)
        self._job_cache = self._pod_cache = None
        _stop_all(caches)

    def _synced_caches(self) -> tuple[Informer, Informer, bool]:
        """The caches, filled and caught up with the cluster as of now (see `cache_sync_wait`).

        One LIST with `limit=1` reads the current resourceVersion; the tick waits (at most
        `cache_sync_wait` seconds) until both caches reflect it, so what this manager wrote or
        saw written before the tick is in what it reads.

        Returns:
            `(jobs, pods, fresh)`: `fresh` is True only when the Jobs cache reached that
            resourceVersion, compared as integers (what etcd-backed API servers send); a
            cache that did not, or a resourceVersion that is not an integer, is not fresh,
            and a Job it lacks is read directly before it is called missing (`_known_jobs`).

        Raises:
            BackendError: the first LIST could not be made within the connection's deadline.
        """
        jobs, pods = self._filled_caches()
        try:
            probe = self.caller.call(self.batch.list_namespaced_job, self.config.namespace,
                                     label_selector=SELECTOR, limit=1,
                                     _preload_content=False)
            try:
                now = int(json.loads(probe.data)["metadata"]["resourceVersion"])
            finally:
                probe.release_conn()
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise self._fail("read the current resourceVersion", exc) from exc
        except (KeyError, TypeError, ValueError):
            return jobs, pods, False  # not an integer: nothing to wait for, nothing known
        deadline = time.monotonic() + self.config.cache_sync_wait
        fresh = jobs.wait_for(now, self.config.cache_sync_wait)
        pods.wait_for(now, max(0.0, deadline - time.monotonic()))
        return jobs, pods, fresh

    def _known_jobs(self, jobs: list[JobView], cached: dict[str, dict[str, Any]],
                    cache_rv: int, fresh: bool) -> dict[str, dict[str, Any]]:
        """Return `cached` plus the Jobs of `jobs` the Jobs cache lacks but that exist.

        A cache that trails the API server (a silent watch, a failing or slow re-LIST) lacks
        the Jobs created since; absent from it is not absent from the cluster. A Job is
        concluded missing only from a cache known to be at least as new as the Job, or from
        a direct read (client-go's rule: act on what is known):

        - a Job this process created, adopted or read directly (`_known`) is present, as the
          API server answered then, until the cache shows it or has passed its
          resourceVersion (integers only), or `EXPECTATION_TIMEOUT` passed;
        - any other Job the cache lacks, of a Falcon job that recorded a cluster job (the
          ones the resource manager would fail `ClusterJobMissing`), is read directly when
          the cache is not `fresh`: one GET each, one LIST past `DIRECT_READ_GETS`; a Job
          found is learnt (`_known`), a 404 is missing. A Falcon job with no recorded cluster
          job needs no read: its "missing" only leads to an idempotent create (CB-3).

        Args:
            jobs: the Falcon jobs observed this tick.
            cached: the Jobs cache's content by name (a copy; extended in place).
            cache_rv: the cache's resourceVersion.
            fresh: whether the cache reached the resourceVersion of this tick's probe.

        Raises:
            BackendError: a direct read failed: nothing is concluded this tick.
        """
        now = self._clock()
        self._known = {name: known for name, known in self._known.items()
                       if name not in cached and now - known.since <= EXPECTATION_TIMEOUT
                       and (known.rv is None or cache_rv < known.rv)}
        if fresh and not self._known:
            return cached  # the steady state: the cache is the truth, nothing to add
        unknown = []
        for job in jobs:
            name = self.name_of(job)
            if name in cached:
                continue
            if name in self._known:
                cached[name] = self._known[name].obj
            elif job.cluster_job_name and not fresh:
                unknown.append(name)
        if unknown:
            found = self._read_directly(unknown)
            for name, obj in found.items():
                self._learn(name, obj)
            cached.update(found)
            log.info("cluster %s: the Jobs cache lags (resourceVersion %s); read %d Job(s) "
                     "directly, %d exist", self.cluster_name, cache_rv, len(unknown),
                     len(found))
        return cached

    def _read_directly(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """Read the named Jobs from the API server, not the cache; return those that exist.

        One GET each (a 404 is a Job that does not exist), or one paged LIST of every Falcon
        Job past `DIRECT_READ_GETS` names.

        Raises:
            BackendError: a read failed after its retries.
        """
        ns = self.config.namespace
        if len(names) > DIRECT_READ_GETS:
            wanted = set(names)
            return {j.raw["metadata"]["name"]: j.raw
                    for j in self._list_raw(self.batch.list_namespaced_job, "Jobs")
                    if j.raw["metadata"]["name"] in wanted}
        found: dict[str, dict[str, Any]] = {}
        for name in names:
            try:
                resp = self.caller.call(self.batch.read_namespaced_job, name, ns,
                                        _preload_content=False)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise self._fail(f"read Job {name}", exc) from exc
            except urllib3.exceptions.HTTPError as exc:
                raise self._fail(f"read Job {name}", exc) from exc
            try:
                found[name] = json.loads(resp.data)
            finally:
                resp.release_conn()
        return found

    def _pods_of(self, names: set[str]) -> dict[str, list[Raw]]:
        """LIST the Pods of the named Jobs only, by label selector (no cache)."""
        by_job: dict[str, list[Raw]] = defaultdict(list)
        if not names:
            return by_job
        if len(names) > POD_SELECTOR_NAMES:
            pods = self._list_raw(self.core.list_namespaced_pod, "Pods")
        else:
            selector = f"{SELECTOR},{POD_JOB_NAME_LABEL} in ({','.join(sorted(names))})"
            try:
                items, _rv = list_all_raw(self.caller, self.core.list_namespaced_pod,
                                          self.config.namespace, label_selector=selector,
                                          page_size=self.config.list_page_size)
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                raise self._fail("list Pods", exc) from exc
            pods = [Raw(p) for p in items]
        for pod in pods:
            owner = (pod.metadata.labels or {}).get(POD_JOB_NAME_LABEL)
            if owner in names:
                by_job[owner].append(pod)
        return by_job

    def _filled_caches(self) -> tuple[Informer, Informer]:
        """The caches once filled, without waiting for the current resourceVersion (the sweep
        runs after `observe` caught them up in the same tick; a change it misses is seen by
        the next tick)."""
        jobs, pods = self._informers()
        wait = self.config.connection.request_timeout * (self.config.connection.retries + 1)
        for cache in (jobs, pods):
            if not cache.wait_synced(wait):
                raise BackendError(f"cluster {self.cluster_name}: the {cache.what} cache is not "
                                   f"filled yet ({cache.last_error or 'listing'})")
        return jobs, pods

    def cluster_jobs(self) -> dict[str, dict[str, Any]]:
        """Return the Falcon-labelled Jobs as decoded JSON by name (cache or one LIST)."""
        if self.config.watch:
            return self._filled_caches()[0].items()
        return {j.raw["metadata"]["name"]: j.raw
                for j in self._list_raw(self.batch.list_namespaced_job, "Jobs")}

    def observe(self, jobs: list[JobView]) -> dict[int, ClusterJobState]:
        """Return each job's state from the Jobs cache (with `watch`) or ONE paged LIST.

        Pods are read only for Jobs that need them (not yet running, failed, losing
        replicas): from the Pods cache, or without `watch` by a LIST whose label selector
        names those Jobs (every Falcon Pod when more than `POD_SELECTOR_NAMES` need them).
        Items are decoded JSON read through `Raw`, never client models. A Job found by name
        but labelled for another Falcon job counts as missing for this one. A Job the cache
        lacks is Missing only when the cache caught up with it or a direct read found none
        (`_known_jobs`): a lagging watch never reports a Job missing that exists.

        `job_state` is pure, so a Job whose object and Pods did not change since the last
        tick (the same resourceVersions, the same Pods) keeps the state mapped then: a tick
        maps only what changed, and 10,000 Jobs pending for minutes cost a lookup each. An
        object without a resourceVersion is always mapped again.

        Raises:
            BackendError: a LIST or a direct read failed after its retries; no partial answer
                is given.
        """
        if not jobs:
            return {}
        pod_cache = None
        if self.config.watch:
            job_cache, pod_cache, fresh = self._synced_caches()
            cache_rv = job_cache.resource_version  # read before the items: never newer
            by_name = self._known_jobs(jobs, job_cache.items(), cache_rv, fresh)
        else:
            by_name = {j.raw["metadata"]["name"]: j.raw
                       for j in self._list_raw(self.batch.list_namespaced_job, "Jobs")}
        found: dict[int, tuple[str, Raw | None, int]] = {}
        need_pods: set[str] = set()
        states: dict[int, ClusterJobState] = {}
        memo: dict[tuple, ClusterJobState] = {}
        needs: dict[tuple[str, str, int, str], int] = {}
        for job in jobs:
            name = self.name_of(job)
            raw = by_name.get(name)
            image = job.task_spec.get("image", "")
            key = None
            if raw is not None and raw["metadata"].get("resourceVersion"):
                # A Job whose object did not change since the last tick, and that needed no
                # Pods then, maps to the same state: a steady tick reads 10,000 of them.
                key = (name, raw["metadata"]["resourceVersion"], job.id, image)
                known = self._states.get(key)
                if known is not None:
                    states[job.id] = memo[key] = known
                    continue
                total = self._needs_pods.get(key)
                if total is not None:  # unchanged, and it needed its Pods: only they may differ
                    found[job.id] = (name, Raw(raw), total, key)
                    need_pods.add(name)
                    needs[key] = total
                    continue
            k8s_job = Raw(raw) if raw is not None else None
            if k8s_job is not None and _int_label(k8s_job.metadata.labels,
                                                  LABEL_JOB_ID) != job.id:
                k8s_job = None
            total = (k8s_job.spec.completions or 1) if k8s_job is not None else 0
            found[job.id] = (name, k8s_job, total, key if k8s_job is not None else None)
            if (k8s_job is not None and not _condition(k8s_job, CONDITION_COMPLETE)
                    and not all_ready(k8s_job, total)):
                need_pods.add(name)  # Pending, failed or losing replicas: the Pods say why
                if key is not None:
                    needs[key] = total
            elif raw is not None and k8s_job is not None:
                states[job.id] = state = job_state(name, k8s_job, [], pods_total=total,
                                                   image=image)
                if key is not None:
                    memo[key] = state
        if pod_cache is not None and need_pods:
            pods_by_job: dict[str, list[Raw]] = defaultdict(list)
            for pod in pod_cache.items().values():
                owner = ((pod.get("metadata") or {}).get("labels") or {}).get(POD_JOB_NAME_LABEL)
                if owner in need_pods:
                    pods_by_job[owner].append(Raw(pod))
        else:
            pods_by_job = self._pods_of(need_pods)
        for job in jobs:
            if job.id in states:
                continue
            name, k8s_job, total, key = found[job.id]
            pods = pods_by_job.get(name, [])
            if key is not None:
                # The Job's key with its Pods' names and resourceVersions: unchanged, the same
                # state (a Pod added, removed or changed is a new key).
                versions = tuple(sorted(((p.raw.get("metadata") or {}).get("name") or "",
                                         (p.raw.get("metadata") or {}).get("resourceVersion")
                                         or "") for p in pods))
                key = None if any(not rv for _n, rv in versions) else (*key, versions)
            known = self._states.get(key) if key is not None else None
            state = known or job_state(name, k8s_job, pods, pods_total=total,
                                       image=job.task_spec.get("image", ""))
            states[job.id] = state
            if key is not None:
                memo[key] = state
        # Only the states of this tick's Jobs are kept: the next tick may reuse them.
        self._states, self._needs_pods = memo, needs
        return states

    # -- writing --------------------------------------------------------------------------------

    def _read_job_raw(self, name: str) -> dict[str, Any]:
        """GET Job `name` as decoded JSON (raises the client's errors as they come)."""
        resp = self.caller.call(self.batch.read_namespaced_job, name, self.config.namespace,
                                _preload_content=False)
        try:
            return json.loads(resp.data)
        finally:
            resp.release_conn()

    def _drop_finalizer(self, name: str, obj: Mapping[str, Any] | None = None) -> bool:
        """Remove Falcon's finalizer from Job `name`. Return True when done.

        A JSON Patch whose `test` checks the list entry first: a list changed since `obj`
        was read (a cache behind the server, another controller's finalizer) answers 422,
        and the Job is read again and patched once more from what the server holds. A Job
        whose cached copy is the one this backend already released is not patched again
        (the cache has not seen the patch yet).

        Args:
            name: the Job's name.
            obj: the Job as last read (decoded JSON); read again when None.

        Raises:
            BackendError: the call failed (a 404 counts as done).
        """
        what = f"remove finalizer {FINALIZER} of Job {name}"
        try:
            seen = (obj.get("metadata") or {}).get("resourceVersion") if obj is not None else None
            if seen and name in self._released and self._released[name] == seen:
                return True
            if obj is None:
                obj = self._read_job_raw(name)
            try:
                self._patch_out_finalizer(name, obj)
            except ApiException as exc:
                if exc.status != 422:
                    raise
                self._patch_out_finalizer(name, self._read_job_raw(name))
            return True
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise self._fail(what, exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise self._fail(what, exc) from exc

    def _patch_out_finalizer(self, name: str, obj: Mapping[str, Any]) -> None:
        """One guarded JSON Patch removing `FINALIZER` from `obj`'s list (none when absent)."""
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        path = f"/metadata/finalizers/{finalizers.index(FINALIZER)}"
        self.caller.call(self.batch.patch_namespaced_job, name, self.config.namespace,
                         [{"op": "test", "path": path, "value": FINALIZER},
                          {"op": "remove", "path": path}],
                         _content_type="application/json-patch+json")
        # Only the copy read before the patch is skipped later: any newer one is read as is.
        self._released[name] = meta.get("resourceVersion")

    def held_outcomes(self) -> dict[str, int | None]:
        """Return `{Job name: falcon.io/job-id}` of every Falcon Job holding `FINALIZER`.

        Read from the Jobs cache (with `watch`; filled by a LIST after a start or a 410, so a
        Job seen only through a relist is in it) or one paged LIST; a Job being deleted is
        included (the finalizer is what keeps it). The id is None when the label is not an
        integer.

        Raises:
            BackendError: the LIST failed, or the cache is not filled yet.
        """
        held = {}
        for name, obj in self.cluster_jobs().items():
            meta = obj.get("metadata") or {}
            if FINALIZER in (meta.get("finalizers") or []):
                held[name] = _int_label(meta.get("labels"), LABEL_JOB_ID)
        # Names no longer listed cannot be met again with the same resourceVersion.
        self._released = {n: rv for n, rv in self._released.items() if n in held}
        return held

    def release_outcomes(self, names: list[str]) -> ReleaseResult:
        """Remove Falcon's finalizer from the named Jobs: their outcomes are recorded.

        Each Job is patched on its own (`_drop_finalizer`); one that fails is reported and
        the others go on (the next tick retries it). A Job being deleted is removed by
        Kubernetes once released (CB-19).

        Args:
            names: Job names, as `held_outcomes` returned them.

        Returns:
            The names released and, by name, why the others were not.
        """
        result = ReleaseResult()
        jobs = self.cluster_jobs()
        for name in names:
            try:
                self._drop_finalizer(name, jobs.get(name))
            except BackendError as exc:
                result.failed[name] = str(exc)
                continue
            result.released.append(name)
        return result

    def sweep(self, open_job_ids: set[int], *, grace: float) -> SweepResult:
        """Release the outcome of finished Falcon jobs and remove what no open job owns.

        For every Falcon-labelled Job whose `falcon.io/job-id` is not in `open_job_ids` (its
        Falcon job is terminal, or unknown: deleted, or made by a Lease holder that lost its
        Lease while its create was in flight), created more than `grace` seconds ago:
        Falcon's finalizer is removed (the outcome is recorded, or nobody will record one),
        and a Job that has not finished is deleted with its Pods. A finished Job is left to
        its `ttlSecondsAfterFinished`, with its Pods' exit codes and output. Pods of Falcon
        whose Job is gone and whose Falcon job is not open are deleted too (left by an
        orphaning delete); a Job the Jobs cache lacks is read directly first, so a cache that
        trails the Pods cache never deletes the Pods of a Job that exists. Every removal is
        logged. The grace is measured from each object's `creationTimestamp` (the API
        server's stamp), not from when this process first saw it: a Job seen late through a
        lagging watch is as old as the server says.

        Args:
            open_job_ids: ids of the Falcon jobs of this cluster that are not terminal
                (Pending, Running, Aborting), including rows the list call could not read.
            grace: seconds; objects younger than this are spared (a create racing the list
                of open jobs).

        Returns:
            What was released, deleted and is still terminating.

        Raises:
            BackendError: a call failed; the next tick continues where this one stopped.
        """
        result = SweepResult()
        now = datetime.now(timezone.utc)
        jobs = self.cluster_jobs()
        ns = self.config.namespace
        options = client.V1DeleteOptions(propagation_policy=self.config.propagation_policy)
        for name, obj in sorted(jobs.items()):
            meta = obj.get("metadata") or {}
            job_id = _int_label(meta.get("labels"), LABEL_JOB_ID)
            if job_id in open_job_ids or _age(meta, now) < grace:
                continue
            if FINALIZER in (meta.get("finalizers") or []):
                self._drop_finalizer(name, obj)
                result.released.append(name)
            raw = Raw(obj)
            finished = _condition(raw, CONDITION_COMPLETE) or _condition(raw, CONDITION_FAILED)
            if meta.get("deletionTimestamp"):
                result.terminating.append(name)
            elif not finished:
                try:
                    self.caller.call(self.batch.delete_namespaced_job, name, ns, body=options)
                except ApiException as exc:
                    if exc.status != 404:
                        raise self._fail(f"delete orphan Job {name}", exc) from exc
                except urllib3.exceptions.HTTPError as exc:
                    raise self._fail(f"delete orphan Job {name}", exc) from exc
                result.deleted.append(name)
                log.warning("cluster %s: deleted Job %s/%s: its falcon job %s is terminal or "
                            "unknown", self.cluster_name, ns, name, job_id,
                            extra=_label_ids(meta.get("labels")))
        pods = (self._filled_caches()[1].items() if self.config.watch else
                {p.raw["metadata"]["name"]: p.raw
                 for p in self._list_raw(self.core.list_namespaced_pod, "Pods")})
        # "Its Job is gone" is read from the Jobs cache, which may trail the Pods cache: a Job
        # it lacks is read directly before its Pods are deleted (a finished Job keeps its
        # Pods, and their exit codes, until its TTL).
        candidates = {name: obj for name, obj in pods.items()
                      if not (((obj.get("metadata") or {}).get("labels") or {}).get(
                          POD_JOB_NAME_LABEL) in jobs
                          or _int_label((obj.get("metadata") or {}).get("labels"),
                                        LABEL_JOB_ID) in open_job_ids
                          or _age(obj.get("metadata") or {}, now) < grace)}
        owners = {((obj.get("metadata") or {}).get("labels") or {}).get(POD_JOB_NAME_LABEL)
                  for obj in candidates.values()} - {None}
        existing = set(self._known) & owners
        if self.config.watch and owners - existing:
            existing |= set(self._read_directly(sorted(owners - existing)))
        for name, obj in sorted(candidates.items()):
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            if labels.get(POD_JOB_NAME_LABEL) in existing:
                continue
            if meta.get("deletionTimestamp"):
                result.terminating.append(name)
                continue
            try:
                self.caller.call(self.core.delete_namespaced_pod, name, ns)
            except ApiException as exc:
                if exc.status != 404:
                    raise self._fail(f"delete orphan Pod {name}", exc) from exc
            except urllib3.exceptions.HTTPError as exc:
                raise self._fail(f"delete orphan Pod {name}", exc) from exc
            result.deleted.append(name)
            log.warning("cluster %s: deleted Pod %s/%s: its Job is gone and its falcon job %s "
                        "is terminal or unknown", self.cluster_name, ns, name,
                        labels.get(LABEL_JOB_ID), extra=_label_ids(labels))
        return result

    def delete(self, job: JobView) -> bool:
        """Delete the Job with `propagationPolicy` Foreground/Background and report when gone.

        Returns True only when the Job no longer exists AND no Pod of it is left (CB-13); a Job
        already gone counts as deleted (CB-14). Pods left behind by an earlier orphaning delete
        (`kubectl delete --cascade=orphan`, or an API delete without a policy) are deleted
        here too.

        Raises:
            BackendError: an API call failed after its retries.
        """
        name = self.name_of(job)
        ns = self.config.namespace
        options = client.V1DeleteOptions(propagation_policy=self.config.propagation_policy)
        job_gone = False
        self._known.pop(name, None)  # deleted on purpose: no longer expected
        try:
            self.caller.call(self.batch.delete_namespaced_job, name, ns, body=options)
        except ApiException as exc:
            if exc.status != 404:
                raise self._fail(f"delete Job {name}", exc) from exc
            job_gone = True
        except urllib3.exceptions.HTTPError as exc:
            raise self._fail(f"delete Job {name}", exc) from exc
        if not job_gone:
            # Deleting on purpose (an abort, a timeout): no outcome is awaited, so Falcon's
            # finalizer goes too, or the Job would stay Terminating for ever.
            self._drop_finalizer(name)
        try:
            if not job_gone:
                # With Foreground the Job stays (deletionTimestamp set) until its Pods are gone.
                try:
                    self.caller.call(self.batch.read_namespaced_job, name, ns)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    job_gone = True
            pods = self.caller.call(self.core.list_namespaced_pod, ns,
                                    label_selector=f"{POD_JOB_NAME_LABEL}={name}").items or []
            for pod in pods:
                if pod.metadata.deletion_timestamp is None and job_gone:
                    try:
                        self.caller.call(self.core.delete_namespaced_pod, pod.metadata.name, ns)
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise self._fail(f"finish deleting Job {name}", exc) from exc
        if pods:
            log.info("Job %s/%s: %d pod(s) still terminating", ns, name, len(pods))
        return job_gone and not pods

    def validate(self, task_spec: dict[str, Any]) -> dict[str, list[str]]:
        """Return what this cluster cannot run in a TaskSpec, keyed by TaskSpec field.

        The same rules the API server applies at CreateExp
        (`clusters.validation.kubernetes_task_spec_problems`).
        """
        return kubernetes_task_spec_problems(self.cluster_name, self.config.devices, task_spec)
