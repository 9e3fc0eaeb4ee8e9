"""One `backend: kubernetes` entry of the clusters file, as the backend and the manifests read it."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from clusters.devices import DeviceTable
from controllers.kubeclient import KubeConnection


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
        list_page_size: `limit` of each LIST page. A page is decoded whole before the caches
            keep what they read of it, and the heap keeps the largest page's worth: 1,000
            Pods are about 14 MB of decoded JSON, 5,000 are 70 MB.
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
    list_page_size: int = 1000
    devices: DeviceTable = field(default_factory=DeviceTable)
    watch: bool = True
    watch_timeout: float = 60.0
    cache_sync_wait: float = 1.0
    pod_security: str = "restricted"
    run_as_user: int | None = None
