"""The clusters file (FALCON_CLUSTERS_FILE) and CreateExp's cluster checks."""
from __future__ import annotations

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

from controllers.cluster_backends.kubernetes import KubernetesBackend
from controllers.cluster_backends.local import LocalBackend
from clusters.config import ClusterConfigError, parse_clusters
from controllers.cluster_backends.loading import load_backends
from core.cluster_settings import known_clusters
from experiments.models import Experiment

GOOD = {"command": "python -u bench.py", "replica": 1, "image": "gcr.io/acme/t:1",
        "device_count": 8, "device_type": "tpu-v5p", "device_topo": "2x2x2"}


@pytest.fixture
def clusters(settings, tmp_path):
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump({
        "devices": {"tpu-v7x": {"kind": "tpu", "topology_dims": 3,
                                "node_selector": {"cloud.google.com/gke-tpu-accelerator":
                                                  "tpu7x"}}},
        "clusters": {
            "local": {"backend": "local", "state_dir": str(tmp_path / "local")},
            "tpu-v5p-a": {"backend": "kubernetes", "namespace": "falcon-jobs",
                          "kubeconfig": str(tmp_path / "missing-kubeconfig"),
                          "backoff_limit": 1, "qps": 20}}}))
    settings.FALCON_CLUSTERS_FILE = str(path)
    return path


def body(cluster: str, role: str = "main", **spec) -> dict:
    return {"name": "e1", "cluster_name": cluster, "exp_type": "profiling",
            "role_to_task_spec": {role: {**GOOD, **spec}}, "config": "a: 1\n"}


def test_the_file_names_the_clusters_and_their_backends(clusters):
    assert known_clusters() == ["local", "tpu-v5p-a"]
    backends = load_backends()
    assert isinstance(backends["local"], LocalBackend)
    k8s = backends["tpu-v5p-a"]
    assert isinstance(k8s, KubernetesBackend)
    assert k8s.config.namespace == "falcon-jobs" and k8s.config.backoff_limit == 1
    assert k8s.config.connection.qps == 20
    assert k8s.config.devices.get("tpu-v7x").node_selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu7x"}
    assert list(load_backends(["local"])) == ["local"]
    with pytest.raises(ImproperlyConfigured, match="known clusters: local, tpu-v5p-a"):
        load_backends(["nope"])


def test_without_a_file_the_embedded_local_cluster_applies(settings):
    settings.FALCON_CLUSTERS_FILE = ""
    assert known_clusters() == ["local"]


@pytest.mark.parametrize("text,match", [
    ("clusters: {}\n", "non-empty `clusters:`"),
    ("clusters: {a: {backend: slurm}}\n", "slurm"),
    ("clusters: {a: {backend: kubernetes}}\n", "namespace"),
    ("clusters: {a: {backend: local, namespace: x}}\n", "unknown keys"),
    ("clusters: [\n", "not valid YAML"),
    ("clusterz: {a: {backend: local}}\n", "clusters"),
])
def test_a_malformed_file_is_refused_naming_the_problem(text, match):
    with pytest.raises(ClusterConfigError, match=match):
        parse_clusters(text)


@pytest.mark.parametrize("entry,match", [
    ({"qps": -1}, "qps"),
    ({"propagation_policy": "Orphan"}, "propagation_policy"),
    ({"backoff_limit": "0"}, "backoff_limit"),
    ({"devices": {"x": {"kind": "fpga", "node_selector": {"a": "b"}}}}, "kind"),
])
def test_a_malformed_kubernetes_entry_is_refused(settings, tmp_path, entry, match):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"clusters": {"k": {"backend": "kubernetes",
                                                       "namespace": "n", **entry}}}))
    settings.FALCON_CLUSTERS_FILE = str(path)
    with pytest.raises(ImproperlyConfigured, match=match):
        load_backends()


def test_createexp_refuses_an_unknown_cluster_listing_the_known_ones(clusters, auth_api):
    res = auth_api.post("/api/v1/exps", body("tpu-v9-z"), format="json")
    assert res.status_code == 400
    assert "local, tpu-v5p-a" in res.json()["cluster_name"][0]
    assert not Experiment.objects.exists()


