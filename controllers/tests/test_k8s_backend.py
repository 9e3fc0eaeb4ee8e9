"""The Kubernetes backend through the real `kubernetes` client against the loopback fake API.

Covers, by the IDs of docs/cluster-behaviours.md: the Job a Falcon Job becomes (Indexed,
completions = parallelism = replica x hosts, TPU/GPU mapping, env, labels, names: CB-1, CB-9),
create / adopt (CB-3), one LIST per cluster per tick and the QPS bound (CB-4), paging and 410
Gone, retries with backoff and timeouts (CB-16), delete with propagation that removes Pods
(CB-13, CB-14).
"""
from __future__ import annotations

import json
import re
import threading

import pytest
from kubernetes import client

from controllers.contract import JobView
from core.domain.taskspec import TaskSpec
from controllers.cluster_backends.base import BackendError, ClusterJobStatus, PermanentBackendError
from clusters.devices import DeviceTable
from controllers.cluster_backends.kubernetes import (
    K8S_JOB_NAME_MAX,
    KubernetesBackend,
    KubernetesClusterConfig,
)
from controllers.kubeclient import KubeCaller, KubeConnection, TokenBucket
from core.testing import FakeClock
from core.testing import wait_until as poll_until
from controllers.tests.fake_k8s import fake_kube, kubeconfig  # noqa: F401

NS = "falcon-jobs"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def job_view(job_id: int = 7, *, exp_id: int = 3, exp_name: str = "demo", role: str = "main",
             **spec) -> JobView:
    task_spec = {"command": "python -u train.py", "replica": 1, "image": "gcr.io/acme/t:1",
                 "device_type": "", "device_count": 0, "device_topo": "", "envs": {}}
    task_spec.update(spec)
    return JobView(id=job_id, exp_id=exp_id, exp_name=exp_name, exp_status="Created",
                   role=role, cluster_name="k8s-a", exp_type="profiling",
                   task_spec=TaskSpec.from_json(task_spec),
                   artifact_path=f"gs://bucket/falcon/{exp_id}/{role}", config="model: x\n",
                   status="Pending")


def make_backend(kubeconfig=None, **overrides) -> KubernetesBackend:
    conn = KubeConnection(kubeconfig=str(kubeconfig) if kubeconfig else "",
                          request_timeout=overrides.pop("request_timeout", 5.0),
                          retries=overrides.pop("retries", 3), backoff_initial=0.01,
                          backoff_max=0.05, qps=1000, burst=1000)
    # A tick waits for its caches at most `cache_sync_wait` and goes on as soon as they caught
    # up: a loaded machine may need more than the product's 1 s for a watch event, and these
    # tests are about what a caught-up cache yields (test_k8s_stale_cache.py covers lag).
    overrides.setdefault("cache_sync_wait", 60)
    return KubernetesBackend("k8s-a", KubernetesClusterConfig(namespace=NS, connection=conn,
                                                              **overrides))


@pytest.fixture
def backend(kubeconfig):
    return make_backend(kubeconfig)


def env_of(job: client.V1Job) -> dict[str, str]:
    return {e.name: e.value for e in job.spec.template.spec.containers[0].env}


# -- building the Job -----------------------------------------------------------------------------

