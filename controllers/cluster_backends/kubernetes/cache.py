"""What the Kubernetes backend keeps between its calls, and how lean (pure, no I/O).

The caches keep of Jobs and Pods only the fields something reads (`lean_job`, `lean_pod`); a
Job learnt from a direct answer of the API server is `Known` until the Jobs cache catches up;
the `observe` calls of one pass share an `ObservePass`.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from controllers.cluster_backends.base import ClusterJobState
from controllers.cluster_backends.kubernetes.vocabulary import (
    CONDITION_DISRUPTION_TARGET,
    CONDITION_FALSE,
    CONDITION_POD_SCHEDULED,
    CONDITION_READY,
    CONDITION_TRUE,
    JOB_CONDITIONS_READ,
    LABEL_EXP_ID,
    LABEL_JOB_ID,
    POD_COMPLETION_INDEX,
    POD_JOB_NAME_LABEL,
)
from controllers.kubeclient import Informer


@dataclass
class Known:
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


def int_rv(obj: Mapping[str, Any]) -> int | None:
    """An object's `metadata.resourceVersion` as an integer (None when it is not one)."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def status_message(exc: ApiException) -> str:
    """Return the `message` of the `meta/v1 Status` body of an API error ("" when absent)."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return ""
    return str(body.get("message") or "") if isinstance(body, dict) else ""


class _Each:
    """A list kept element by element through `spec`, without the elements `read` says no
    reader looks at; a list left empty is left out (every reader takes a missing list as an
    empty one: `... or []`)."""

    __slots__ = ("read", "spec")

    def __init__(self, spec: Any, read: Callable[[Any], bool] | None = None):
        self.spec = spec
        self.read = read


class _Once:
    """A mapping or list of plain values (strings, numbers, booleans) kept through `spec`, once
    for every object holding an equal one: a Ready condition, a Job's `spec`, its finalizers
    are one dict or list each in the cache however many objects carry them (about 200 bytes
    each saved per object). Nothing writes to a cached object (the caches replace objects
    whole), so sharing is not seen by a reader; one holding a nested list or mapping is kept
    as its own."""

    __slots__ = ("spec",)

    def __init__(self, spec: Any):
        self.spec = spec


# Leaves of a projection: the value as the API server sent it, or (SHARE) the same with a
# string interned (`sys.intern`), so that the values 100,000 objects repeat (a phase, a
# condition's type and status, a label value, a name a Job and its Pods both carry, a
# creation second) are one string each instead of one per object.
KEEP = "keep"
SHARE = "share"
_DROP = object()
# The `_Once` values seen, by content (each value's type with it: `1` is not `True`), at most
# `_ONCE_MAX` of them: past it the table starts over (what is cached keeps its objects).
_ONCE: dict[tuple, Any] = {}
_ONCE_MAX = 8192


def _once(kept: Any) -> Any:
    """The one object equal to `kept` (a projected mapping or list), `kept` when the first."""
    if isinstance(kept, dict):
        key = (dict, *((k, type(v), v) for k, v in kept.items()))
    elif isinstance(kept, list):
        key = (list, *((type(v), v) for v in kept))
    else:
        return kept
    try:
        found = _ONCE.get(key)
    except TypeError:  # a nested list or mapping: not hashable, kept as its own
        return kept
    if found is None:
        if len(_ONCE) >= _ONCE_MAX:
            _ONCE.clear()
        _ONCE[key] = found = kept
    return found


def project(value: Any, spec: Any) -> Any:
    """Return what `spec` keeps of `value` (decoded JSON), in the same shape.

    `spec` is KEEP or SHARE (a leaf), a dict (the keys kept of a mapping, each through its
    own spec; keys absent stay absent), an `_Each` (a list) or a `_Once`. A value that is not
    of the shape its spec expects is kept whole: its readers meet it as they would have.
    """
    if spec is KEEP:
        return value
    if spec is SHARE:
        return sys.intern(value) if type(value) is str else value
    if isinstance(spec, _Once):
        kept = project(value, spec.spec)
        return kept if kept is _DROP else _once(kept)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return value
        out = {}
        for key, sub in spec.items():
            if key in value:
                kept = project(value[key], sub)
                if kept is not _DROP:
                    out[key] = kept
        return out
    if not isinstance(value, list):
        return value
    items = [project(item, spec.spec) for item in value if spec.read is None or spec.read(item)]
    return items if items else _DROP


def _true_condition_of(types: frozenset[str]) -> Callable[[Any], bool]:
    """Whether a condition is one its readers act on: `status: "True"` and a type of `types`
    (`state.condition` and `pod_end` match both before reading one)."""
    return lambda cond: (not isinstance(cond, dict)
                         or (cond.get("type") in types and cond.get("status") == CONDITION_TRUE))


def _pod_condition_read(cond: Any) -> bool:
    """Whether a Pod condition is one `state.py` reads: `Ready=True` (`running_pods`),
    `PodScheduled=False` (`pending_reasons`), `DisruptionTarget=True` (`pod_end`)."""
    return not isinstance(cond, dict) or (cond.get("type"), cond.get("status")) in (
        (CONDITION_READY, CONDITION_TRUE), (CONDITION_POD_SCHEDULED, CONDITION_FALSE),
        (CONDITION_DISRUPTION_TARGET, CONDITION_TRUE))


def _container_read(status: Any) -> bool:
    """Whether a container status says anything `state.py` reads: a `state.waiting`
    (`pending_reasons`), a `state.terminated` or `lastState.terminated` (`failure_details`);
    a running container's status is read for nothing else."""
    if not isinstance(status, dict):
        return True
    state, last = status.get("state"), status.get("lastState")
    return ((state is not None and (not isinstance(state, dict) or state.get("waiting") is not None
                                    or state.get("terminated") is not None))
            or (last is not None and (not isinstance(last, dict)
                                      or last.get("terminated") is not None)))


