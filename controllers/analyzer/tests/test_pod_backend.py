"""The Kubernetes Pod backend against the fake API server, with the real `kubernetes` client:
the Pod it builds (restricted Pod Security Standard, resources, deadline, scratch volumes), its
deterministic name and adoption, and the mapping of each Pod status to the analysis' outcome."""
from __future__ import annotations

import json
import threading

import kubernetes_validate
import pytest
from kubernetes import client

from controllers.analyzer.backends.base import RunConflict, RunSpec, run_name_for
from controllers.analyzer.backends.kubernetes import PodAnalysisBackend
from controllers.kubeclient import KubeCaller, KubeConnection, api_client
from core.testing import wait_until

from .fake_pods import FakePodKube

NS = "falcon"
K8S_VERSION = "1.37.0"
RES = {"cpu_request": "500m", "cpu_limit": "1", "memory_request": "256Mi",
       "memory_limit": "1Gi"}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def kube():
    fake = FakePodKube().serve()
    yield fake
    fake.close()


def make_backend(kube, tmp_path, **kwargs):
    conn = KubeConnection(kubeconfig=str(kube.kubeconfig(tmp_path / "kubeconfig")),
                          retries=2, request_timeout=1.0, backoff_initial=0.01,
                          backoff_max=0.05)
    kwargs.setdefault("clock", Clock())
    return PodAnalysisBackend(client.CoreV1Api(api_client(conn)), KubeCaller(conn), NS,
                              "ghcr.io/example/falcon:1", **kwargs)


def spec(analysis_id="an-1", **kw):
    kw.setdefault("resources", RES)
    return RunSpec(analysis_id=analysis_id, exp_id=7, command="trace-summary",
                   artifact_path="gs://b/exps/7", result_path=f"gs://b/analysis/7/{analysis_id}/",
                   plugin_name="trace-summary", timeout_seconds=900, **kw)


# -- the Kubernetes "restricted" Pod Security Standard, field by field -------------------------
# https://kubernetes.io/docs/concepts/security/pod-security-standards/ (baseline + restricted).

ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret"}
ALLOWED_CAPS_ADD = {"NET_BIND_SERVICE"}


def restricted_violations(pod: dict) -> list[str]:
    """Every rule of the restricted profile the Pod (API JSON form) breaks."""
    out = []
    spec = pod["spec"]
    psc = spec.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"spec.{key}")
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            out.append(f"volume {v['name']}: {kinds - ALLOWED_VOLUMES}")
    if (psc.get("seLinuxOptions") or {}).get("type") not in (None, "", "container_t",
                                                              "container_init_t",
                                                              "container_kvm_t"):
        out.append("seLinuxOptions.type")
    if psc.get("sysctls"):
        out.append("sysctls")
    if psc.get("runAsUser") == 0:
        out.append("spec.securityContext.runAsUser 0")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    containers = (spec.get("initContainers") or []) + spec["containers"] + \
        (spec.get("ephemeralContainers") or [])
    for c in containers:
        sc = c.get("securityContext") or {}
        where = f"container {c['name']}"
        if sc.get("privileged"):
            out.append(f"{where}: privileged")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"{where}: procMount")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"{where}: hostPort")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}: allowPrivilegeEscalation must be false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{where}: capabilities.drop must hold ALL")
        if set(caps.get("add") or []) - ALLOWED_CAPS_ADD:
            out.append(f"{where}: capabilities.add")
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{where}: runAsNonRoot must be true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(f"{where}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{where}: seccompProfile must be RuntimeDefault or Localhost")
    return out


def pod_json(backend, s=None):
    return client.ApiClient().sanitize_for_serialization(backend.build_pod(s or spec()))


