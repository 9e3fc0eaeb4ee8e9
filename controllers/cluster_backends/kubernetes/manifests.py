"""The Kubernetes objects a Falcon Job becomes: its Indexed Job, Pod template and Service.

Pure: each builder reads a Falcon job (`JobView`) and the cluster's settings and returns the
`kubernetes.client` model, with no API call, so a manifest can be checked without a cluster.
The job's TaskSpec is a typed `TaskSpec` (`JobView.task_spec`), read once from its JSON.
What a Falcon Job becomes is told in the package's docstring (`controllers.cluster_backends.
kubernetes`).
"""
from __future__ import annotations

from kubernetes import client

from clusters.devices import TPU_TOPOLOGY_LABEL, DeviceType
from controllers.cluster_backends.base import PermanentBackendError
from controllers.cluster_backends.kubernetes.config import KubernetesClusterConfig
from controllers.cluster_backends.kubernetes.vocabulary import (
    ANNOTATION_EXP_NAME,
    CONTAINER,
    FINALIZER,
    LABEL_EXP_ID,
    LABEL_JOB_ID,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
)
from controllers.contract import JobView
from controllers.pod_security import security_contexts
from core.domain.statuses import CONFIG_ENV
from core.domain.taskspec import TaskSpec


def device_of(config: KubernetesClusterConfig, cluster_name: str, spec: TaskSpec
              ) -> DeviceType | None:
    """Return the TaskSpec's device type from the cluster's table (None without one).

    Raises:
        PermanentBackendError: the device type has no mapping in this cluster.
    """
    device_type = spec.device_type
    if not device_type:
        return None
    device = config.devices.get(device_type)
    if device is None:
        raise PermanentBackendError(
            f"cluster {cluster_name}: device_type {device_type!r} has no mapping "
            "(was the clusters file changed after CreateExp?)")
    return device


def shape(config: KubernetesClusterConfig, cluster_name: str, spec: TaskSpec
          ) -> tuple[int, int, DeviceType | None]:
    """Return `(replica, hosts per replica, device)` of a validated TaskSpec.

    Raises:
        PermanentBackendError: the device type has no mapping, or a TPU role asks for more
            than one replica (accepted before `validate` refused it; one Job would be
            wired by GKE as one slice, see `validate`).
    """
    device = device_of(config, cluster_name, spec)
    hosts = device.hosts(spec.device_count or 0) if device else 1
    replica = spec.replica or 1
    if device is not None and device.kind == "tpu" and replica > 1:
        raise PermanentBackendError(
            f"cluster {cluster_name}: replica is {replica}, but TPU slices run one "
            "replica per role; use several roles")
    return replica, hosts, device