def test_a_cpu_job_is_an_indexed_job_with_every_replica_a_completion():
    job = make_backend().build_job(job_view(replica=3, envs={"LOG_LEVEL": "info"}))
    spec = job.spec
    assert (spec.completion_mode, spec.completions, spec.parallelism) == ("Indexed", 3, 3)
    assert spec.backoff_limit == 0 and spec.ttl_seconds_after_finished == 86400
    pod = spec.template.spec
    assert pod.restart_policy == "Never" and pod.subdomain == "falcon-3-demo-main"
    container = pod.containers[0]
    assert container.command[:2] == ["/bin/sh", "-c"]
    assert container.command[2].endswith("\npython -u train.py")
    assert container.image == "gcr.io/acme/t:1" and container.resources is None
    env = env_of(job)
    assert env["CUSTOM_CONFIG_KEY"] == "model: x\n" and env["LOG_LEVEL"] == "info"
    assert (env["FALCON_EXP_ID"], env["FALCON_JOB_ID"], env["FALCON_ROLE"]) == ("3", "7", "main")
    assert env["FALCON_REPLICA_COUNT"] == "3" and env["FALCON_HOSTS_PER_REPLICA"] == "1"
    assert env["FALCON_ARTIFACT_PATH"] == "gs://bucket/falcon/3/main"
    assert env["FALCON_WORKER_HOSTNAMES"].split(",")[2] == "falcon-3-demo-main-2.falcon-3-demo-main"
    labels = {"falcon.io/exp-id": "3", "falcon.io/job-id": "7", "falcon.io/role": "main",
              "app.kubernetes.io/managed-by": "falcon"}
    assert job.metadata.labels == labels and spec.template.metadata.labels == labels


