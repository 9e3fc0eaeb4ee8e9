"""The clusters Falcon knows and the backend of each: the clusters file (`FALCON_CLUSTERS_FILE`).

The file is YAML; the API server (CreateExp refuses unknown clusters and asks the cluster's
backend to validate each TaskSpec) and the resource manager (which serves some or all of the
clusters) read the same file::

    clusters:
      local:                       # the embedded default: replicas as local processes
        backend: local
        state_dir: /var/lib/falcon/local-cluster   # optional
      tpu-v5p-a:
        backend: kubernetes
        namespace: falcon-jobs     # required: where Jobs, Pods and Services go
        in_cluster: true           # or kubeconfig: /etc/falcon/kubeconfig + context: NAME
        backoff_limit: 0           # optional Job settings, see KubernetesClusterConfig
        ttl_seconds_after_finished: 86400
        qps: 50                    # optional client limits, see kubeclient.KubeConnection
        devices: {}                # optional: device types for this cluster only
    devices: {}                    # optional: device types for every kubernetes cluster

Without `FALCON_CLUSTERS_FILE`, the embedded default `settings.FALCON_CLUSTERS` applies: one
cluster `local` on the local backend (architecture page, "Embedded defaults").

The file is read again when its modification time changes, so an operator who mounts it from
a ConfigMap does not restart the API server to add a cluster.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .cluster_backends.base import ClusterBackend

BACKENDS = ("local", "kubernetes")
_LOCAL_KEYS = {"backend", "state_dir"}
_CONNECTION_KEYS = {"kubeconfig", "context", "in_cluster", "qps", "burst", "connect_timeout",
                    "request_timeout", "retries", "backoff_initial", "backoff_max"}
_K8S_INT_KEYS = {"backoff_limit": 0, "ttl_seconds_after_finished": 0,
                 "active_deadline_seconds": 1, "termination_grace_period_seconds": 0,
                 "list_page_size": 1}
_K8S_KEYS = ({"backend", "namespace", "propagation_policy", "service_account",
              "image_pull_secrets", "node_selector", "devices"}
             | _CONNECTION_KEYS | set(_K8S_INT_KEYS))

_cache_lock = threading.Lock()
_cache: dict[tuple, dict[str, dict[str, Any]]] = {}
_validators: dict[tuple, dict[str, ClusterBackend | None]] = {}


def _file_key() -> tuple | None:
    path = getattr(settings, "FALCON_CLUSTERS_FILE", "") or ""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ImproperlyConfigured(f"FALCON_CLUSTERS_FILE={path!r} cannot be read: {exc}")
    return (str(path), st.st_mtime_ns, st.st_size)


def _check_cluster(name: str, raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"{where}: must be a mapping with at least `backend`")
    kind = raw.get("backend")
    if kind not in BACKENDS:
        raise ImproperlyConfigured(f"{where}.backend: {kind!r} is not supported; use one of "
                                   f"{', '.join(BACKENDS)}")
    allowed = _LOCAL_KEYS if kind == "local" else _K8S_KEYS
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ImproperlyConfigured(f"{where}: unknown keys {unknown} for backend {kind}; "
                                   f"allowed: {sorted(allowed)}")
    if kind == "kubernetes":
        ns = raw.get("namespace")
        if not isinstance(ns, str) or not ns:
            raise ImproperlyConfigured(f"{where}.namespace: required for a kubernetes cluster")
    return dict(raw)


def parse_clusters(text: str, *, source: str = "clusters file") -> dict[str, dict[str, Any]]:
    """Parse a clusters file and return `{cluster_name: entry}` with top-level `devices` merged.

    Each kubernetes entry gets `devices` = the top-level entries updated by its own.

    Raises:
        ImproperlyConfigured: the YAML is invalid, `clusters` is missing or empty, or an entry
            is malformed; the message names `source` and the key.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ImproperlyConfigured(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("clusters"), Mapping) \
            or not data["clusters"]:
        raise ImproperlyConfigured(f"{source}: needs a non-empty `clusters:` mapping of "
                                   "cluster_name to backend settings")
    unknown = sorted(set(data) - {"clusters", "devices"})
    if unknown:
        raise ImproperlyConfigured(f"{source}: unknown top-level keys {unknown}")
    shared_devices = data.get("devices") or {}
    if not isinstance(shared_devices, Mapping):
        raise ImproperlyConfigured(f"{source}: devices must be a mapping")
    out: dict[str, dict[str, Any]] = {}
    for name, raw in data["clusters"].items():
        entry = _check_cluster(str(name), raw, f"{source}: clusters.{name}")
        if entry["backend"] == "kubernetes":
            entry["devices"] = {**shared_devices, **(entry.get("devices") or {})}
        out[str(name)] = entry
    return out