def job_labels(job: JobView) -> dict[str, str]:
    """Return the labels of the Job, its Pods and its Service."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_EXP_ID: str(job.exp_id),
            LABEL_JOB_ID: str(job.id), LABEL_ROLE: job.role}


def task_env(job: JobView, *, cluster_name: str, name: str, replica: int, hosts: int
             ) -> dict[str, str]:
    """Return the environment of every task container of `job`.

    The TaskSpec `envs` come first; Falcon's own variables are set last and win (CreateExp
    refuses these names in `envs`): the experiment config as `CONFIG_ENV` and the
    `FALCON_*` variables, with `FALCON_WORKER_HOSTNAMES` when the Job has several Pods.

    Args:
        job: the Falcon job.
        cluster_name: the cluster's name (`FALCON_CLUSTER`).
        name: the Job's name; Pods are `<name>-<index>.<name>` in its headless Service.
        replica: the TaskSpec `replica`.
        hosts: Pods per replica (several for a multi-host TPU slice, else 1).
    """
    total = replica * hosts
    env = dict(job.task_spec.envs)
    env.update({
        CONFIG_ENV: job.config,
        "FALCON_EXP_ID": str(job.exp_id),
        "FALCON_EXP_NAME": job.exp_name,
        "FALCON_JOB_ID": str(job.id),
        "FALCON_ROLE": job.role,
        "FALCON_CLUSTER": cluster_name,
        "FALCON_REPLICA_COUNT": str(replica),
        "FALCON_HOSTS_PER_REPLICA": str(hosts),
        "FALCON_ARTIFACT_PATH": job.artifact_path,
    })
    if total > 1:
        env["FALCON_WORKER_HOSTNAMES"] = ",".join(f"{name}-{i}.{name}" for i in range(total))
    return env


def accelerators(config: KubernetesClusterConfig, spec: TaskSpec,
                 device: DeviceType | None
                 ) -> tuple[client.V1ResourceRequirements | None, dict[str, str]]:
    """Return the container's resources and the Pod's node selector for a TaskSpec.

    Args:
        spec: the validated TaskSpec (`device_count`, `device_topo` are read).
        device: the TaskSpec's device type (`shape`), None when it uses no accelerator.

    Returns:
        `(resources, node_selector)`: requests = limits = the device's chips per Pod (None
        without a device), and the cluster's node selector plus the device's (and the TPU
        topology label for a TPU).
    """
    node_selector = dict(config.node_selector)
    if device is None:
        return None, node_selector
    per_pod = str(device.chips_per_pod(spec.device_count or 0))
    resources = client.V1ResourceRequirements(limits={device.resource: per_pod},
                                              requests={device.resource: per_pod})
    node_selector.update(device.node_selector)
    if device.kind == "tpu":
        node_selector[TPU_TOPOLOGY_LABEL] = spec.device_topo
    return resources, node_selector


def pod_spec(config: KubernetesClusterConfig, cluster_name: str, job: JobView, *, name: str,
             replica: int, hosts: int, device: DeviceType | None) -> client.V1PodSpec:
    """Return the Pod spec of the Job's Pods: one container running the TaskSpec command.

    The command runs through `/bin/sh -c` after the replica and host index are computed
    from `JOB_COMPLETION_INDEX` (set by Kubernetes in Indexed Jobs).

    Args:
        job: the Falcon job; `task_spec` is validated.
        name: the Job's name (the Pods' `subdomain` when there are several).
        replica: the TaskSpec `replica`.
        hosts: Pods per replica.
        device: the TaskSpec's device type, or None.
    """
    spec = job.task_spec
    total = replica * hosts
    env = task_env(job, cluster_name=cluster_name, name=name, replica=replica, hosts=hosts)
    script = (f"export FALCON_REPLICA_INDEX=$(( ${{JOB_COMPLETION_INDEX:-0}} / {hosts} )) "
              f"FALCON_HOST_INDEX=$(( ${{JOB_COMPLETION_INDEX:-0}} % {hosts} ))\n"
              f"{spec.command}")
    resources, node_selector = accelerators(config, spec, device)
    pod_security, container_security = security_contexts(
        config.pod_security, run_as_user=config.run_as_user)
    container = client.V1Container(
        name=CONTAINER, image=spec.image, command=["/bin/sh", "-c", script],
        env=[client.V1EnvVar(name=k, value=v) for k, v in env.items()],
        resources=resources,
        # The tail of the output becomes the termination message when the container fails
        # without writing one: the failure reason Falcon shows.
        termination_message_policy="FallbackToLogsOnError",
        security_context=container_security)
    return client.V1PodSpec(
        restart_policy="Never", containers=[container],
        # A user's code gets no credential of the cluster (no service-account token: a
        # task has no business with the Kubernetes API) and runs at the cluster's Pod
        # Security level (`KubernetesClusterConfig.pod_security`, restricted by default).
        automount_service_account_token=False, security_context=pod_security,
        node_selector=node_selector or None,
        subdomain=name if total > 1 else None,
        service_account_name=config.service_account or None,
        image_pull_secrets=[client.V1LocalObjectReference(name=s)
                            for s in config.image_pull_secrets] or None,
        termination_grace_period_seconds=config.termination_grace_period_seconds,
        # Thousands of Services in the namespace would otherwise become env variables.
        enable_service_links=False)


def build_job(config: KubernetesClusterConfig, cluster_name: str, job: JobView, name: str
              ) -> client.V1Job:
    """Return the `batch/v1` Job for `job` (pure: no API call).

    Raises:
        PermanentBackendError: the TaskSpec cannot be run here (see `shape`).
    """
    replica, hosts, device = shape(config, cluster_name, job.task_spec)
    total = replica * hosts
    labels = job_labels(job)
    template = pod_spec(config, cluster_name, job, name=name, replica=replica, hosts=hosts,
                        device=device)
    return client.V1Job(
        api_version="batch/v1", kind="Job",
        metadata=client.V1ObjectMeta(name=name, namespace=config.namespace,
                                     labels=labels, finalizers=[FINALIZER],
                                     annotations={ANNOTATION_EXP_NAME: job.exp_name}),
        spec=client.V1JobSpec(
            completion_mode="Indexed", completions=total, parallelism=total,
            backoff_limit=config.backoff_limit,
            ttl_seconds_after_finished=config.ttl_seconds_after_finished,
            active_deadline_seconds=config.active_deadline_seconds,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels), spec=template)))


def build_service(config: KubernetesClusterConfig, job: JobView, name: str, owner_uid: str
                  ) -> client.V1Service:
    """Return the headless Service giving each Pod of the Job a DNS name.

    `clusterIP: None` and `publishNotReadyAddresses` (workers must find each other before
    they are ready); owned by the Job, so deleting the Job deletes it.
    """
    labels = job_labels(job)
    return client.V1Service(
        api_version="v1", kind="Service",
        metadata=client.V1ObjectMeta(
            name=name, namespace=config.namespace, labels=labels,
            owner_references=[client.V1OwnerReference(
                api_version="batch/v1", kind="Job", name=name, uid=owner_uid,
                controller=True, block_owner_deletion=True)]),
        spec=client.V1ServiceSpec(cluster_ip="None", selector={LABEL_JOB_ID: str(job.id),
                                                               LABEL_MANAGED_BY: MANAGED_BY},
                                  publish_not_ready_addresses=True))
