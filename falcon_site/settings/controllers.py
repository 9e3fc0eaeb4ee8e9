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

from .base import env_bool

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
