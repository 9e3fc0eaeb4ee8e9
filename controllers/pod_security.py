"""The security contexts of the Pods Falcon creates: analysis Pods and experiment task Pods.

One definition for both, after the Kubernetes Pod Security Standards
(https://kubernetes.io/docs/concepts/security/pod-security-standards/). The level of a
cluster's task Pods is the clusters file's `pod_security` (`clusters.config.POD_SECURITY_LEVELS`,
"restricted" unless the cluster's entry relaxes it); analysis Pods are always "restricted".

- `restricted`: the Pod runs as non-root (`runAsNonRoot`; the image's numeric non-root `USER`,
  or the cluster's `run_as_user`), with seccomp `RuntimeDefault`, no privilege escalation and
  every capability dropped. GPU and TPU device plugins hand their devices to non-root
  containers, so accelerator jobs run at this level too; an image built to run as root is
  refused by the kubelet (`CreateContainerConfigError`: "image will run as root").
- `baseline`: for images that must run as root: `runAsNonRoot` and the dropped capabilities
  are left out (the runtime's default capabilities), escalation stays off, seccomp stays on.
- `privileged`: for a device that needs it (TPU `/dev/accel*` on some node setups): the
  container is `privileged`, no seccomp or capability rule. A cluster gives it on purpose.

Every level keeps what is not a Pod Security Standard matter: task Pods mount no
service-account token (`automountServiceAccountToken: false`, set by the backends).
"""
from __future__ import annotations

from kubernetes import client

from clusters.config import POD_SECURITY_LEVELS

RESTRICTED = "restricted"


def security_contexts(level: str = RESTRICTED, *, run_as_user: int | None = None,
                      read_only_root_filesystem: bool = False
                      ) -> tuple[client.V1PodSecurityContext | None, client.V1SecurityContext]:
    """Return `(pod securityContext, container securityContext)` for a Pod Security level.

    Args:
        level: `restricted`, `baseline` or `privileged` (module docstring).
        run_as_user: the numeric uid (also the gid and fsGroup) the Pod runs as; None keeps the
            image's `USER`. Must not be 0 under `restricted`.
        read_only_root_filesystem: make the container's root filesystem read-only (analysis
            Pods, whose writable folders are emptyDir volumes).

    Raises:
        ValueError: an unknown level, or uid 0 under `restricted`.
    """
    if level not in POD_SECURITY_LEVELS:
        raise ValueError(f"pod_security: {level!r} is not one of {', '.join(POD_SECURITY_LEVELS)}")
    if level == RESTRICTED and run_as_user == 0:
        raise ValueError("run_as_user: 0 is root, which the restricted level refuses")
    ids = ({} if run_as_user is None else
           {"run_as_user": run_as_user, "run_as_group": run_as_user})
    read_only = read_only_root_filesystem or None
    if level == "privileged":
        return (client.V1PodSecurityContext(**ids) if ids else None,
                client.V1SecurityContext(privileged=True, read_only_root_filesystem=read_only))
    seccomp = client.V1SeccompProfile(type="RuntimeDefault")
    non_root = True if level == RESTRICTED else None
    pod = client.V1PodSecurityContext(
        run_as_non_root=non_root, seccomp_profile=seccomp,
        fs_group=run_as_user if run_as_user is not None else None, **ids)
    container = client.V1SecurityContext(
        run_as_non_root=non_root, allow_privilege_escalation=False, privileged=False,
        read_only_root_filesystem=read_only,
        capabilities=client.V1Capabilities(drop=["ALL"]) if level == RESTRICTED else None,
        seccomp_profile=seccomp, **ids)
    return pod, container
