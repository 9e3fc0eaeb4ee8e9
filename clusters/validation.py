"""TaskSpec rules each cluster backend needs, checked with no cluster connection.

CreateExp and CreateJob call `cluster_problems` so that a spec a cluster cannot run is refused
at once, naming the field, instead of being found out later by a failing cluster Job. The
Kubernetes backend applies the same rules (`KubernetesBackend.validate`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import ClusterConfigError
from .devices import DeviceConfigError, DeviceTable


def kubernetes_task_spec_problems(cluster_name: str, devices: DeviceTable,
                                  task_spec: Mapping[str, Any]) -> dict[str, list[str]]:
    """Return what a Kubernetes cluster cannot run in a TaskSpec, keyed by TaskSpec field.

    A Kubernetes Pod needs an image and a command; the device fields must map to a known
    accelerator with a matching topology (`DeviceTable.check`); a TPU role has one replica.

    Args:
        cluster_name: named in the messages.
        devices: the cluster's accelerator table.
        task_spec: a TaskSpec already checked for shape (`jobs.specs.validate_task_spec`).
    """
    problems: dict[str, list[str]] = {}
    image = task_spec.get("image")
    if not isinstance(image, str) or not image.strip():
        problems["image"] = [f"is required on the Kubernetes cluster {cluster_name}: "
                             "the container image the task runs in."]
    elif any(ch.isspace() for ch in image):
        problems["image"] = [f"{image!r} is not an image reference (no spaces allowed)."]
    command = task_spec.get("command")
    if not isinstance(command, str) or not command.strip():
        problems["command"] = ["is required: the shell command the container runs."]
    count = task_spec.get("device_count") or 0
    device = devices.get(task_spec.get("device_type") or "")
    replica = task_spec.get("replica") or 1
    if device is not None and device.kind == "tpu" and isinstance(replica, int) and replica > 1:
        # All replicas of a role are one Indexed Job. GKE's TPU webhook sets TPU_WORKER_ID /
        # TPU_WORKER_HOSTNAMES on every Pod of an Indexed Job that has a subdomain,
        # parallelism > 1 and requests google.com/tpu ("Deploy TPU workloads in GKE Standard",
        # multi-host section), so libtpu would join independent replicas into one slice that
        # does not exist. One replica per role keeps one Job = one slice.
        problems["replica"] = [
            f"is {replica}, but TPU slices run one replica per role on the Kubernetes "
            f"cluster {cluster_name}: use several roles for several slices."]
    if isinstance(count, int):
        for key, text in devices.check(
                device_type=task_spec.get("device_type") or "", device_count=count,
                device_topo=task_spec.get("device_topo") or "").items():
            problems.setdefault(key, []).append(text)
    return problems


def cluster_problems(clusters: Mapping[str, Mapping[str, Any]], cluster_name: str,
                     role_to_task_spec: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Return CreateExp errors for the cluster and each role's TaskSpec on it ({} = valid).

    Args:
        clusters: `{cluster_name: entry}` as `clusters.config.read_clusters` returns it.
        cluster_name: the experiment's cluster.
        role_to_task_spec: `{role: TaskSpec}`, each already checked for shape.

    Returns:
        `{"cluster_name": [...]}` when the cluster is unknown (the message lists the known
        clusters), else `{"role_to_task_spec.<role>.<field>": [...]}`. A local cluster runs any
        well-shaped TaskSpec (it ignores image and device fields).

    Raises:
        ClusterConfigError: the cluster's `devices` entries are malformed.
    """
    if cluster_name not in clusters:
        return {"cluster_name": [f"{cluster_name!r} is not a configured cluster; known "
                                 f"clusters: {', '.join(sorted(clusters))}."]}
    entry = clusters[cluster_name]
    if entry.get("backend") != "kubernetes":
        return {}
    try:
        devices = DeviceTable(entry.get("devices") or {})
    except DeviceConfigError as exc:
        raise ClusterConfigError(f"clusters.{cluster_name}.devices: {exc}") from exc
    errors: dict[str, list[str]] = {}
    for role, spec in role_to_task_spec.items():
        for fld, messages in kubernetes_task_spec_problems(cluster_name, devices, spec).items():
            errors.setdefault(f"role_to_task_spec.{role}.{fld}", []).extend(messages)
    return errors
