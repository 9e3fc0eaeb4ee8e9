"""The clusters file: which clusters Falcon knows and the backend of each (`FALCON_CLUSTERS_FILE`).

The file is YAML. The API server (CreateExp refuses unknown clusters and checks each TaskSpec
against the cluster's rules, `clusters.validation`) and the resource manager (which serves some
or all of the clusters) read the same file::

    clusters:
      local:                       # the embedded default: replicas as local processes
        backend: local
        state_dir: /var/lib/falcon/local-cluster   # optional
      tpu-v5p-a:
        backend: kubernetes
        namespace: falcon-jobs     # required: where Jobs, Pods and Services go
        in_cluster: true           # or kubeconfig: /etc/falcon/kubeconfig + context: NAME
        backoff_limit: 0           # optional Job settings, see KubernetesClusterConfig
        ttl_seconds_after_finished: 86400   # >= 300
        watch: true                # optional: list-then-watch cache of Jobs and Pods
        qps: 50                    # optional client limits, see kubeclient.KubeConnection
        devices: {}                # optional: device types for this cluster only
        pod_security: restricted   # optional: restricted (default), baseline or privileged
        run_as_user: 10001         # optional: the task Pods' uid (default: the image's USER)
    devices: {}                    # optional: device types for every kubernetes cluster

This module imports no Django and opens no cluster connection, so the API server's validation
and the controllers share it. The file is read again when its modification time or size
changes, so an operator who mounts it from a ConfigMap does not restart the API server to add a
cluster.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

BACKENDS = ("local", "kubernetes")
LOCAL_KEYS = frozenset({"backend", "state_dir"})
CONNECTION_KEYS = frozenset({"kubeconfig", "context", "in_cluster", "qps", "burst",
                             "connect_timeout", "request_timeout", "call_deadline", "retries",
                             "backoff_initial",
                             "backoff_max"})
# Integer Job settings of a kubernetes cluster and the smallest value each accepts.
# The shortest `ttl_seconds_after_finished` accepted, seconds. The resource manager records a
# Job's outcome before Kubernetes may remove it (its finalizer holds the Job), but the TTL
# controller deletes the Job's Pods at once, and with them the exit codes and output tails that
# say why a replica failed; a TTL shorter than a resource-manager restart loses those details.
MIN_TTL_SECONDS_AFTER_FINISHED = 300
K8S_INT_KEYS = {"backoff_limit": 0, "ttl_seconds_after_finished": MIN_TTL_SECONDS_AFTER_FINISHED,
                "active_deadline_seconds": 1, "termination_grace_period_seconds": 0,
                "list_page_size": 1}
# The Pod Security Standard level of a cluster's task Pods (`controllers.pod_security`): the
# strictest by default; a cluster whose images run as root, or whose devices need a privileged
# container, relaxes it in its own entry.
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")
K8S_KEYS = (frozenset({"backend", "namespace", "propagation_policy", "service_account",
                       "image_pull_secrets", "node_selector", "devices", "watch",
                       "watch_timeout", "cache_sync_wait", "pod_security", "run_as_user"})
            | CONNECTION_KEYS | frozenset(K8S_INT_KEYS))


class ClusterConfigError(ValueError):
    """The clusters file cannot be read or is malformed; the message names the file and key."""


def _check_cluster(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ClusterConfigError(f"{where}: must be a mapping with at least `backend`")
    kind = raw.get("backend")
    if kind not in BACKENDS:
        raise ClusterConfigError(f"{where}.backend: {kind!r} is not supported; use one of "
                                 f"{', '.join(BACKENDS)}")
    allowed = LOCAL_KEYS if kind == "local" else K8S_KEYS
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ClusterConfigError(f"{where}: unknown keys {unknown} for backend {kind}; "
                                 f"allowed: {sorted(allowed)}")
    if kind == "kubernetes":
        ns = raw.get("namespace")
        if not isinstance(ns, str) or not ns:
            raise ClusterConfigError(f"{where}.namespace: required for a kubernetes cluster")
        ttl = raw.get("ttl_seconds_after_finished")
        if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool)
                                or ttl < MIN_TTL_SECONDS_AFTER_FINISHED):
            raise ClusterConfigError(
                f"{where}.ttl_seconds_after_finished: {ttl!r} is unsafe; use an integer >= "
                f"{MIN_TTL_SECONDS_AFTER_FINISHED} (seconds): Kubernetes deletes a finished "
                "Job's Pods, with the exit codes and output that say why it failed, when the "
                "TTL runs out, possibly before the resource manager read them")
        level = raw.get("pod_security", "restricted")
        if level not in POD_SECURITY_LEVELS:
            raise ClusterConfigError(
                f"{where}.pod_security: {level!r} is not a level; use restricted (the default: "
                "non-root, no capabilities), baseline (images that run as root) or privileged "
                "(devices that need a privileged container)")
        uid = raw.get("run_as_user")
        if uid is not None and (not isinstance(uid, int) or isinstance(uid, bool) or uid < 0):
            raise ClusterConfigError(f"{where}.run_as_user: {uid!r} is not a uid; use an "
                                     "integer >= 1 (the task containers' user id)")
        if uid == 0 and level == "restricted":
            raise ClusterConfigError(
                f"{where}.run_as_user: 0 is root, which pod_security restricted refuses; use "
                "a non-root uid, or set pod_security: baseline for this cluster")
        if raw.get("watch") is not None and not isinstance(raw["watch"], bool):
            raise ClusterConfigError(f"{where}.watch: must be true or false")
        for key in ("watch_timeout", "cache_sync_wait"):
            value = raw.get(key)
            if value is not None and (not isinstance(value, (int, float))
                                      or isinstance(value, bool) or value < 0):
                raise ClusterConfigError(f"{where}.{key}: must be a number of seconds >= 0")
    return dict(raw)


def parse_clusters(text: str, *, source: str = "clusters file") -> dict[str, dict[str, Any]]:
    """Parse a clusters file and return `{cluster_name: entry}` with top-level `devices` merged.

    Each kubernetes entry gets `devices` = the top-level entries updated by its own.

    Raises:
        ClusterConfigError: the YAML is invalid, `clusters` is missing or empty, or an entry is
            malformed; the message names `source` and the key.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ClusterConfigError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("clusters"), Mapping) \
            or not data["clusters"]:
        raise ClusterConfigError(f"{source}: needs a non-empty `clusters:` mapping of "
                                 "cluster_name to backend settings")
    unknown = sorted(set(data) - {"clusters", "devices"})
    if unknown:
        raise ClusterConfigError(f"{source}: unknown top-level keys {unknown}")
    shared_devices = data.get("devices") or {}
    if not isinstance(shared_devices, Mapping):
        raise ClusterConfigError(f"{source}: devices must be a mapping")
    out: dict[str, dict[str, Any]] = {}
    for name, raw in data["clusters"].items():
        entry = _check_cluster(raw, f"{source}: clusters.{name}")
        if entry["backend"] == "kubernetes":
            entry["devices"] = {**shared_devices, **(entry.get("devices") or {})}
        out[str(name)] = entry
    return out


_cache_lock = threading.Lock()
_cache: dict[tuple[str, int, int], dict[str, dict[str, Any]]] = {}


def read_clusters(path: str | os.PathLike | None,
                  default: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Return `{cluster_name: entry}` from the clusters file at `path`, else `default`.

    Args:
        path: the clusters file; empty or None means "use `default`".
        default: the embedded default entries (one `local` cluster).

    Raises:
        ClusterConfigError: the file cannot be read or is malformed.
    """
    if not path:
        return {str(k): dict(v) for k, v in default.items()}
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ClusterConfigError(f"FALCON_CLUSTERS_FILE={str(path)!r} cannot be read: {exc}"
                                 ) from exc
    key = (str(path), st.st_mtime_ns, st.st_size)
    with _cache_lock:
        if key not in _cache:
            text = Path(path).read_text(encoding="utf-8")
            _cache.clear()
            _cache[key] = parse_clusters(text, source=str(path))
        return _cache[key]
