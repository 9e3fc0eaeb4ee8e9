"""The analyzer's deployment files, offline: two replicas under leader election, RBAC limited
to Pods, Pod logs and Leases in its namespace, the plugin catalog ConfigMap equal to the
repository's catalog, the gRPC Services, the API server pointed at the replicas, and the image
with the plugins on PATH and a numeric non-root user. (Every manifest is also validated against
the Kubernetes schemas by controllers/tests/test_deploy.py.)"""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import yaml

from controllers.analyzer.backends.kubernetes import PodAnalysisBackend
from plugins.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "k8s" / "base"


def objects() -> dict[tuple[str, str], dict]:
    out = {}
    for path in BASE.glob("*.yaml"):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def test_the_analyzer_runs_two_replicas_under_leader_election_with_the_pod_backend():
    objs = objects()
    dep = objs[("Deployment", "falcon-analyzer")]
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"][:4] == ["python", "manage.py", "runcontroller", "analyzer"]
    assert "--no-leader-election" not in c["command"]
    assert pod["serviceAccountName"] == "falcon-analyzer"
    config = objs[("ConfigMap", "falcon-analysis")]["data"]
    assert config["FALCON_ANALYZER_BACKEND"] == "kubernetes" and config["FALCON_ANALYSIS_BUCKET"]
    assert {"configMapRef": {"name": "falcon-analysis"}} in c["envFrom"]
    env = {e["name"]: e for e in c["env"]}
    assert env["FALCON_ANALYZER_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "falcon-secrets"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["plugins"]["configMap"]["name"] == "falcon-plugins"
    assert env["FALCON_PLUGIN_CATALOG"]["value"] == mounts["plugins"] + "/catalog.yaml"
    assert {"name": "grpc", "containerPort": 50052} in c["ports"]
    assert "--addr" in c["command"] and c["command"][-1].endswith(":50052")


def test_rbac_grants_pods_logs_and_leases_in_the_namespace_only():
    objs = objects()
    role = objs[("Role", "falcon-analyzer")]
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert granted == {("pods", "get"), ("pods", "list"), ("pods", "create"),
                       ("pods", "delete"), ("pods/log", "get")}
    binding = objs[("RoleBinding", "falcon-analyzer")]
    assert binding["roleRef"]["kind"] == "Role"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "falcon-analyzer"}]
    leases = objs[("RoleBinding", "falcon-leader-election")]
    assert {"kind": "ServiceAccount", "name": "falcon-analyzer"} in leases["subjects"]
    assert not any(kind.startswith("Cluster") for kind, _ in objs)
    analysis_sa = objs[("ServiceAccount", "falcon-analysis")]
    assert analysis_sa["automountServiceAccountToken"] is False


def test_the_catalog_configmap_is_the_repositorys_catalog(tmp_path):
    cm = objects()[("ConfigMap", "falcon-plugins")]
    text = cm["data"]["catalog.yaml"]
    assert text == (ROOT / "plugins" / "catalog.yaml").read_text()
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    assert set(load_catalog(str(path))) == {"trace-summary", "hlo-stats", "bench-summary"}


def test_services_and_the_api_server_reach_the_replicas():
    objs = objects()
    svc = objs[("Service", "falcon-analyzer")]
    headless = objs[("Service", "falcon-analyzer-replicas")]
    for s in (svc, headless):
        assert s["spec"]["selector"] == {"app.kubernetes.io/name": "falcon-analyzer"}
        assert s["spec"]["ports"][0]["port"] == 50052
    assert headless["spec"]["clusterIP"] == "None"
    target = objs[("ConfigMap", "falcon-analysis")]["data"]["FALCON_ANALYZER_TARGET"]
    assert target == "dns:///falcon-analyzer-replicas:50052"
    http = objs[("Deployment", "falcon-api-http")]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in http["env"]}
    assert env["FALCON_ANALYZER_TARGET"]["valueFrom"]["configMapKeyRef"] == {
        "name": "falcon-analysis", "key": "FALCON_ANALYZER_TARGET"}


def test_the_image_has_the_plugins_on_path_and_a_numeric_non_root_user():
    text = (ROOT / "Dockerfile").read_text()
    runtime = text[text.rindex("FROM "):]
    path = re.search(r"ENV PATH=([^\s]+)", runtime).group(1)
    assert path.split(":")[0] == "/app/plugins/bin"
    user = re.findall(r"^USER (\S+)", runtime, re.M)[-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) > 0
    default_uid = inspect.signature(PodAnalysisBackend).parameters["run_as_user"].default
    assert int(uid) == default_uid  # the Pods' runAsUser is the image's USER
    assert "COPY --from=build --chown=10001:10001 /src /app" in runtime  # plugins/bin inside
