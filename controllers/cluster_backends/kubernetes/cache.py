"""What the Kubernetes backend keeps between its calls, and how lean (pure, no I/O).

The caches keep Jobs and Pods without the parts nothing reads (`lean_job`, `lean_pod`); a
Job learnt from a direct answer of the API server is `Known` until the Jobs cache catches up;
the `observe` calls of one pass share an `ObservePass`.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from controllers.cluster_backends.base import ClusterJobState
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


def lean_object(obj: dict[str, Any]) -> dict[str, Any]:
    """What the caches keep of an object: all but `metadata.managedFields` (the API server's
    field ownership, often the largest part of an object, which nothing here reads)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def lean_job(obj: dict[str, Any]) -> dict[str, Any]:
    """What the Jobs cache keeps of a Job: `lean_object`, without `spec.template` (the Pod
    template, two thirds of a Falcon Job: a state is mapped from the Job's status, counts and
    suspension and from its Pods, never from the template; a submit reads the Job from the API
    server)."""
    obj = lean_object(obj)
    spec = obj.get("spec")
    if isinstance(spec, dict) and "template" in spec:
        obj = {**obj, "spec": {k: v for k, v in spec.items() if k != "template"}}
    return obj


def lean_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """What the Pods cache keeps of a Pod: `lean_object`, without `spec` (the containers, their
    environment with the experiment's config, volumes, tolerations: most of a task Pod). A
    Pod's part in a Job's state is read from its metadata and status only (`state.py`);
    deleting Pods lists them from the API server, not from this cache."""
    obj = lean_object(obj)
    if "spec" in obj:
        obj = {k: v for k, v in obj.items() if k != "spec"}
    return obj


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
