"""Build the cluster backends of the configured clusters (the resource manager's side).

Which clusters exist and their settings come from `core.cluster_settings` (the clusters file);
this module turns each entry into a `ClusterBackend`. No cluster call is made here.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from clusters.config import BACKENDS, CONNECTION_KEYS, K8S_INT_KEYS
from core.cluster_settings import cluster_specs

from .base import ClusterBackend


def kubernetes_config(name: str, entry: Mapping[str, Any]):
    """Build the `KubernetesClusterConfig` of a kubernetes entry of the clusters file.

    Raises:
        ImproperlyConfigured: a value has the wrong type or a device entry is malformed.
    """
    from clusters.devices import DeviceConfigError, DeviceTable
    from .kubernetes import PROPAGATION_POLICIES, KubernetesClusterConfig
    from controllers.kubeclient import KubeConnection

    where = f"clusters.{name}"
    try:
        connection = KubeConnection.from_mapping(
            {k: v for k, v in entry.items() if k in CONNECTION_KEYS}, where=where)
        devices = DeviceTable(entry.get("devices") or {})
    except (ValueError, DeviceConfigError) as exc:
        raise ImproperlyConfigured(str(exc)) from exc
    values: dict[str, Any] = {"namespace": entry["namespace"], "connection": connection,
                              "devices": devices}
    for key, minimum in K8S_INT_KEYS.items():
        if entry.get(key) is not None:
            value = entry[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ImproperlyConfigured(f"{where}.{key}: must be an integer >= {minimum}")
            values[key] = value
    for key in ("watch", "watch_timeout", "cache_sync_wait", "pod_security", "run_as_user"):
        if entry.get(key) is not None:
            values[key] = entry[key]
    policy = entry.get("propagation_policy")
    if policy is not None:
        if policy not in PROPAGATION_POLICIES:
            raise ImproperlyConfigured(f"{where}.propagation_policy: one of "
                                       f"{PROPAGATION_POLICIES} (Orphan leaves Pods running)")
        values["propagation_policy"] = policy
    if entry.get("service_account"):
        values["service_account"] = str(entry["service_account"])
    secrets = entry.get("image_pull_secrets") or []
    if isinstance(secrets, str) or not isinstance(secrets, list):
        raise ImproperlyConfigured(f"{where}.image_pull_secrets: must be a list of names")
    values["image_pull_secrets"] = tuple(str(s) for s in secrets)
    selector = entry.get("node_selector") or {}
    if not isinstance(selector, Mapping):
        raise ImproperlyConfigured(f"{where}.node_selector: must be a mapping")
    values["node_selector"] = {str(k): str(v) for k, v in selector.items()}
    return KubernetesClusterConfig(**values)


def build_backend(name: str, entry: Mapping[str, Any]) -> ClusterBackend:
    """Return the backend object of one cluster entry (no cluster call is made here).

    Raises:
        ImproperlyConfigured: the entry is malformed.
    """
    kind = entry.get("backend")
    if kind == "local":
        from .local import LocalBackend

        return LocalBackend(Path(entry.get("state_dir") or
                                 settings.VAR_DIR / "local-cluster" / name),
                            max_replicas=settings.FALCON_LOCAL_MAX_REPLICAS,
                            max_replicas_per_user=settings.FALCON_LOCAL_MAX_REPLICAS_PER_USER)
    if kind == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(name, kubernetes_config(name, entry))
    raise ImproperlyConfigured(f"cluster {name!r}: backend {kind!r} is not supported; use "
                               f"one of {', '.join(BACKENDS)}")


def load_backends(names: list[str] | None = None) -> dict[str, ClusterBackend]:
    """Build `{cluster_name: backend}` for the named clusters (all configured ones if None).

    Raises:
        ImproperlyConfigured: a cluster is unknown or its entry is malformed.
    """
    specs = cluster_specs()
    names = names or list(specs)
    backends: dict[str, ClusterBackend] = {}
    for name in names:
        if name not in specs:
            raise ImproperlyConfigured(
                f"cluster {name!r} is not configured; known clusters: {', '.join(sorted(specs))}")
        backends[name] = build_backend(name, specs[name])
    return backends
