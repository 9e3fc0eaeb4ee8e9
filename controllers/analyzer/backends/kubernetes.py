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
| gone (or Terminating while it runs) though this process created or saw it and did not delete it | failed, `PodDeleted` (`PodDisappeared` when the API was unreachable meanwhile), `gone`: the run's stored outcome decides first |
| gone, never seen by this process | missing (recovery starts it again, unless the run stored its outcome) |
| could not be read (the API did not answer) | unknown: nothing is concluded |

What this process knows is never overruled by a read that may be older (docs/analyzer.md,
"Only what the controller knows"): a Pod it created or saw is absent from a LIST only as far as
that LIST is newer than the create or the sighting (resourceVersions compared as KEP-5504
allows) or a direct GET answers 404; otherwise the GET's Pod is used. A LIST that fails raises
`BackendError` and concludes nothing; a GET that fails leaves that run `unknown`.

`start` classifies the API's refusals: 400, 403, 422 and other 4xx (except 408, 409, 429) are
for good (`RunRefused`); 429, 5xx, timeouts and resets are transient (`BackendError`), and the
controller tries again after a back-off. A 409 is adopted when the Pod is this analysis'.

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
from controllers.cluster_backends.kubernetes.state import pod_end
from controllers.kubeclient import KubeCaller, compare_resource_versions, is_transient
from controllers.pod_security import RESTRICTED, security_contexts
from core.observability.logs import log_context