_CONDITION = _Once({"type": SHARE, "status": SHARE, "reason": SHARE, "message": SHARE})
_TERMINATED = _Once({"exitCode": KEEP, "reason": SHARE, "message": SHARE})
_CONTAINER = {"name": SHARE,
              "state": {"waiting": _Once({"reason": SHARE, "message": SHARE}),
                        "terminated": _TERMINATED},
              "lastState": {"terminated": _TERMINATED}}
# A Job's name is shared (its Pods' label and the states kept between ticks carry it too),
# a Pod's is its own; a resourceVersion is new with every change.
_METADATA = {"resourceVersion": KEEP, "creationTimestamp": SHARE, "deletionTimestamp": SHARE}

# What the Jobs cache keeps of a Job, and who reads it: `metadata.name` (the cache's key),
# `resourceVersion` (`observe`'s memo, the finalizer's release), `creationTimestamp` (the
# sweep's grace), `deletionTimestamp` (`_deleted_state`, the sweep), `finalizers` in their
# order (`held_outcomes`, the JSON Patch that removes Falcon's by its index), the Falcon ids'
# labels (`observe`, `held_outcomes`, the sweep and its log line); `spec.completions` and
# `spec.suspend`; of the status the counts `ready`, `succeeded`, `terminating` (`all_ready`),
# `startTime` (`start_time`) and the conditions `condition()` matches (type and True).
JOB_FIELDS = {
    "metadata": {"name": SHARE, **_METADATA, "finalizers": _Once(_Each(SHARE)),
                 "labels": {LABEL_JOB_ID: SHARE, LABEL_EXP_ID: SHARE}},
    "spec": _Once({"completions": KEEP, "suspend": KEEP}),
    "status": _Once({"conditions": _Each(_CONDITION, _true_condition_of(JOB_CONDITIONS_READ)),
                     "ready": KEEP, "succeeded": KEEP, "terminating": KEEP,
                     "startTime": SHARE}),
}
# What the Pods cache keeps of a Pod, and who reads it: `metadata` as a Job's, with the
# labels naming its Job (`observe`'s index by owner, the sweep), the Falcon ids (the sweep)
# and the completion index (`_pod_index`; the annotation only where the label lacks it);
# of the status the phase, the kubelet's `reason` and `message` (`pod_end`, a Terminating
# Pod's phrase), the conditions and container statuses above. Never the spec.
POD_FIELDS = {
    "metadata": {"name": KEEP, **_METADATA,
                 "labels": {POD_JOB_NAME_LABEL: SHARE, LABEL_JOB_ID: SHARE,
                            LABEL_EXP_ID: SHARE, POD_COMPLETION_INDEX: SHARE},
                 "annotations": {POD_COMPLETION_INDEX: SHARE}},
    "status": {"phase": SHARE, "reason": SHARE, "message": SHARE,
               "conditions": _Each(_CONDITION, _pod_condition_read),
               "containerStatuses": _Each(_CONTAINER, _container_read),
               "initContainerStatuses": _Each(_CONTAINER, _container_read)},
}


def lean_job(obj: dict[str, Any]) -> dict[str, Any]:
    """What the Jobs cache keeps of a Job: the fields of `JOB_FIELDS`, as decoded JSON of the
    same shape (every reader reads it as it read the whole Job; a submit reads the Job from
    the API server, never from here)."""
    return project(obj, JOB_FIELDS)


def lean_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """What the Pods cache keeps of a Pod: the fields of `POD_FIELDS`, as decoded JSON of the
    same shape, never the spec (deleting Pods lists them from the API server, not here)."""
    lean = project(obj, POD_FIELDS)
    meta = lean.get("metadata")
    if isinstance(meta, dict) and "annotations" in meta and \
            (meta.get("labels") or {}).get(POD_COMPLETION_INDEX):
        del meta["annotations"]  # `_pod_index` reads the annotation only without the label
    return lean


@dataclass
class ObservePass:
    """What the `observe` calls of one pass share (`KubernetesBackend.begin_observe_pass`).

    Attributes:
        by_name: the cluster's Jobs by name (a copy of the cache, or one LIST), None until the
            first `observe`; pod_cache: the Pods cache (with `watch`); cache_rv, fresh: the
            Jobs cache's resourceVersion and whether it caught up (`_synced_caches`);
        pods_by_owner: the Pods cache's items by their Job's name, built when first needed;
        memo, needs: the states mapped and the Jobs that needed their Pods (see `observe`).
    """

    by_name: dict[str, dict[str, Any]] | None = None
    pod_cache: Informer | None = None
    cache_rv: int = 0
    fresh: bool = False
    pods_by_owner: dict[str, list[dict[str, Any]]] | None = None
    memo: dict[tuple, ClusterJobState] = field(default_factory=dict)
    needs: dict[tuple[str, str, int, str], int] = field(default_factory=dict)