def test_the_pod_passes_the_restricted_pod_security_standard_and_the_schema(kube, tmp_path):
    pod = pod_json(make_backend(kube, tmp_path))
    assert restricted_violations(pod) == []
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    c = pod["spec"]["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert isinstance(pod["spec"]["securityContext"]["runAsUser"], int)
    assert pod["spec"]["securityContext"]["runAsUser"] > 0
    # The check can fail: each relaxation is caught.
    for path, value in [(("securityContext", "allowPrivilegeEscalation"), True),
                        (("securityContext", "capabilities"), {"drop": ["NET_RAW"]}),
                        (("securityContext", "runAsNonRoot"), False),
                        (("securityContext", "privileged"), True)]:
        bad = json.loads(json.dumps(pod))
        bad["spec"]["containers"][0][path[0]][path[1]] = value
        assert restricted_violations(bad)
    bad = json.loads(json.dumps(pod))
    bad["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    assert restricted_violations(bad)


def test_the_pod_carries_name_labels_resources_deadline_and_scratch(kube, tmp_path):
    backend = make_backend(kube, tmp_path)
    pod = pod_json(backend, spec("an-XY_z", attempt=2))
    meta, podspec = pod["metadata"], pod["spec"]
    assert meta["name"] == run_name_for("an-XY_z") == "analysis-an-xy-z"
    assert meta["labels"]["falcon.dev/analysis-id"] == "an-XY_z"
    assert meta["labels"]["falcon.dev/exp-id"] == "7"
    assert meta["annotations"]["falcon.dev/analysis-id"] == "an-XY_z"
    c = podspec["containers"][0]
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "256Mi"},
                              "limits": {"cpu": "1", "memory": "1Gi"}}
    assert podspec["activeDeadlineSeconds"] == 900 and podspec["restartPolicy"] == "Never"
    assert podspec["automountServiceAccountToken"] is False
    env = {e["name"]: e["value"] for e in c["env"]}
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {env["HOME"], env["TMPDIR"]} <= mounts
    assert env["XDG_CACHE_HOME"].startswith(env["HOME"]) and \
        env["MPLCONFIGDIR"].startswith(env["HOME"])
    assert all(v["emptyDir"]["sizeLimit"] for v in podspec["volumes"])
    run = json.loads(env["FALCON_RUN_SPEC"])
    assert run["analysis_id"] == "an-XY_z" and run["work_dir"].startswith("/work")
    assert run["attempt"] == 2 and run["enforces_resources"] is True
    assert c["command"][-2:] == ["--termination-log", "/dev/termination-log"]


def test_start_is_idempotent_and_never_adopts_a_foreign_pod(kube, tmp_path):
    backend = make_backend(kube, tmp_path)
    assert backend.start(spec("an-1")).adopted is False
    assert backend.start(spec("an-1")).adopted is True  # 409 -> read, ours
    assert len(kube.pods(NS)) == 1
    foreign = pod_json(backend, spec("an-2"))
    foreign["metadata"]["annotations"]["falcon.dev/analysis-id"] = "someone-else"
    kube.put_object("pods", NS, foreign)
    with pytest.raises(RunConflict, match="someone-else"):
        backend.start(spec("an-2"))
    assert kube.get("pods", NS, "analysis-an-2")["metadata"]["annotations"][
        "falcon.dev/analysis-id"] == "someone-else"


def test_a_create_whose_reply_was_lost_makes_one_pod(kube, tmp_path):
    backend = make_backend(kube, tmp_path)
    # The first create is stored but its reply comes after the client's read timeout: it is
    # held until the retry arrives, and the retry is held until the first one stored its Pod,
    # so the retry meets the Pod (409) and adopts it.
    first, retry = threading.Event(), threading.Event()
    kube.inject("POST", "pods", hold=first)
    kube.inject("POST", "pods", action=first.set, hold=retry)

    def release_the_retry() -> None:
        wait_until(lambda: kube.pods(NS), what="the first create to store its Pod")
        retry.set()

    releaser = threading.Thread(target=release_the_retry, daemon=True)
    releaser.start()
    assert backend.start(spec("an-2")).object_name == "analysis-an-2"
    releaser.join(60)
    assert kube.count("POST", "pods") == 2 and len(kube.pods(NS)) == 1
    assert [r.code for r in kube.requests if r.method == "POST"][1] == 409  # adopted