@pytest.mark.parametrize("spec,expect", [
    # A multi-host TPU slice: one replica, one Pod per host.
    ({"device_type": "tpu-v5p", "device_count": 8, "device_topo": "2x2x2"}, ["0/0", "0/1"]),
    # GPU replicas: one Pod each.
    ({"replica": 3, "device_type": "h100", "device_count": 8}, ["0/0", "1/0", "2/0"]),
])
def test_the_replica_and_host_index_come_from_the_completion_index(spec, expect):
    import subprocess

    job = make_backend().build_job(job_view(
        command='echo "$FALCON_REPLICA_INDEX/$FALCON_HOST_INDEX"', **spec))
    script = job.spec.template.spec.containers[0].command
    outs = [subprocess.run(script, env={"JOB_COMPLETION_INDEX": str(i), "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, check=True).stdout.strip()
            for i in range(job.spec.completions)]
    assert outs == expect


def test_a_tpu_role_with_several_replicas_is_never_built():
    # An experiment accepted before validate refused it must not become one Job that GKE
    # wires as one slice.
    with pytest.raises(PermanentBackendError, match="one replica per role"):
        make_backend().build_job(job_view(replica=2, device_type="tpu-v5p", device_count=8,
                                          device_topo="2x2x2"))


def test_multi_host_tpu_v5p_runs_one_pod_per_host_with_that_hosts_chips():
    job = make_backend().build_job(job_view(replica=1, device_type="tpu-v5p", device_count=8,
                                            device_topo="2x2x2"))
    assert (job.spec.completions, job.spec.parallelism) == (2, 2)
    pod = job.spec.template.spec
    res = pod.containers[0].resources
    assert res.limits == {"google.com/tpu": "4"} and res.requests == {"google.com/tpu": "4"}
    assert pod.node_selector == {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                                 "cloud.google.com/gke-tpu-topology": "2x2x2"}
    assert pod.subdomain == job.metadata.name
    assert env_of(job)["FALCON_HOSTS_PER_REPLICA"] == "2"


@pytest.mark.parametrize("device_type,count,topo,pods,chips,accelerator", [
    ("tpu-v5p", 4, "2x2x1", 1, "4", "tpu-v5p-slice"),
    ("tpu-v5e", 8, "2x4", 1, "8", "tpu-v5-lite-podslice"),
    ("tpu-v5litepod", 16, "4x4", 4, "4", "tpu-v5-lite-podslice"),
    ("tpu-v6e", 4, "2x2", 1, "4", "tpu-v6e-slice"),
    ("tpu-v4", 16, "2x2x4", 4, "4", "tpu-v4-podslice"),
])
def test_tpu_types_map_to_gke_labels_and_hosts(device_type, count, topo, pods, chips,
                                               accelerator):
    job = make_backend().build_job(job_view(device_type=device_type, device_count=count,
                                            device_topo=topo))
    assert job.spec.completions == pods
    pod = job.spec.template.spec
    assert pod.containers[0].resources.limits == {"google.com/tpu": chips}
    assert pod.node_selector["cloud.google.com/gke-tpu-accelerator"] == accelerator
    assert pod.node_selector["cloud.google.com/gke-tpu-topology"] == topo


def test_gpu_maps_to_nvidia_gpu_and_the_gke_accelerator_label():
    job = make_backend().build_job(job_view(replica=2, device_type="h100", device_count=8))
    pod = job.spec.template.spec
    assert job.spec.completions == 2
    assert pod.containers[0].resources.limits == {"nvidia.com/gpu": "8"}
    assert pod.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


def test_an_operator_device_entry_extends_the_table():
    table = DeviceTable({"tpu-v7x": {"kind": "tpu", "topology_dims": 3, "chips_per_host": 4,
                                     "node_selector": {"cloud.google.com/gke-tpu-accelerator":
                                                       "tpu7x"}}})
    backend = make_backend(devices=table)
    job = backend.build_job(job_view(device_type="tpu-v7x", device_count=8, device_topo="2x2x2"))
    assert job.spec.completions == 2
    assert job.spec.template.spec.node_selector["cloud.google.com/gke-tpu-accelerator"] == "tpu7x"
    assert backend.validate(job_view(device_type="tpu-v7x", device_count=8,
                                     device_topo="2x2x2").task_spec.to_json()) == {}


def test_names_are_deterministic_dns_labels_short_enough_for_pod_hostnames():
    backend = make_backend()
    long_role = "r" * 63
    a = backend.cluster_job_name(job_view(exp_id=123456, exp_name="A very long Name" * 5,
                                          role=long_role))
    b = backend.cluster_job_name(job_view(exp_id=123456, exp_name="A very long Name" * 5,
                                          role=long_role[:-1] + "s"))
    assert a == backend.cluster_job_name(job_view(exp_id=123456,
                                                  exp_name="A very long Name" * 5,
                                                  role=long_role))
    assert a != b
    for name in (a, b):
        assert len(name) <= K8S_JOB_NAME_MAX and DNS_LABEL.match(name)
        assert len(f"{name}-9999999999") <= 63 and name.startswith("falcon-123456-")


@pytest.mark.parametrize("spec,field", [
    ({"image": ""}, "image"),
    ({"command": ""}, "command"),
    ({"device_type": "tpu-v5p", "device_count": 8, "device_topo": "2x2x1"}, "device_topo"),
    ({"device_type": "tpu-v5p", "device_count": 8, "device_topo": "2x4"}, "device_topo"),
    ({"device_type": "tpu-v5p", "device_count": 8, "device_topo": ""}, "device_topo"),
    ({"device_type": "tpu-v9z", "device_count": 8, "device_topo": "2x2x2"}, "device_type"),
    ({"device_type": "h100", "device_count": 16}, "device_count"),
    ({"device_type": "h100", "device_count": 8, "device_topo": "2x4"}, "device_topo"),
    ({"device_count": 4}, "device_count"),
    ({"replica": 2, "device_type": "tpu-v5p", "device_count": 4, "device_topo": "2x2x1"},
     "replica"),
    ({"replica": 3, "device_type": "tpu-v5p", "device_count": 8, "device_topo": "2x2x2"},
     "replica"),
])
def test_validate_names_the_field_a_cluster_cannot_run(spec, field):
    problems = make_backend().validate(job_view(**spec).task_spec.to_json())
    assert list(problems) == [field], problems


def test_tpu_replicas_are_refused_with_a_hint_but_gpu_and_cpu_replicas_are_fine():
    backend = make_backend()
    problems = backend.validate(job_view(replica=2, device_type="tpu-v6e", device_count=4,
                                         device_topo="2x2").task_spec.to_json())
    assert "one replica per role" in problems["replica"][0]
    assert "several roles" in problems["replica"][0]
    assert backend.validate(job_view(replica=2, device_type="h100",
                                     device_count=8).task_spec.to_json()) == {}
    assert backend.validate(job_view(replica=4).task_spec.to_json()) == {}


def test_a_single_host_single_replica_tpu_job_has_no_subdomain_and_no_service(backend,
                                                                             fake_kube):
    # GKE's TPU webhook injects multi-host worker variables into Indexed Jobs WITH a subdomain:
    # a one-Pod slice must not look like one.
    view = job_view(replica=1, device_type="tpu-v5p", device_count=4, device_topo="2x2x1")
    job = backend.build_job(view)
    assert job.spec.completions == 1 and job.spec.template.spec.subdomain is None
    assert "FALCON_WORKER_HOSTNAMES" not in env_of(job)
    backend.submit(view)
    stored = fake_kube.get("jobs", NS, backend.cluster_job_name(view))
    assert "subdomain" not in stored["spec"]["template"]["spec"]
    assert fake_kube.list("services", NS) == [] and fake_kube.count("POST", "services") == 0


def test_validate_lists_the_known_device_types():
    problems = make_backend().validate(job_view(device_type="tpu-v9z", device_count=1,
                                                device_topo="1x1").task_spec.to_json())
    assert "tpu-v5p" in problems["device_type"][0] and "nvidia-h100-80gb" in \
        problems["device_type"][0]


# -- create, adopt, list ------------------------------------------------------------------------

def test_submit_creates_the_job_and_a_headless_service_owned_by_it(backend, fake_kube):
    view = job_view(replica=1, device_type="tpu-v5p", device_count=8, device_topo="2x2x2")
    result = backend.submit(view)
    assert result.created and result.cluster_job_name == "falcon-3-demo-main"
    stored = fake_kube.get("jobs", NS, "falcon-3-demo-main")
    assert stored["metadata"]["resourceVersion"] and stored["metadata"]["uid"]
    assert stored["spec"]["completionMode"] == "Indexed" and stored["spec"]["completions"] == 2
    svc = fake_kube.get("services", NS, "falcon-3-demo-main")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]


def test_submit_adopts_an_existing_job_on_409_and_never_creates_twice(backend, fake_kube):
    view = job_view()
    assert backend.submit(view).created
    # A restarted resource manager (new backend object) submits the same job again (CB-3).
    again = make_backend(backend.config.connection.kubeconfig).submit(view)
    assert not again.created and again.cluster_job_name == "falcon-3-demo-main"
    assert len(fake_kube.list("jobs", NS)) == 1
    assert fake_kube.count("POST", "jobs") == 2  # the second answered 409 AlreadyExists


def test_adopting_a_job_creates_its_missing_headless_service(backend, fake_kube):
    view = job_view(replica=1, device_type="tpu-v5p", device_count=8, device_topo="2x2x2")
    fake_kube.inject("POST", "services", status=503, times=4)  # 1 + 3 retries
    with pytest.raises(BackendError, match="create Service"):
        backend.submit(view)
    name = backend.cluster_job_name(view)
    assert fake_kube.get("jobs", NS, name) and fake_kube.get("services", NS, name) is None
    again = backend.submit(view)
    assert not again.created
    assert fake_kube.get("services", NS, name)["metadata"]["ownerReferences"][0]["uid"] == \
        fake_kube.get("jobs", NS, name)["metadata"]["uid"]
    assert backend.submit(view).cluster_job_name == name  # a Service that exists is kept


def test_an_invalid_job_is_a_permanent_error_with_the_api_servers_message(backend, fake_kube):
    with pytest.raises(PermanentBackendError,
                       match=r"422 .*spec\.template\.spec\.containers\[0\]\.image: "
                             r"Required value"):
        backend.submit(job_view(image=""))
    assert fake_kube.count("POST", "jobs") == 1  # not retried: it would answer the same
    assert fake_kube.list("jobs", NS) == []


@pytest.mark.parametrize("status,permanent", [(403, False), (404, True), (400, True),
                                              (422, True), (429, False), (401, False)])
def test_final_4xx_on_create_is_permanent_and_the_rest_is_retried(backend, fake_kube, status,
                                                                  permanent):
    fake_kube.inject("POST", "jobs", status=status, reason="X", times=10)
    with pytest.raises(BackendError, match=f"{status} ") as info:
        backend.submit(job_view())
    assert isinstance(info.value, PermanentBackendError) is permanent
    # 429 is retried within the call (kubeclient); 401/403 wait for the next tick.
    assert fake_kube.count("POST", "jobs") == (4 if status == 429 else 1)


def test_a_job_of_that_name_for_another_falcon_job_is_not_adopted(backend, fake_kube):
    backend.submit(job_view(job_id=7))
    with pytest.raises(BackendError, match="belongs to falcon job 7"):
        backend.submit(job_view(job_id=8))


def test_observe_reads_each_cluster_with_one_list_for_any_number_of_jobs(kubeconfig, fake_kube):
    backend = make_backend(kubeconfig, watch=False)
    views = [job_view(job_id=i, exp_id=i, exp_name=f"e{i}") for i in range(1, 31)]
    for view in views:
        backend.submit(view)
        name = backend.cluster_job_name(view)
        fake_kube.set_job_status(NS, name, {"active": 1, "ready": 1})
    fake_kube.reset_requests()
    states = backend.observe(views)
    assert {s.status for s in states.values()} == {ClusterJobStatus.RUNNING}
    assert fake_kube.count() == 1 and fake_kube.count("GET", "jobs") == 1
    assert fake_kube.requests[0].name is None  # a LIST, not a GET per job
    assert fake_kube.requests[0].query["labelSelector"] == "app.kubernetes.io/managed-by=falcon"

    # A pending one needs its Pods' reasons: one more LIST, of that Job's Pods only.
    name = backend.cluster_job_name(views[0])
    fake_kube.set_job_status(NS, name, {"active": 1, "ready": 0})
    fake_kube.reset_requests()
    backend.observe(views)
    assert fake_kube.count("GET", "jobs") == 1 and fake_kube.count("GET", "pods") == 1
    assert fake_kube.count() == 2
    pods_query = next(r for r in fake_kube.requests if r.resource == "pods").query
    assert pods_query["labelSelector"] == ("app.kubernetes.io/managed-by=falcon,"
                                           f"batch.kubernetes.io/job-name in ({name})")


def test_observe_with_watch_reads_its_cache_and_one_resource_version_probe(kubeconfig,
                                                                           fake_kube):
    """Informer mode: one LIST per kind fills the caches, a WATCH keeps them current, and a
    tick then sends one one-item LIST (the resourceVersion it waits for), whatever the number
    of jobs, pending or not."""
    backend = make_backend(kubeconfig)
    views = [job_view(job_id=i, exp_id=i, exp_name=f"e{i}") for i in range(1, 31)]
    try:
        for view in views:
            backend.submit(view)
            fake_kube.set_job_status(NS, backend.cluster_job_name(view), {"active": 1,
                                                                         "ready": 1})
        backend.observe(views)  # fills the caches
        fake_kube.set_job_status(NS, backend.cluster_job_name(views[0]), {"active": 1,
                                                                         "ready": 0})
        fake_kube.spawn_pods(NS, backend.cluster_job_name(views[0]), status={
            "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                "reason": "Unschedulable"}]})
        fake_kube.reset_requests()
        states = backend.observe(views)
        assert states[1].status == ClusterJobStatus.PENDING and "Unschedulable" in \
            states[1].message
        assert {states[i].status for i in range(2, 31)} == {ClusterJobStatus.RUNNING}
        lists = [r for r in fake_kube.requests if r.query.get("watch") != "true"]
        assert [(r.resource, r.query.get("limit")) for r in lists] == [("jobs", "1")]

        # The resourceVersion expires (etcd compaction) and the stream drops: 410 Gone, and
        # the cache lists again instead of failing or missing changes.
        jobs_cache = backend._job_cache
        relists = jobs_cache.relists
        fake_kube.expire_watches()
        fake_kube.set_job_status(NS, backend.cluster_job_name(views[1]), {"active": 1,
                                                                         "ready": 0})
        poll_until(lambda: jobs_cache.relists != relists, what="the watch cache to re-list")
        assert jobs_cache.relists == relists + 1
        assert backend.observe(views)[2].status == ClusterJobStatus.PENDING
    finally:
        backend.close()


def paths(obj, prefix: str = "") -> set[str]:
    """Every key path of decoded JSON (`metadata.labels.<key>`; a list's items as `[]`)."""
    if isinstance(obj, dict):
        return {p for k, v in obj.items() for p in paths(v, f"{prefix}.{k}" if prefix else k)}
    if isinstance(obj, list):
        return {p for v in obj for p in paths(v, f"{prefix}[]")} or {prefix}
    return {prefix}


def test_the_caches_keep_only_what_a_state_is_read_from(kubeconfig, fake_kube):
    """The caches keep exactly the fields of `JOB_FIELDS` and `POD_FIELDS`, as the API server
    sent them: not the Pod template nor the Pod's spec (containers, their environment with the
    config), not the labels, conditions and container statuses no state is read from; what
    they keep still maps a Pending, Unschedulable Pod (test_k8s_lean_cache.py maps every
    case both ways)."""
    backend = make_backend(kubeconfig)
    view = job_view()
    try:
        backend.submit(view)
        name = backend.cluster_job_name(view)
        fake_kube.set_job_status(NS, name, {"active": 1, "ready": 0,
                                            "startTime": "2026-11-01T10:00:00Z"})
        fake_kube.spawn_pods(NS, name, status={
            "phase": "Pending", "qosClass": "Burstable", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available",
                 "lastTransitionTime": "2026-11-01T10:00:00Z"},
                {"type": "Initialized", "status": "True"}],
            "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "",
                                   "ready": False, "restartCount": 0,
                                   "state": {"waiting": {"reason": "ContainerCreating"}}}]})
        state = backend.observe([view])[view.id]
        assert state.status == ClusterJobStatus.PENDING and "Unschedulable" in state.message
        (pod,) = backend._pod_cache.items().values()
        whole_pod = fake_kube.get("pods", NS, pod["metadata"]["name"])
        assert whole_pod["spec"]["containers"] and "CUSTOM_CONFIG_KEY" not in json.dumps(pod)
        assert paths(pod) == {
            "metadata.name", "metadata.resourceVersion", "metadata.creationTimestamp",
            "metadata.labels.batch.kubernetes.io/job-name", "metadata.labels.falcon.io/job-id",
            "metadata.labels.falcon.io/exp-id",
            "metadata.labels.batch.kubernetes.io/job-completion-index",
            "status.phase", "status.conditions[].type", "status.conditions[].status",
            "status.conditions[].reason", "status.conditions[].message",
            "status.containerStatuses[].name",
            "status.containerStatuses[].state.waiting.reason"}
        for path in ("name", "resourceVersion", "creationTimestamp", "labels"):
            assert pod["metadata"][path] == (whole_pod["metadata"][path] if path != "labels"
                                             else {k: whole_pod["metadata"]["labels"][k]
                                                   for k in pod["metadata"]["labels"]})
        assert pod["status"]["conditions"] == [
            {k: v for k, v in whole_pod["status"]["conditions"][0].items()
             if k != "lastTransitionTime"}]
        (job,) = backend._job_cache.items().values()
        whole_job = fake_kube.get("jobs", NS, name)
        assert whole_job["spec"]["template"]
        assert paths(job) == {
            "metadata.name", "metadata.resourceVersion", "metadata.creationTimestamp",
            "metadata.finalizers[]", "metadata.labels.falcon.io/job-id",
            "metadata.labels.falcon.io/exp-id", "spec.completions", "spec.suspend",
            "status.ready", "status.startTime"}
        assert job["metadata"]["finalizers"] == whole_job["metadata"]["finalizers"]
        assert job["status"] == {"ready": 0, "startTime": "2026-11-01T10:00:00Z"}
    finally:
        backend.close()