def cluster_specs() -> dict[str, dict[str, Any]]:
    """Return `{cluster_name: entry}` from `FALCON_CLUSTERS_FILE`, else the embedded default.

    Raises:
        ImproperlyConfigured: the file cannot be read or is malformed.
    """
    key = _file_key()
    if key is None:
        return {str(k): dict(v) for k, v in settings.FALCON_CLUSTERS.items()}
    with _cache_lock:
        if key not in _cache:
            text = Path(key[0]).read_text(encoding="utf-8")
            _cache.clear()
            _validators.clear()
            _cache[key] = parse_clusters(text, source=key[0])
        return _cache[key]


def known_clusters() -> list[str]:
    """Return the configured cluster names, sorted."""
    return sorted(cluster_specs())


def kubernetes_config(name: str, entry: Mapping[str, Any]):
    """Build the `KubernetesClusterConfig` of a kubernetes entry of the clusters file.

    Raises:
        ImproperlyConfigured: a value has the wrong type or a device entry is malformed.
    """
    from clusters.devices import DeviceConfigError, DeviceTable
    from .cluster_backends.kubernetes import PROPAGATION_POLICIES, KubernetesClusterConfig
    from .kubeclient import KubeConnection

    where = f"clusters.{name}"
    try:
        connection = KubeConnection.from_mapping(
            {k: v for k, v in entry.items() if k in _CONNECTION_KEYS}, where=where)
        devices = DeviceTable(entry.get("devices") or {})
    except (ValueError, DeviceConfigError) as exc:
        raise ImproperlyConfigured(str(exc)) from exc
    values: dict[str, Any] = {"namespace": entry["namespace"], "connection": connection,
                              "devices": devices}
    for key, minimum in _K8S_INT_KEYS.items():
        if entry.get(key) is not None:
            value = entry[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ImproperlyConfigured(f"{where}.{key}: must be an integer >= {minimum}")
            values[key] = value
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
        from .cluster_backends.local import LocalBackend

        return LocalBackend(Path(entry.get("state_dir") or
                                 settings.VAR_DIR / "local-cluster" / name))
    if kind == "kubernetes":
        from .cluster_backends.kubernetes import KubernetesBackend

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


def _validator(name: str, entry: Mapping[str, Any]) -> ClusterBackend | None:
    """Return the backend that validates TaskSpecs of `name`; None for local clusters.

    A local cluster accepts any TaskSpec that passed the shape rules (it ignores image and
    device fields: `LocalBackend.validate` returns {}), so the API server does not build one
    (which would create its state directory on the API server's disk).
    """
    if entry.get("backend") == "local":
        return None
    key = _file_key()
    with _cache_lock:
        per_file = _validators.setdefault(key, {})
        if name not in per_file:
            per_file[name] = build_backend(name, entry)
        return per_file[name]


def cluster_problems(cluster_name: str,
                     role_to_task_spec: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Return CreateExp errors for the cluster and each role's TaskSpec on it ({} = valid).

    Keys: `cluster_name` when the cluster is unknown (the message lists the known clusters),
    else `role_to_task_spec.<role>.<field>` from the cluster backend's `validate`.

    Raises:
        ImproperlyConfigured: the clusters file is unreadable or malformed (a server error).
    """
    specs = cluster_specs()
    if cluster_name not in specs:
        return {"cluster_name": [f"{cluster_name!r} is not a configured cluster; known "
                                 f"clusters: {', '.join(sorted(specs))}."]}
    backend = _validator(cluster_name, specs[cluster_name])
    if backend is None:
        return {}
    errors: dict[str, list[str]] = {}
    for role, spec in role_to_task_spec.items():
        for fld, messages in backend.validate(dict(spec)).items():
            errors.setdefault(f"role_to_task_spec.{role}.{fld}", []).extend(messages)
    return errors