def state(backend, analysis_id="an-1"):
    return backend.observe([analysis_id])[analysis_id]


def test_pending_running_succeeded(kube, tmp_path):
    backend = make_backend(kube, tmp_path)
    assert state(backend).phase == "missing"
    backend.start(spec())
    assert state(backend).phase == "pending"
    kube.run(NS, "analysis-an-1")
    assert state(backend).phase == "running"
    kube.succeed(NS, "analysis-an-1")
    s = state(backend)
    assert (s.phase, s.exit_code, s.alive) == ("succeeded", 0, True)


def test_failed_with_exit_code_and_log_tail(kube, tmp_path):
    backend = make_backend(kube, tmp_path)
    backend.start(spec())
    runner = {"exit_code": 3, "reason": "NonZeroExit",
              "message": "exited with code 3; log tail:\nTraceback\nKeyError: 'ts'"}
    kube.fail(NS, "analysis-an-1", 3, message=json.dumps(runner))
    s = state(backend)
    assert (s.phase, s.reason, s.exit_code) == ("failed", "NonZeroExit", 3)
    assert "KeyError: 'ts'" in s.message
    # No runner status (it died): the kubelet's fallback message or the Pod's log tail.
    backend.start(spec("an-2"))
    kube.set_log(NS, "analysis-an-2", "line 1\nSegmentation fault\n")
    kube.fail(NS, "analysis-an-2", 139)
    s = state(backend, "an-2")
    assert (s.reason, s.exit_code) == ("NonZeroExit", 139)
    assert "exited with code 139" in s.message and "Segmentation fault" in s.message


def test_oomkilled_evicted_and_deadline_are_named(kube, tmp_path):
    backend = make_backend(kube, tmp_path)
    for n in ("an-1", "an-2", "an-3"):
        backend.start(spec(n))
    kube.set_log(NS, "analysis-an-1", "loading 5 GB\n")
    kube.fail(NS, "analysis-an-1", 137, reason="OOMKilled")
    kube.evict(NS, "analysis-an-2")
    kube.deadline(NS, "analysis-an-3")
    states = backend.observe(["an-1", "an-2", "an-3"])
    assert states["an-1"].reason == "OOMKilled" and "1Gi" in states["an-1"].message
    assert "loading 5 GB" in states["an-1"].message
    assert states["an-2"].reason == "Evicted" and "low on resource" in states["an-2"].message
    assert states["an-3"].reason == "DeadlineExceeded" and "900" in states["an-3"].message
    assert all(s.phase == "failed" for s in states.values())


def test_a_preempted_or_node_lost_analysis_pod_reads_as_the_clusters_doing(kube, tmp_path):
    """Task and analysis Pods share one table of who ended a Pod (kubernetes.state.pod_end):
    a preemption (DisruptionTarget) is named as such, not as the plugin's exit code 137."""
    backend = make_backend(kube, tmp_path)
    backend.start(spec("an-1"))
    kube.set_pod_status(NS, "analysis-an-1", {
        "phase": "Failed",
        "conditions": [{"type": "DisruptionTarget", "status": "True",
                        "reason": "PreemptionByScheduler",
                        "message": "Preempted in order to admit critical pod"}],
        "containerStatuses": [{"name": "analysis", "ready": False, "restartCount": 0,
                               "image": "x", "imageID": "", "state": {"terminated": {
                                   "exitCode": 137, "reason": "Error"}}}]})
    s = backend.observe(["an-1"])["an-1"]
    assert s.phase == "failed" and s.reason == "Evicted"
    assert "preempted (PreemptionByScheduler)" in s.message
    assert "critical pod" in s.message and "not the plugin" in s.message