def test_observe_ignores_jobs_of_other_owners_and_reports_missing(backend, fake_kube):
    fake_kube.put_object("jobs", NS, {"metadata": {"name": "someone-else",
                                                   "labels": {"app": "x"}}, "spec": {}})
    state = backend.observe([job_view()])[7]
    assert state.status == ClusterJobStatus.MISSING
    assert "someone-else" not in str(fake_kube.requests[-1].query)


def test_list_pages_and_restarts_on_410_gone(kubeconfig, fake_kube):
    backend = make_backend(kubeconfig, list_page_size=5, watch=False)
    views = [job_view(job_id=i, exp_id=i, exp_name=f"e{i}") for i in range(1, 13)]
    for view in views:
        backend.submit(view)
        fake_kube.set_job_status(NS, backend.cluster_job_name(view), {"active": 1, "ready": 1})
    fake_kube.reset_requests()
    assert len(backend.observe(views)) == 12
    assert fake_kube.count("GET", "jobs") == 3  # 5 + 5 + 2

    # The continue token expires between pages (etcd compaction): 410, then a fresh LIST.
    fake_kube.reset_requests()
    seen = {"n": 0}

    def compact_before_the_second_page():
        seen["n"] += 1
        if seen["n"] == 2:
            fake_kube.compact()

    fake_kube.inject("GET", "jobs", action=compact_before_the_second_page, times=2)
    states = backend.observe(views)
    assert {s.status for s in states.values()} == {ClusterJobStatus.RUNNING}
    assert len(states) == 12
    assert fake_kube.count("GET", "jobs") == 2 + 3  # page 1, page 2 -> 410, then 3 pages