def test_createexp_accepts_a_valid_kubernetes_spec_without_calling_the_cluster(clusters,
                                                                               auth_api):
    # The kubeconfig does not even exist: validation is offline.
    res = auth_api.post("/api/v1/exps", body("tpu-v5p-a"), format="json")
    assert res.status_code == 201, res.content


@pytest.mark.parametrize("spec,field", [
    ({"image": ""}, "image"),
    ({"device_topo": "2x2x1"}, "device_topo"),
    ({"device_type": "tpu-v9z"}, "device_type"),
    ({"device_type": "h100", "device_topo": "", "device_count": 16}, "device_count"),
    # Several replicas of a TPU role would be one Indexed Job that GKE wires as ONE slice.
    ({"replica": 2}, "replica"),
])
def test_createexp_refuses_what_a_kubernetes_cluster_cannot_run(clusters, auth_api, spec,
                                                                field):
    res = auth_api.post("/api/v1/exps", body("tpu-v5p-a", **spec), format="json")
    assert res.status_code == 400, res.content
    assert f"role_to_task_spec.main.{field}" in res.json(), res.json()
    assert not Experiment.objects.exists()


def test_createexp_refuses_a_missing_command_on_kubernetes(clusters, auth_api):
    spec = {k: v for k, v in GOOD.items() if k != "command"}
    res = auth_api.post("/api/v1/exps", {**body("tpu-v5p-a"),
                                         "role_to_task_spec": {"main": spec}}, format="json")
    assert res.status_code == 400 and "role_to_task_spec.main.command" in res.json()


def test_createexp_refuses_a_role_too_long_for_a_kubernetes_name(clusters, auth_api):
    role = "r" * 64
    res = auth_api.post("/api/v1/exps", body("tpu-v5p-a", role=role), format="json")
    assert res.status_code == 400 and f"role_to_task_spec.{role}" in res.json()


def test_a_local_cluster_ignores_image_and_device_fields(clusters, auth_api):
    res = auth_api.post("/api/v1/exps", body("local", image="", device_type="tpu-v9z",
                                             device_topo="1x1", device_count=3), format="json")
    assert res.status_code == 201, res.content


def test_an_edited_file_is_read_again(clusters, auth_api):
    data = yaml.safe_load(clusters.read_text())
    data["clusters"]["gpu-b"] = {"backend": "local"}
    clusters.write_text(yaml.safe_dump(data))
    assert "gpu-b" in known_clusters()


def test_createjob_checks_the_spec_against_the_experiments_cluster(clusters, auth_api):
    """CreateJob (gRPC) applies the same cluster checks as CreateExp: a role added later to a
    Kubernetes experiment without an image is refused, not left Pending on a failing Job."""
    from core.errors import ValidationFailed
    from experiments.services import job_create

    res = auth_api.post("/api/v1/exps", body("tpu-v5p-a"), format="json")
    assert res.status_code == 201, res.content
    exp_id = res.json()["id"]
    with pytest.raises(ValidationFailed) as err:
        job_create(exp_id=exp_id, role="eval", task_spec={"command": "python eval.py"})
    assert "task_spec.image" in err.value.errors
    bad_topo = {**GOOD, "device_topo": "2x2x1"}
    with pytest.raises(ValidationFailed) as err:
        job_create(exp_id=exp_id, role="eval", task_spec=bad_topo)
    assert "task_spec.device_topo" in err.value.errors
    assert Experiment.objects.get(pk=exp_id).jobs.count() == 1
    job = job_create(exp_id=exp_id, role="eval", task_spec=GOOD)
    assert job.role == "eval"


def test_a_malformed_file_is_a_configuration_error_on_the_django_side(settings, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("clusters: {a: {backend: slurm}}\n")
    settings.FALCON_CLUSTERS_FILE = str(path)
    with pytest.raises(ImproperlyConfigured, match="slurm"):
        known_clusters()