def test_a_root_image_under_run_as_non_root_fails_after_the_confirmation_window(kube,
                                                                                 tmp_path):
    clock = Clock()
    backend = make_backend(kube, tmp_path, clock=clock, config_error_seconds=10)
    backend.start(spec())
    kube.wait(NS, "analysis-an-1", "CreateContainerConfigError",
              "container has runAsNonRoot and image will run as root (pod: ...)")
    assert state(backend).phase == "pending"
    clock.now += 10
    s = state(backend)
    assert (s.phase, s.reason) == ("failed", "CreateContainerConfigError")
    assert "runs as root" in s.message and "USER 10001" in s.message


def test_image_pull_failure_fails_after_the_start_timeout_naming_the_image(kube, tmp_path):
    clock = Clock()
    backend = make_backend(kube, tmp_path, clock=clock, start_timeout_seconds=300)
    backend.start(spec())
    for minute in range(5):
        kube.wait(NS, "analysis-an-1", "ErrImagePull" if minute % 2 else "ImagePullBackOff",
                  'Back-off pulling image "ghcr.io/example/falcon:1"')
        assert state(backend).phase == "pending"
        clock.now += 59
    clock.now += 10
    s = state(backend)
    assert (s.phase, s.reason) == ("failed", "ImagePullFailed")
    assert "ghcr.io/example/falcon:1" in s.message and "ImagePullBackOff" in s.message


def test_slow_starts_and_unschedulable_pods_are_not_failed(kube, tmp_path):
    clock = Clock()
    backend = make_backend(kube, tmp_path, clock=clock, start_timeout_seconds=60,
                           config_error_seconds=5)
    backend.start(spec())
    kube.wait(NS, "analysis-an-1", "ContainerCreating")
    clock.now += 90
    assert state(backend).phase == "pending"
    kube.set_pod_status(NS, "analysis-an-1", {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})
    clock.now += 300
    assert state(backend).phase == "pending"
    kube.run(NS, "analysis-an-1")
    assert state(backend).phase == "running"


def test_a_pod_deleted_from_outside_fails_with_that_reason(kube, tmp_path):
    backend = make_backend(kube, tmp_path)
    backend.start(spec())
    kube.run(NS, "analysis-an-1")
    assert state(backend).phase == "running"
    kube.kubectl_delete(NS, "analysis-an-1")  # kubectl delete pod
    s = state(backend)
    assert (s.phase, s.reason, s.alive) == ("failed", "PodDeleted", False)
    assert "deleted from outside" in s.message
    # A Pod never seen by this process (a restart) is missing: recovery starts it again.
    assert make_backend(kube, tmp_path).observe(["an-1"])["an-1"].phase == "missing"


def test_a_terminating_pod_holds_its_slot_until_gone_or_stuck(tmp_path):
    kube = FakePodKube(linger_pods=True).serve()
    try:
        clock = Clock()
        backend = make_backend(kube, tmp_path, clock=clock, stuck_terminating_seconds=120)
        backend.start(spec("an-1"))
        backend.start(spec("an-2"))
        kube.run(NS, "analysis-an-1")
        assert backend.stop("an-1") is False  # delete sent
        assert kube.get("pods", NS, "analysis-an-1")["metadata"]["deletionTimestamp"]
        clock.now += 30
        assert backend.stop("an-1") is False  # still Terminating: slot held
        kube.reap()
        assert backend.stop("an-1") is True
        # A node that never confirms: released after the stuck deadline.
        assert backend.stop("an-2") is False
        clock.now += 119
        assert backend.stop("an-2") is False
        clock.now += 2
        assert backend.stop("an-2") is True
        assert kube.count("DELETE", "pods") == 2
    finally:
        kube.close()


def test_list_runs_and_log_reads(kube, tmp_path):
    backend = make_backend(kube, tmp_path)
    backend.start(spec("an-1"))
    backend.start(spec("an-2"))
    assert backend.list_runs() == ["an-1", "an-2"]
    out = tmp_path / "out"
    out.mkdir()
    (out / "output.log").write_bytes(b"hello\n")
    assert backend.read_log("an-1", out.as_uri() + "/", 1, 3) == b"ell"
    assert backend.read_log("an-1", (tmp_path / "none").as_uri(), 0) == b""


# -- what the backend knows: lagging lists, failed reads, the run's stored outcome -----------