def test_410_that_keeps_coming_fails_the_tick_with_a_backend_error(kubeconfig, fake_kube):
    backend = make_backend(kubeconfig, retries=2, watch=False)
    backend.submit(job_view())
    fake_kube.inject("GET", "jobs", status=410, reason="Expired", times=10)
    with pytest.raises(BackendError, match="410"):
        backend.observe([job_view()])
    assert fake_kube.count("GET", "jobs") == 3  # bounded: first + 2 restarts


def test_server_errors_are_retried_with_backoff_then_succeed(backend, fake_kube):
    fake_kube.inject("POST", "jobs", status=503, reason="ServiceUnavailable", times=2)
    assert backend.submit(job_view()).created
    assert fake_kube.count("POST", "jobs") == 3


def test_retries_are_bounded(kubeconfig, fake_kube):
    backend = make_backend(kubeconfig, retries=2, watch=False)
    fake_kube.inject("GET", "jobs", status=500, times=10)
    with pytest.raises(BackendError, match="500"):
        backend.observe([job_view()])
    assert fake_kube.count("GET", "jobs") == 3


def test_a_stalled_call_times_out_and_is_retried(kubeconfig, fake_kube):
    backend = make_backend(kubeconfig, request_timeout=0.3, retries=1, watch=False)
    stall = threading.Event()  # the first GET is answered only when set (at close)
    fake_kube.inject("GET", "jobs", hold=stall, times=1)
    assert backend.observe([job_view()])[7].status == ClusterJobStatus.MISSING
    # Answered by the retry while the stalled GET was still unanswered (CB-16).
    assert fake_kube.count("GET", "jobs") == 2 and not stall.is_set()


