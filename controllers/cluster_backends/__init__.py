"""Cluster backends: how the resource manager runs a Falcon Job on a cluster.

`ClusterBackend` (base.py) is the contract; `LocalBackend` (local.py) runs replicas as local
processes; `KubernetesBackend` (kubernetes/, imported on demand so the local mode does not load
the `kubernetes` client) runs one batch/v1 Indexed Job per Falcon Job, with the accelerator
table of `clusters.devices`; `loading` builds the backend of each configured cluster.
"""
from controllers.cluster_backends.base import (
    BackendError,
    ClusterBackend,
    ClusterJobState,
    ClusterJobStatus,
    PermanentBackendError,
    SubmitResult,
    cluster_job_name_for,
)
from controllers.cluster_backends.local import LocalBackend

__all__ = [
    "BackendError",
    "ClusterBackend",
    "ClusterJobState",
    "ClusterJobStatus",
    "LocalBackend",
    "PermanentBackendError",
    "SubmitResult",
    "cluster_job_name_for",
]
