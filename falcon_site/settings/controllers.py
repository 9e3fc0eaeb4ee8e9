"""Settings of the gRPC API and the controllers (`manage.py rungrpc`, `runcontroller`,
`runlocal`): addresses, tick interval, pending timeout and leader election.

Environment variables:

- `FALCON_GRPC_ADDR`: where `manage.py rungrpc` listens, and `runlocal --grpc`'s default
  (default `127.0.0.1:50051`).
- `FALCON_GRPC_TARGET`: where controllers connect to the gRPC API (default `127.0.0.1:50051`).
- `FALCON_CONTROLLER_INTERVAL_SECONDS`: seconds between the starts of two controller ticks
  (default 2); `runcontroller`'s and `runlocal`'s `--interval` default.
- `FALCON_PENDING_TIMEOUT_SECONDS`: fail a job whose cluster job has not started within this
  many seconds (default: unset, no limit).
- `FALCON_PROGRESS_DEADLINE_SECONDS`: fail a Running job whose cluster job lost a replica
  (evicted, preempted, node lost) and has not run every replica again within this many seconds
  (default 600, Kubernetes' `progressDeadlineSeconds` default; `0` or empty: no limit).
- `FALCON_ORPHAN_GRACE_SECONDS`: the resource manager's sweep spares cluster jobs and Pods
  younger than this (default 30).
- `FALCON_LOCAL_MAX_REPLICAS`: replicas a local cluster runs at once, over every user (default:
  the machine's CPU count, at least 8); `FALCON_LOCAL_MAX_REPLICAS_PER_USER`: of those, replicas of one
  user's jobs (default: half of `FALCON_LOCAL_MAX_REPLICAS`, at least 1). A job that does not
  fit waits Pending, reason `WaitingForCapacity`; one larger than either limit fails at once
  (docs/cluster-behaviours.md#cb-23).
- Leader election of `runcontroller` (a coordination.k8s.io/v1 Lease, `controllers.leader`):
  `FALCON_LEASE_NAMESPACE` (default `POD_NAMESPACE`, then `default`),
  `FALCON_LEASE_NAME_PREFIX` (default `falcon`), `FALCON_LEASE_DURATION_SECONDS` (15),
  `FALCON_LEASE_RENEW_DEADLINE_SECONDS` (10), `FALCON_LEASE_RETRY_PERIOD_SECONDS` (2), all in
  seconds; `FALCON_LEASE_IN_CLUSTER` (default: true when `KUBERNETES_SERVICE_HOST` is set, i.e.
  in a Pod), `FALCON_LEASE_KUBECONFIG` and `FALCON_LEASE_KUBE_CONTEXT` (default empty).

`FALCON_HEARTBEAT_FILE` (the liveness file of `runcontroller`) is read by `controllers.runner`.
"""
from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from .base import env_bool


def _replicas(name: str, default: int) -> int:
    """The environment variable `name` as a whole number >= 1, `default` when unset.

    Raises:
        ImproperlyConfigured: any other value, naming the variable and what it must be.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ImproperlyConfigured(f"{name} must be a whole number >= 1 (replicas); got "
                                   f"{raw!r}.")
    return value

# gRPC API: where `manage.py rungrpc` listens and where controllers connect.
FALCON_GRPC_ADDR = os.environ.get("FALCON_GRPC_ADDR", "127.0.0.1:50051")
FALCON_GRPC_TARGET = os.environ.get("FALCON_GRPC_TARGET", "127.0.0.1:50051")

# Leader election of `runcontroller` on a coordination.k8s.io/v1 Lease (controllers/leader.py).
# Durations in seconds, with client-go's defaults; the Lease lives in the controllers' own
# namespace (POD_NAMESPACE from the downward API). `kubeconfig`/`context` empty with
# `in_cluster` true: the Pod's service account.
FALCON_LEADER_ELECTION = {
    "namespace": os.environ.get("FALCON_LEASE_NAMESPACE") or os.environ.get("POD_NAMESPACE")
    or "default",
    "lease_name_prefix": os.environ.get("FALCON_LEASE_NAME_PREFIX", "falcon"),
    "lease_duration": float(os.environ.get("FALCON_LEASE_DURATION_SECONDS", "15")),
    "renew_deadline": float(os.environ.get("FALCON_LEASE_RENEW_DEADLINE_SECONDS", "10")),
    "retry_period": float(os.environ.get("FALCON_LEASE_RETRY_PERIOD_SECONDS", "2")),
    "in_cluster": env_bool("FALCON_LEASE_IN_CLUSTER",
                           bool(os.environ.get("KUBERNETES_SERVICE_HOST"))),
    "kubeconfig": os.environ.get("FALCON_LEASE_KUBECONFIG", ""),
    "context": os.environ.get("FALCON_LEASE_KUBE_CONTEXT", ""),
}
FALCON_CONTROLLER_INTERVAL_SECONDS = float(os.environ.get("FALCON_CONTROLLER_INTERVAL_SECONDS",
                                                          "2"))
FALCON_PENDING_TIMEOUT_SECONDS = (
    float(os.environ["FALCON_PENDING_TIMEOUT_SECONDS"])
    if os.environ.get("FALCON_PENDING_TIMEOUT_SECONDS") else None
)
FALCON_PROGRESS_DEADLINE_SECONDS = (
    float(os.environ.get("FALCON_PROGRESS_DEADLINE_SECONDS", "600") or 0) or None
)
FALCON_ORPHAN_GRACE_SECONDS = float(os.environ.get("FALCON_ORPHAN_GRACE_SECONDS", "30"))

# The local cluster's admission (controllers.cluster_backends.local, CB-23): replicas running
# at once on this machine, and of one user's jobs.
# Default: the CPU count, at least 8 (`LocalBackend`'s own default): local tasks are often
# light, and a 2-CPU laptop should still run a 4-replica example.
FALCON_LOCAL_MAX_REPLICAS = _replicas("FALCON_LOCAL_MAX_REPLICAS", max(8, os.cpu_count() or 1))
FALCON_LOCAL_MAX_REPLICAS_PER_USER = _replicas("FALCON_LOCAL_MAX_REPLICAS_PER_USER",
                                               max(1, FALCON_LOCAL_MAX_REPLICAS // 2))
if FALCON_LOCAL_MAX_REPLICAS_PER_USER > FALCON_LOCAL_MAX_REPLICAS:
    raise ImproperlyConfigured(
        f"FALCON_LOCAL_MAX_REPLICAS_PER_USER ({FALCON_LOCAL_MAX_REPLICAS_PER_USER}) must be at "
        f"most FALCON_LOCAL_MAX_REPLICAS ({FALCON_LOCAL_MAX_REPLICAS}); lower it or raise "
        "FALCON_LOCAL_MAX_REPLICAS.")