from .base import (
    FAILED, MISSING_STATE, PENDING, RUNNING, SUCCEEDED, UNKNOWN_STATE, AnalysisBackend,
    BackendError, RunConflict, RunRefused, RunSpec, RunState, StartResult, log_tail,
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
POD_DELETED, POD_DISAPPEARED, EVICTED, DEADLINE_EXCEEDED, OOM_KILLED = (
    "PodDeleted", "PodDisappeared", "Evicted", "DeadlineExceeded", "OOMKilled")
# The run's exit status, put by the runner beside its results once they are complete.
OUTCOME_FILE = "exit.json"
OUTCOME_MAX_BYTES = 64 * 1024
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
        # analysis id -> the resourceVersion at which this process last knew its Pod existed
        # (the create's answer, or the LIST it was in): it is gone only by a newer read.
        self._known: dict[str, str] = {}
        self._gap: set[str] = set()               # known Pods unread since a failed read
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
            self._known.clear()
            self._gap.clear()
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
                    enforces_resources=True, exit_url=spec.result_path + OUTCOME_FILE)
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

        The create's resourceVersion is remembered: until a read newer than it says otherwise,
        the Pod exists (a LIST that lags behind the create does not make it lost).

        Raises:
            RunConflict: a Pod of that name belongs to another analysis (not adopted, not
                deleted).
            RunRefused: the API refused the Pod for good (400/422 invalid, 403 forbidden, any
                4xx but 408, 409, 429), with its message.
            BackendError: the API did not answer or answered 408, 429 or 5xx (transient).
        """
        with log_context(analysis_id=spec.analysis_id, exp_id=spec.exp_id):
            name = self.run_name(spec.analysis_id)
            try:
                pod = self._call(self.core.create_namespaced_pod, self.namespace,
                                 self.build_pod(spec))
                self._remember(spec.analysis_id, pod)
                log.info("analysis %s: created Pod %s/%s (attempt %d)", spec.analysis_id,
                         self.namespace, name, spec.attempt)
                return StartResult(run_name=name, adopted=False, object_name=name)
            except ApiException as exc:
                if exc.status != 409:
                    error = RunRefused if not is_transient(exc) else BackendError
                    raise error(f"cannot create Pod {self.namespace}/{name}: "
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
            self._remember(spec.analysis_id, pod)
            log.info("analysis %s: adopted its Pod %s/%s", spec.analysis_id, self.namespace,
                     name)
            return StartResult(run_name=name, adopted=True, object_name=name)

    def _remember(self, analysis_id: str, pod: client.V1Pod, version: str = "") -> None:
        """This process knows the Pod existed at `version` (default: the Pod's own)."""
        with self._lock:
            self._known[analysis_id] = version or (pod.metadata.resource_version or "")
            self._gap.discard(analysis_id)

    def _pods(self) -> tuple[dict[str, client.V1Pod], str]:
        """Every analysis Pod by analysis id, and the LIST's resourceVersion.

        Raises:
            BackendError: the LIST failed (after the caller's retries and 410 restarts); the
                Pods this process knows are marked as unread since (`_gap`).
        """
        try:
            pods, version = self.caller.list_all_versioned(
                self.core.list_namespaced_pod, self.namespace, label_selector=SELECTOR)
        except Exception as exc:
            with self._lock:
                self._gap.update(self._known)
            if isinstance(exc, ApiException):
                raise BackendError(f"cannot list analysis Pods: {exc.status} "
                                   f"{_api_message(exc)}") from exc
            raise BackendError(f"the Kubernetes API did not answer: {exc}") from exc
        out = {}
        for pod in pods:
            analysis_id = (pod.metadata.annotations or {}).get(ANNOTATION_ANALYSIS)
            if analysis_id:
                out[analysis_id] = pod
        return out, version

    def observe(self, analysis_ids: Iterable[str]) -> dict[str, RunState]:
        """The RunState of each analysis from one LIST of analysis Pods (module docstring);
        a Pod absent from it is read directly unless the LIST is known to be newer than what
        this process knows of it.

        Raises:
            BackendError: the LIST failed: nothing is concluded about any run.
        """
        pods, version = self._pods()
        now = self.clock()
        out = {}
        for analysis_id in analysis_ids:
            pod = pods.get(analysis_id)
            if pod is None:
                out[analysis_id] = self._absent(analysis_id, version, now)
                continue
            self._remember(analysis_id, pod, version)
            with self._lock:
                out[analysis_id] = self.pod_state(analysis_id, pod, now)
        return out

    def _absent(self, analysis_id: str, list_version: str, now: float) -> RunState:
        """The state of a run whose Pod a LIST (at `list_version`) did not show."""
        with self._lock:
            if analysis_id in self._deleting:
                return MISSING_STATE  # our delete: `stop` confirms it is gone
            known = self._known.get(analysis_id)
        if known is not None and compare_resource_versions(list_version, known) == 1:
            return self._gone(analysis_id)
        # The LIST may be older than what this process knows (a lagging cache, another API
        # server), or this process never saw the Pod (a restart): a GET is read from etcd.
        name = self.run_name(analysis_id)
        try:
            pod = self._call(self.core.read_namespaced_pod, name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return self._gone(analysis_id) if known is not None else MISSING_STATE
            log.warning("analysis %s: Pod %s absent from the list and unreadable (%s): "
                        "nothing concluded this tick", analysis_id, name, exc.status)
            return UNKNOWN_STATE
        except BackendError as exc:
            log.warning("analysis %s: Pod %s absent from the list and unreadable (%s): "
                        "nothing concluded this tick", analysis_id, name, exc)
            return UNKNOWN_STATE
        if (pod.metadata.annotations or {}).get(ANNOTATION_ANALYSIS) != analysis_id:
            return MISSING_STATE  # another's Pod of that name: `start` refuses it
        log.info("analysis %s: Pod %s exists though the list (version %s) did not show it",
                 analysis_id, name, list_version or "?")
        self._remember(analysis_id, pod)
        with self._lock:
            return self.pod_state(analysis_id, pod, now)

    def _gone(self, analysis_id: str) -> RunState:
        """A Pod this process knew and did not delete is gone; the run's stored outcome, read
        by the controller (`stored_outcome`), decides before this."""
        name = self.run_name(analysis_id)
        with self._lock:
            in_gap = analysis_id in self._gap
        if in_gap:
            return RunState(
                phase=FAILED, alive=False, reason=POD_DISAPPEARED, gone=True,
                message=f"Pod disappeared: the Pod {name} was gone when the Kubernetes API "
                "answered again after an outage, and the run stored no exit status (it did "
                "not finish); output.log holds what it printed until then")
        return RunState(
            phase=FAILED, alive=False, reason=POD_DELETED, gone=True,
            message=f"the Pod {name} was deleted from outside the analyzer (e.g. kubectl "
            "delete) while it ran, and the run stored no exit status (it did not finish); "
            "output.log holds what it printed until then")

    def stored_outcome(self, analysis_id: str, result_path: str,
                       attempt: int) -> RunState | None:
        """The exit status run `attempt` put to `{result_path}exit.json` (the runner's last
        write, after the results and output.log), as a RunState; None when there is none or
        it is an earlier attempt's.

        Raises:
            BackendError: the store could not be read.
        """
        url = (result_path if result_path.endswith("/") else result_path + "/") + OUTCOME_FILE
        try:
            data = store_for(url).read_range(url, 0, OUTCOME_MAX_BYTES)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise BackendError(f"cannot read {url}: {exc}") from exc
        status = _runner_status(data.decode("utf-8", errors="replace"))
        if status is None or status.get("attempt", 1) != attempt:
            return None
        if not status.get("reason") and status.get("exit_code") == 0:
            return RunState(phase=SUCCEEDED, alive=False, exit_code=0)
        return RunState(phase=FAILED, alive=False, exit_code=status.get("exit_code"),
                        reason=status.get("reason") or "NonZeroExit",
                        message=status.get("message") or
                        f"exited with code {status.get('exit_code')}")

    def pod_state(self, analysis_id: str, pod: client.V1Pod, now: float) -> RunState:
        """Map one Pod's status to a RunState (the module docstring's table)."""
        status = pod.status or client.V1PodStatus()
        phase = status.phase or "Pending"
        if pod.metadata.deletion_timestamp and analysis_id not in self._deleting \
                and phase not in ("Succeeded", "Failed"):
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
        # Who ended the Pod when the cluster did (evicted, preempted, node lost or shut down):
        # one table for task and analysis Pods (`kubernetes.state.pod_end`).
        end = pod_end(pod)
        if end is not None and status.reason != "DeadlineExceeded":
            return RunState(phase=FAILED, alive=True, reason=EVICTED,
                            message=f"the Pod {name} was ended by the cluster, not the "
                            f"plugin: {end.verb} ({end.reason}): {end.detail or 'no message'};"
                            " create the analysis again")
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
            self._known.pop(analysis_id, None)
            self._gap.discard(analysis_id)
            self._deleting.pop(analysis_id, None)
            for key in [k for k in self._waiting if k[0] == analysis_id]:
                del self._waiting[key]

    def list_runs(self) -> list[str]:
        """The analysis ids of every analysis Pod in the namespace (one LIST)."""
        return sorted(self._pods()[0])

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