def test_a_cluster_that_never_answers_fails_the_tick_in_bounded_time(kubeconfig, fake_kube):
    backend = make_backend(kubeconfig, request_timeout=0.2, retries=1, watch=False)
    stall = threading.Event()  # no GET is answered until set (at close)
    fake_kube.inject("GET", "jobs", hold=stall, times=5)
    with pytest.raises(BackendError):
        backend.observe([job_view()])
    # Bounded: the first attempt and one retry, each given up by the client while unanswered.
    assert fake_kube.count("GET", "jobs") == 2 and not stall.is_set()


def test_a_broken_kubeconfig_is_a_backend_error_not_a_crash(tmp_path):
    (tmp_path / "kc").write_text("not: a kubeconfig\n")
    with pytest.raises(BackendError, match="configuration"):
        make_backend(tmp_path / "kc").observe([job_view()])


# -- delete ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["Foreground", "Background"])
def test_delete_removes_pending_pods_and_is_done_only_once_none_is_left(kubeconfig, fake_kube,
                                                                        policy):
    fake_kube.linger_pods = True
    backend = make_backend(kubeconfig, propagation_policy=policy)
    view = job_view(replica=2)
    backend.submit(view)
    name = backend.cluster_job_name(view)
    fake_kube.spawn_pods(NS, name, statuses=[
        {"phase": "Pending", "containerStatuses": [{"name": "main", "ready": False,
         "restartCount": 0, "image": "x", "imageID": "",
         "state": {"waiting": {"reason": "ImagePullBackOff"}}}]},
        {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                             "reason": "Unschedulable"}]}])
    assert backend.delete(view) is False  # Pods are terminating (CB-13)
    delete = next(r for r in fake_kube.requests if r.method == "DELETE")
    assert delete.name == name
    pods = fake_kube.list("pods", NS)
    assert len(pods) == 2 and all(p["metadata"].get("deletionTimestamp") for p in pods)
    assert backend.delete(view) is False
    fake_kube.reap()
    assert backend.delete(view) is True
    assert fake_kube.list("pods", NS) == [] and fake_kube.list("jobs", NS) == []
    assert fake_kube.list("services", NS) == []  # garbage-collected with its owner