def test_a_pod_absent_from_a_lagging_list_is_read_directly_or_left_unknown(kube, tmp_path):
    backend = make_backend(kube, tmp_path)
    kube.freeze_list()  # the list lags behind the create
    backend.start(spec())
    assert state(backend).phase == "pending"  # read directly: it exists
    kube.run(NS, "analysis-an-1")
    assert state(backend).phase == "running"
    kube.inject("GET", "pods", name="analysis-an-1", status=503, times=100)
    s = state(backend)
    assert (s.phase, s.alive) == ("unknown", True)  # nothing concluded
    kube.end_faults()
    kube.kubectl_delete(NS, "analysis-an-1")
    s = state(backend)
    assert (s.phase, s.reason, s.gone) == ("failed", "PodDeleted", True)


def test_a_failed_list_raises_and_a_pod_gone_meanwhile_disappeared(kube, tmp_path):
    from controllers.analyzer.backends.base import BackendError

    backend = make_backend(kube, tmp_path)
    backend.start(spec())
    assert state(backend).phase == "pending"
    kube.inject("GET", "pods", status=500, times=100)
    with pytest.raises(BackendError, match="cannot list analysis Pods: 500"):
        state(backend)
    kube.kubectl_delete(NS, "analysis-an-1")
    kube.end_faults()
    s = state(backend)
    assert (s.phase, s.reason, s.gone) == ("failed", "PodDisappeared", True)
    assert s.message.startswith("Pod disappeared")


@pytest.mark.parametrize("status,permanent", [(400, True), (403, True), (422, True),
                                              (429, False), (500, False), (503, False)])
def test_create_refusals_are_classified(kube, tmp_path, status, permanent):
    from controllers.analyzer.backends.base import BackendError, RunRefused

    backend = make_backend(kube, tmp_path)
    kube.inject("POST", "pods", status=status, times=10)
    with pytest.raises(BackendError) as caught:
        backend.start(spec())
    assert isinstance(caught.value, RunRefused) is permanent
    assert str(status) in str(caught.value)


def test_a_terminating_pod_that_failed_keeps_its_own_outcome(tmp_path):
    kube = FakePodKube(linger_pods=True).serve()
    try:
        backend = make_backend(kube, tmp_path)
        backend.start(spec())
        kube.fail(NS, "analysis-an-1", 3, message=json.dumps(
            {"exit_code": 3, "reason": "NonZeroExit", "message": "exited with code 3"}))
        kube.kubectl_delete(NS, "analysis-an-1")  # the Pod GC, or kubectl, after it ended
        s = state(backend)
        assert (s.phase, s.reason, s.exit_code) == ("failed", "NonZeroExit", 3)
    finally:
        kube.close()


def test_the_stored_outcome_of_the_same_attempt_decides(kube, tmp_path):
    backend = make_backend(kube, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    url = out.as_uri() + "/"
    assert backend.stored_outcome("an-1", url, 1) is None  # it did not finish
    (out / "exit.json").write_text(json.dumps({"exit_code": 0, "reason": "", "attempt": 1}))
    assert backend.stored_outcome("an-1", url, 1).phase == "succeeded"
    assert backend.stored_outcome("an-1", url, 2) is None  # an earlier attempt's
    (out / "exit.json").write_text(json.dumps(
        {"exit_code": 2, "reason": "NonZeroExit", "message": "exited with code 2",
         "attempt": 2}))
    s = backend.stored_outcome("an-1", url, 2)
    assert (s.phase, s.reason, s.exit_code) == ("failed", "NonZeroExit", 2)


def test_resource_versions_compare_only_as_kep_5504_allows():
    from controllers.kubeclient import compare_resource_versions as cmp

    assert (cmp("1001", "999"), cmp("5", "5"), cmp("12", "100")) == (1, 0, -1)
    for a, b in [("", "5"), ("0", "5"), ("05", "5"), ("abc", "5"), (None, "5"), ("5", "-1")]:
        assert cmp(a, b) is None
