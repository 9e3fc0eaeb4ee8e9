"""The Kubernetes analysis backend: one Pod per analysis (docs/analyzer.md, "Runs on Kubernetes").

Each analysis runs `python -m controllers.analyzer.runner` in a Pod named `run_name(analysis_id)`
(deterministic: a restarted controller or a new leader finds it, and a create whose reply was
lost answers 409 AlreadyExists and is adopted after checking the Pod's analysis annotation).
The same image runs every analysis, offline and online; the runner inside writes output.log and
the results to the store itself, while the Pod runs and at its end, so both survive the Pod.

The Pod is built for the Kubernetes "restricted" Pod Security Standard: runAsNonRoot with a
numeric user, allowPrivilegeEscalation false, every capability dropped, seccomp RuntimeDefault,
and a read-only root filesystem; writable emptyDir volumes (each with a sizeLimit) hold the work
folder, HOME and TMPDIR. `activeDeadlineSeconds` is the plugin's `timeout_seconds`.

The controller's tick observes every analysis Pod with one paged LIST (a level-triggered resync,
so a silent watch stream cannot stall it) and maps its status (`pod_state`):

| Pod | RunState |
| --- | --- |
| Pending, Running | pending, running |
| Succeeded | succeeded |
| Failed | failed: `Evicted`, `DeadlineExceeded`, `OOMKilled`, or the runner's reason (its termination message) with the exit code and the log tail |
| waiting CreateContainerConfigError / CreateContainerError / InvalidImageName for `config_error_seconds` | failed, `CreateContainerConfigError` (an image whose user is root says how to fix it) |
| waiting ErrImagePull / ImagePullBackOff for `start_timeout_seconds` | failed, `ImagePullFailed`, naming the image |
| gone (or Terminating) though this process saw it and did not delete it | failed, `PodDeleted` |
| gone, never seen by this process | missing (recovery starts it again) |

`stop` deletes the Pod (grace period `grace_seconds`) and answers True only once it is gone, so
a Terminating Pod keeps its queue slot; after `stuck_terminating_seconds` of Terminating (a
NotReady node) the slot is released and the Pod is logged as stuck.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from artifacts.store import store_for
from controllers.kubeclient import KubeCaller
from controllers.pod_security import RESTRICTED, security_contexts
from core.logs import log_context

from .base import (
    FAILED, MISSING_STATE, PENDING, RUNNING, SUCCEEDED, AnalysisBackend, BackendError,
    RunConflict, RunSpec, RunState, StartResult, log_tail,
)

log = logging.getLogger("falcon.controllers.analyzer.kubernetes")

LABEL_ANALYSIS = "falcon.dev/analysis-id"
LABEL_EXP = "falcon.dev/exp-id"
LABEL_ATTEMPT = "falcon.dev/attempt"
ANNOTATION_ANALYSIS = "falcon.dev/analysis-id"
COMPONENT = {"app.kubernetes.io/name": "falcon-analysis",
             "app.kubernetes.io/component": "analysis",
             "app.kubernetes.io/managed-by": "falcon-analyzer"}
SELECTOR = ",".join(f"{k}={v}" for k, v in COMPONENT.items())
CONTAINER = "analysis"
SPEC_ENV = "FALCON_RUN_SPEC"
TERMINATION_LOG = "/dev/termination-log"
WORK, HOME, TMP = "/work", "/home/falcon", "/tmp"
CONFIG_ERRORS = frozenset({"CreateContainerConfigError", "CreateContainerError",
                           "InvalidImageName"})
PULL_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff"})
POD_DELETED, EVICTED, DEADLINE_EXCEEDED, OOM_KILLED = (
    "PodDeleted", "Evicted", "DeadlineExceeded", "OOMKilled")
CONFIG_ERROR, IMAGE_PULL_FAILED = "CreateContainerConfigError", "ImagePullFailed"
RUNNER_REASONS = frozenset({"NonZeroExit", "Timeout", "NoResults", "FetchFailed", "Stopped",
                            "RunnerFailed"})


def _label_value(value: str) -> str:
    """A label value (at most 63 characters, alphanumeric ends)."""
    return value[:63].strip("-_.")


class PodAnalysisBackend(AnalysisBackend):
    """Analyses as Pods in one namespace (see the module docstring).

    Args:
        core: a `kubernetes.client.CoreV1Api` (its own ApiClient: `controllers.kubeclient`).
        caller: the `KubeCaller` every call goes through (timeouts, bounded retries, QPS).
        namespace: where analysis Pods run (the analyzer's own namespace).
        image: the analysis image (the plugins on PATH, a non-root numeric USER).
        run_as_user: the numeric uid (and gid) the Pod runs as (the image's USER).
        service_account: the Pods' service account ("" = the namespace's default), e.g. one
            bound to a GCS identity; its token is not mounted.
        image_pull_secrets: names of Secrets to pull the image with.
        plugin_dir: the plugin folder inside the image, first on PATH.
        scratch_size: the sizeLimit of each emptyDir (work, HOME, TMPDIR), a quantity.
        grace_seconds: the Pod's terminationGracePeriodSeconds and the runner's SIGTERM grace.
        start_timeout_seconds: seconds an image may fail to pull before the analysis fails.
        config_error_seconds: seconds a container may wait in CreateContainerConfigError (or
            CreateContainerError, InvalidImageName) before the analysis fails.
        stuck_terminating_seconds: seconds after a delete before a Pod still Terminating
            releases its slot anyway (flagged in the log).
        log_upload_seconds: seconds between two uploads of output.log by the runner.
        env: extra environment of the analysis container (e.g. STORAGE_EMULATOR_HOST).
        clock: monotonic seconds (tests pass a fake clock).
    """

    name = "kubernetes"

    def __init__(self, core: client.CoreV1Api, caller: KubeCaller, namespace: str, image: str,
                 *, run_as_user: int = 10001, service_account: str = "",
                 image_pull_secrets: Iterable[str] = (), plugin_dir: str = "/app/plugins/bin",
                 scratch_size: str = "2Gi", grace_seconds: int = 30,
                 start_timeout_seconds: float = 300.0, config_error_seconds: float = 10.0,
                 stuck_terminating_seconds: float = 300.0, log_upload_seconds: float = 10.0,
                 env: dict[str, str] | None = None, clock=time.monotonic):
        if not image:
            raise ValueError("the analysis image is required (FALCON_ANALYZER_IMAGE)")
        self.core = core
        self.caller = caller
        self.namespace = namespace
        self.image = image
        self.run_as_user = int(run_as_user)
        self.service_account = service_account
        self.image_pull_secrets = tuple(image_pull_secrets)
        self.plugin_dir = plugin_dir
        self.scratch_size = scratch_size
        self.grace_seconds = int(grace_seconds)
        self.start_timeout_seconds = float(start_timeout_seconds)
        self.config_error_seconds = float(config_error_seconds)
        self.stuck_terminating_seconds = float(stuck_terminating_seconds)
        self.log_upload_seconds = float(log_upload_seconds)
        self.env = dict(env or {})
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: set[str] = set()              # Pods this process saw (not deleted by it)
        self._deleting: dict[str, float] = {}     # analysis id -> clock time of our delete
        self._waiting: dict[tuple[str, str], float] = {}  # (id, kind) -> first seen

    @classmethod
    def from_settings(cls) -> PodAnalysisBackend:
        """The backend of `settings.FALCON_ANALYZER_POD` (falcon_site/settings/analysis.py),
        reaching the Kubernetes API like the Lease does (`FALCON_LEADER_ELECTION`: in-cluster
        or a kubeconfig). A GCS emulator the controller is pointed at
        (`STORAGE_EMULATOR_HOST`) is passed to the analyses too, and so are
        `FALCON_LOG_FORMAT` and `FALCON_LOG_LEVEL` (the runner's own lines).

        Raises:
            kubernetes.config.ConfigException: no kubeconfig / in-cluster service account.
        """
        import os

        from django.conf import settings

        from controllers.kubeclient import KubeConnection, api_client

        le = settings.FALCON_LEADER_ELECTION
        pod = dict(settings.FALCON_ANALYZER_POD)
        conn = KubeConnection(kubeconfig=le["kubeconfig"], context=le["context"],
                              in_cluster=le["in_cluster"], qps=20, burst=40)
        # The runner in the Pod logs as the controller does (JSON lines in production).
        env = {k: v for k in ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT",
                              "FALCON_LOG_FORMAT", "FALCON_LOG_LEVEL")
               if (v := os.environ.get(k))}
        return cls(client.CoreV1Api(api_client(conn)), KubeCaller(conn), pod.pop("namespace"),
                   pod.pop("image"), env=env, **pod)

    def reset(self) -> None:
        """Forget what this process saw (a new leadership term starts from the cluster)."""
        with self._lock:
            self._seen.clear()
            self._deleting.clear()
            self._waiting.clear()

    # -- the Pod ----------------------------------------------------------------------------

    def runner_spec(self, spec: RunSpec) -> dict[str, Any]:
        """The runner's spec (`controllers.analyzer.runner.Run`), as the Pod's environment
        carries it in FALCON_RUN_SPEC."""
        data = asdict(spec)
        data.update(work_dir=f"{WORK}/run", exit_file=f"{WORK}/exit.json",
                    child_file=f"{WORK}/child.json", plugin_dir=self.plugin_dir,
                    log_upload_seconds=self.log_upload_seconds,
                    grace_seconds=self.grace_seconds, backend=self.name,
                    enforces_resources=True)
        return data

    def build_pod(self, spec: RunSpec) -> client.V1Pod:
        """The analysis Pod of `spec` (restricted Pod Security Standard; see the module
        docstring). Resources: requests and limits from `spec.resources` (the catalog's,
        with the request's override)."""
        name = self.run_name(spec.analysis_id)
        res = spec.resources or {}
        requests = {k: v for k, v in (("cpu", res.get("cpu_request")),
                                      ("memory", res.get("memory_request"))) if v}
        limits = {k: v for k, v in (("cpu", res.get("cpu_limit")),
                                    ("memory", res.get("memory_limit"))) if v}
        env = [client.V1EnvVar(name=k, value=v) for k, v in sorted(self.env.items())]
        env += [
            client.V1EnvVar(name="HOME", value=HOME),
            client.V1EnvVar(name="TMPDIR", value=TMP),
            client.V1EnvVar(name="XDG_CACHE_HOME", value=f"{HOME}/.cache"),
            client.V1EnvVar(name="XDG_CONFIG_HOME", value=f"{HOME}/.config"),
            client.V1EnvVar(name="MPLCONFIGDIR", value=f"{HOME}/.config/matplotlib"),
            client.V1EnvVar(name=SPEC_ENV, value=json.dumps(self.runner_spec(spec))),
        ]
        volumes = [client.V1Volume(name=v, empty_dir=client.V1EmptyDirVolumeSource(
            size_limit=self.scratch_size)) for v in ("work", "home", "tmp")]
        mounts = [client.V1VolumeMount(name="work", mount_path=WORK),
                  client.V1VolumeMount(name="home", mount_path=HOME),
                  client.V1VolumeMount(name="tmp", mount_path=TMP)]
        pod_security, container_security = security_contexts(
            RESTRICTED, run_as_user=self.run_as_user, read_only_root_filesystem=True)
        container = client.V1Container(
            name=CONTAINER, image=self.image,
            command=["python", "-m", "controllers.analyzer.runner", "--spec-env", SPEC_ENV,
                     "--termination-log", TERMINATION_LOG],
            # The image's WORKDIR (/app, the code) stays: the runner runs the command in WORK.
            env=env, volume_mounts=mounts,
            resources=client.V1ResourceRequirements(requests=requests or None,
                                                    limits=limits or None),
            termination_message_path=TERMINATION_LOG,
            termination_message_policy="FallbackToLogsOnError",
            security_context=container_security)
        labels = dict(COMPONENT)
        labels.update({LABEL_ANALYSIS: _label_value(spec.analysis_id),
                       LABEL_EXP: _label_value(str(spec.exp_id)),
                       LABEL_ATTEMPT: str(spec.attempt)})
        return client.V1Pod(
            api_version="v1", kind="Pod",
            metadata=client.V1ObjectMeta(
                name=name, namespace=self.namespace, labels=labels,
                annotations={ANNOTATION_ANALYSIS: spec.analysis_id,
                             "falcon.dev/result-path": spec.result_path}),
            spec=client.V1PodSpec(
                restart_policy="Never",
                active_deadline_seconds=max(1, int(spec.timeout_seconds)),
                termination_grace_period_seconds=self.grace_seconds,
                automount_service_account_token=False, enable_service_links=False,
                service_account_name=self.service_account or None,
                image_pull_secrets=[client.V1LocalObjectReference(name=s)
                                    for s in self.image_pull_secrets] or None,
                security_context=pod_security,
                containers=[container], volumes=volumes))

    # -- the contract -----------------------------------------------------------------------

    def _call(self, fn, *args, **kwargs):
        try:
            return self.caller.call(fn, *args, **kwargs)
        except ApiException:
            raise
        except Exception as exc:  # timeouts, resets after the caller's retries
            raise BackendError(f"the Kubernetes API did not answer: {exc}") from exc

    def start(self, spec: RunSpec) -> StartResult:
        """Create the analysis Pod, or adopt the Pod of that name when it is this analysis'
        (409 AlreadyExists: a create whose reply was lost, or a restart).

        Raises:
            RunConflict: a Pod of that name belongs to another analysis (not adopted, not
                deleted).
            BackendError: the API refused the Pod (its message) or did not answer.
        """
        with log_context(analysis_id=spec.analysis_id, exp_id=spec.exp_id):
            name = self.run_name(spec.analysis_id)
            try:
                self._call(self.core.create_namespaced_pod, self.namespace,
                           self.build_pod(spec))
                log.info("analysis %s: created Pod %s/%s (attempt %d)", spec.analysis_id,
                         self.namespace, name, spec.attempt)
                return StartResult(run_name=name, adopted=False, object_name=name)
            except ApiException as exc:
                if exc.status != 409:
                    raise BackendError(f"cannot create Pod {self.namespace}/{name}: "
                                       f"{exc.status} {_api_message(exc)}") from exc
            try:
                pod = self._call(self.core.read_namespaced_pod, name, self.namespace)
            except ApiException as exc:
                raise BackendError(f"Pod {name} exists but cannot be read: "
                                   f"{exc.status}") from exc
            owner = (pod.metadata.annotations or {}).get(ANNOTATION_ANALYSIS)
            if owner != spec.analysis_id:
                raise RunConflict(f"a Pod named {self.namespace}/{name} already exists for "
                                  f"{'analysis ' + owner if owner else 'something else'}, "
                                  f"not for analysis {spec.analysis_id}; it was left alone "
                                  "(name collision: delete it or rename the analysis)")
            log.info("analysis %s: adopted its Pod %s/%s", spec.analysis_id, self.namespace,
                     name)
            return StartResult(run_name=name, adopted=True, object_name=name)

    def _pods(self) -> dict[str, client.V1Pod]:
        try:
            pods = self.caller.list_all(self.core.list_namespaced_pod, self.namespace,
                                        label_selector=SELECTOR)
        except ApiException as exc:
            raise BackendError(f"cannot list analysis Pods: {exc.status} "
                               f"{_api_message(exc)}") from exc
        except Exception as exc:
            raise BackendError(f"the Kubernetes API did not answer: {exc}") from exc
        out = {}
        for pod in pods:
            analysis_id = (pod.metadata.annotations or {}).get(ANNOTATION_ANALYSIS)
            if analysis_id:
                out[analysis_id] = pod
        return out

    def observe(self, analysis_ids: Iterable[str]) -> dict[str, RunState]:
        """The RunState of each analysis from one LIST of analysis Pods (module docstring)."""
        pods = self._pods()
        now = self.clock()
        out = {}
        with self._lock:
            for analysis_id in analysis_ids:
                pod = pods.get(analysis_id)
                if pod is None:
                    if analysis_id in self._seen and analysis_id not in self._deleting:
                        out[analysis_id] = RunState(
                            phase=FAILED, alive=False, reason=POD_DELETED,
                            message=f"the Pod {self.run_name(analysis_id)} was deleted from "
                            "outside the analyzer (e.g. kubectl delete) while it ran; "
                            "output.log holds what it printed until then")
                    else:
                        out[analysis_id] = MISSING_STATE
                    continue
                self._seen.add(analysis_id)
                out[analysis_id] = self.pod_state(analysis_id, pod, now)
        return out

    def pod_state(self, analysis_id: str, pod: client.V1Pod, now: float) -> RunState:
        """Map one Pod's status to a RunState (the module docstring's table)."""
        status = pod.status or client.V1PodStatus()
        phase = status.phase or "Pending"
        if pod.metadata.deletion_timestamp and analysis_id not in self._deleting \
                and phase != "Succeeded":
            return RunState(phase=FAILED, alive=True, reason=POD_DELETED,
                            message=f"the Pod {pod.metadata.name} was deleted from outside "
                            "the analyzer (e.g. kubectl delete) while it ran")
        if phase == "Succeeded":
            return RunState(phase=SUCCEEDED, alive=True, exit_code=0)
        if phase == "Failed":
            return self._failed(pod, status)
        if phase == "Pending":
            return self._waiting_state(analysis_id, pod, status, now)
        for key in [k for k in self._waiting if k[0] == analysis_id]:
            del self._waiting[key]
        return RunState(phase=RUNNING, alive=True)

    def _waiting_state(self, analysis_id, pod, status, now) -> RunState:
        waiting = None
        for cs in status.container_statuses or []:
            if cs.state and cs.state.waiting and cs.state.waiting.reason:
                waiting = cs.state.waiting
        reason = waiting.reason if waiting else ""
        # ErrImagePull and ImagePullBackOff alternate: one kind, one timer.
        kind = "config" if reason in CONFIG_ERRORS else "pull" if reason in PULL_ERRORS else ""
        for key in [k for k in self._waiting if k[0] == analysis_id and k[1] != kind]:
            del self._waiting[key]
        if not kind:
            return RunState(phase=PENDING, alive=True)
        since = self._waiting.setdefault((analysis_id, kind), now)
        kubelet = (waiting.message or "").strip()
        if reason in CONFIG_ERRORS:
            if now - since < self.config_error_seconds:
                return RunState(phase=PENDING, alive=True)
            if "non-root" in kubelet or "as root" in kubelet:
                advice = (f"the image {self.image} runs as root, but analysis Pods run as "
                          f"non-root (runAsNonRoot): build it with a numeric non-root USER "
                          f"(e.g. `USER {self.run_as_user}:{self.run_as_user}`, see the "
                          "Dockerfile)")
            else:
                advice = ("the kubelet cannot create the container: check the image and "
                          "the Pod's configuration")
            return RunState(phase=FAILED, alive=True, reason=CONFIG_ERROR,
                            message=f"{advice} (kubelet: {reason}: {kubelet})")
        if now - since < self.start_timeout_seconds:
            return RunState(phase=PENDING, alive=True)
        return RunState(
            phase=FAILED, alive=True, reason=IMAGE_PULL_FAILED,
            message=f"cannot pull the analysis image {self.image} for "
            f"{self.start_timeout_seconds:g} s ({reason}: {kubelet}); check the image "
            "reference (FALCON_ANALYZER_IMAGE) and the registry credentials "
            "(FALCON_ANALYZER_IMAGE_PULL_SECRETS)")

    def _failed(self, pod: client.V1Pod, status: client.V1PodStatus) -> RunState:
        name = pod.metadata.name
        if status.reason == "Evicted":
            return RunState(phase=FAILED, alive=True, reason=EVICTED,
                            message=f"the Pod {name} was evicted by the kubelet: "
                            f"{status.message or 'node pressure'}")
        if status.reason == "DeadlineExceeded":
            return RunState(phase=FAILED, alive=True, reason=DEADLINE_EXCEEDED,
                            message=f"the Pod {name} ran longer than its "
                            f"activeDeadlineSeconds ({pod.spec.active_deadline_seconds} s, the "
                            "plugin's timeout_seconds) and was stopped")
        term = None
        for cs in status.container_statuses or []:
            if cs.state and cs.state.terminated:
                term = cs.state.terminated
        if term is None:
            return RunState(phase=FAILED, alive=True, reason="PodFailed",
                            message=f"the Pod {name} failed: {status.reason or ''} "
                            f"{status.message or ''}".strip())
        code = term.exit_code
        if term.reason == "OOMKilled":
            limit = ((pod.spec.containers[0].resources or client.V1ResourceRequirements())
                     .limits or {}).get("memory", "?")
            tail = self._log_tail(name)
            return RunState(phase=FAILED, alive=True, exit_code=code, reason=OOM_KILLED,
                            message=f"OOMKilled: the analysis used more than its memory limit "
                            f"({limit}); ask for more (--memory-limit)"
                            + (f"; log tail:\n{tail}" if tail else ""))
        runner = _runner_status(term.message)
        if runner is not None and runner.get("reason") in RUNNER_REASONS:
            return RunState(phase=FAILED, alive=True, exit_code=runner.get("exit_code"),
                            reason=runner["reason"], message=runner.get("message") or "")
        tail = (term.message or "").strip() or self._log_tail(name)
        return RunState(phase=FAILED, alive=True, exit_code=code, reason="NonZeroExit",
                        message=f"exited with code {code}"
                        + (f"; log tail:\n{log_tail(tail.encode())}" if tail else ""))

    def _log_tail(self, name: str) -> str:
        """The last lines of the Pod's log (pods/log), "" when it cannot be read."""
        try:
            text = self.caller.call(self.core.read_namespaced_pod_log, name, self.namespace,
                                    container=CONTAINER, tail_lines=20, limit_bytes=4096)
        except Exception:  # the log is a courtesy here; output.log in the store has it all
            return ""
        return log_tail((text or "").encode())

    def stop(self, analysis_id: str) -> bool:
        """Delete the analysis' Pod; True only once no Pod of it remains (or it stayed
        Terminating past `stuck_terminating_seconds`: logged and released).

        Raises:
            BackendError: the API refused or did not answer.
        """
        with log_context(analysis_id=analysis_id):
            name = self.run_name(analysis_id)
            try:
                pod = self._call(self.core.read_namespaced_pod, name, self.namespace)
            except ApiException as exc:
                if exc.status == 404:
                    self._forget(analysis_id)
                    return True
                raise BackendError(f"cannot read Pod {name}: {exc.status}") from exc
            if (pod.metadata.annotations or {}).get(ANNOTATION_ANALYSIS) != analysis_id:
                self._forget(analysis_id)
                return True  # another's Pod of that name: never deleted
            now = self.clock()
            with self._lock:
                since = self._deleting.setdefault(analysis_id, now)
            if not pod.metadata.deletion_timestamp:
                try:
                    self._call(self.core.delete_namespaced_pod, name, self.namespace,
                               grace_period_seconds=self.grace_seconds,
                               propagation_policy="Background")
                except ApiException as exc:
                    if exc.status == 404:
                        self._forget(analysis_id)
                        return True
                    raise BackendError(f"cannot delete Pod {name}: {exc.status}") from exc
                log.info("analysis %s: deleting Pod %s/%s (grace %d s)", analysis_id,
                         self.namespace, name, self.grace_seconds)
                return False
            if now - since >= self.stuck_terminating_seconds:
                log.warning("analysis %s: Pod %s/%s still Terminating %.0f s after its delete "
                            "(node NotReady?); its queue slot is released, the Pod is stuck",
                            analysis_id, self.namespace, name, now - since)
                self._forget(analysis_id)
                return True
            return False

    def _forget(self, analysis_id: str) -> None:
        with self._lock:
            self._seen.discard(analysis_id)
            self._deleting.pop(analysis_id, None)
            for key in [k for k in self._waiting if k[0] == analysis_id]:
                del self._waiting[key]

    def list_runs(self) -> list[str]:
        """The analysis ids of every analysis Pod in the namespace (one LIST)."""
        return sorted(self._pods())

    def read_log(self, analysis_id: str, result_path: str, offset: int = 0,
                 limit: int = 1 << 20) -> bytes:
        """output.log from the store (the runner uploads it while the Pod runs and at its
        end), so it reads the same after the Pod is gone."""
        url = (result_path if result_path.endswith("/") else result_path + "/") + "output.log"
        try:
            return store_for(url).read_range(url, offset, limit)
        except FileNotFoundError:
            return b""


def _api_message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "{}").get("message") or exc.reason or ""
    except ValueError:
        return exc.reason or ""


def _runner_status(message: str | None) -> dict | None:
    """The runner's exit status from a termination message, None when it is not one."""
    try:
        data = json.loads(message or "")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