def test_delete_of_a_job_already_gone_is_done(backend, fake_kube):
    assert backend.delete(job_view()) is True  # 404 means done (CB-14)
    assert fake_kube.count("DELETE", "jobs") == 1


def test_delete_cleans_up_pods_a_hand_delete_orphaned(backend, fake_kube):
    view = job_view(replica=2)
    backend.submit(view)
    name = backend.cluster_job_name(view)
    fake_kube.spawn_pods(NS, name, status={"phase": "Running"})
    # Someone removes Falcon's finalizer by hand, then deletes the Job without a propagation
    # policy, which orphans a batch/v1 Job's Pods (CB-13).
    fake_kube.set_finalizers("jobs", NS, name, [])
    client.BatchV1Api(backend.api).delete_namespaced_job(name, NS)
    assert fake_kube.get("jobs", NS, name) is None and len(fake_kube.list("pods", NS)) == 2
    assert backend.delete(view) is False  # it deleted the orphans; they were still there
    assert fake_kube.list("pods", NS) == []
    assert backend.delete(view) is True


# -- QPS --------------------------------------------------------------------------------------------

def test_token_bucket_allows_a_burst_then_the_rate():
    now = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    bucket = TokenBucket(10, 3, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        assert bucket.acquire() == 0
    for _ in range(5):
        bucket.acquire()
    assert slept == pytest.approx([0.1] * 5)


def test_the_client_is_held_to_its_qps(kubeconfig, fake_kube):
    clock, slept = FakeClock(), []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    conn = KubeConnection(kubeconfig=str(kubeconfig), qps=20, burst=2)
    caller = KubeCaller(conn, sleep=sleep, clock=clock)
    backend = make_backend(kubeconfig)
    api = client.BatchV1Api(backend.api)
    before = fake_kube.count("GET", "jobs")
    for _ in range(8):
        caller.call(api.list_namespaced_job, NS)
    # 2 at once, then 6 more at 20/s: each waits 1/20 s, 0.3 s in all.
    assert slept == pytest.approx([0.05] * 6)
    assert caller.calls == 8 and fake_kube.count("GET", "jobs") - before == 8
