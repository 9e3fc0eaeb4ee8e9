"""The deployment files, validated offline.

Every manifest under k8s/ and every Job and Service the Kubernetes backend builds is checked
against the Kubernetes 1.37 OpenAPI schemas with `kubernetes-validate` (strict: unknown fields
fail). `docker compose config` needs a Docker engine, which CI does not have, so
docker-compose.yml is loaded with PyYAML and its services, images and environment are checked.
"""
from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes import client

from controllers.tests.test_k8s_backend import job_view, make_backend

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.37.0"
MANIFESTS = sorted(p for p in (ROOT / "k8s").rglob("*.yaml") if p.name != "kustomization.yaml")


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_objects() -> list[dict]:
    return [doc for path in MANIFESTS for doc in documents(path)]


def test_there_are_manifests_and_kustomize_lists_every_one():
    kustomization = yaml.safe_load((ROOT / "k8s/base/kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in MANIFESTS if p.parent.name == "base"}
    kinds = {(o["kind"], o["metadata"]["name"]) for o in all_objects()}
    for expected in [("Deployment", "falcon-api-http"), ("Deployment", "falcon-api-grpc"),
                     ("Deployment", "falcon-exp-controller"),
                     ("Deployment", "falcon-resource-manager"), ("Service", "falcon-http"),
                     ("Service", "falcon-grpc"), ("ConfigMap", "falcon-clusters")]:
        assert expected in kinds


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(path):
    for doc in documents(path):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validator_rejects_what_it_should():
    doc = documents(ROOT / "k8s/base/api-grpc.yaml")[0]
    doc["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["grpcc"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_rbac_is_namespaced_and_least_privilege():
    objs = all_objects()
    assert not [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Role"}
    for role in roles.values():
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            assert not {"patch", "deletecollection", "escalate", "bind"} & set(rule["verbs"])
    granted = {(r, v) for rule in roles["falcon-resource-manager"]["rules"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert {("jobs", "create"), ("jobs", "list"), ("jobs", "delete"), ("pods", "list"),
            ("pods/log", "get"), ("services", "create")} <= granted
    assert {(r, v) for rule in roles["falcon-leader-election"]["rules"]
            for r in rule["resources"] for v in rule["verbs"]} == {
        ("leases", "get"), ("leases", "create"), ("leases", "update")}


def test_every_pod_is_restricted_with_resources_and_the_api_has_probes():
    for dep in (o for o in all_objects() if o["kind"] == "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for c in pod.get("initContainers", []) + pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == \
                ["ALL"] and sc["readOnlyRootFilesystem"] is True
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
        if dep["metadata"]["name"].startswith("falcon-api"):
            c = pod["containers"][0]
            assert c["readinessProbe"] and c["livenessProbe"]


def test_controllers_run_with_leader_election_and_secrets_come_from_a_secret():
    deps = {o["metadata"]["name"]: o for o in all_objects() if o["kind"] == "Deployment"}
    for name in ("falcon-exp-controller", "falcon-resource-manager"):
        c = deps[name]["spec"]["template"]["spec"]["containers"][0]
        assert c["command"][:3] == ["python", "manage.py", "runcontroller"]
        assert "--no-leader-election" not in c["command"]
        env = {e["name"]: e for e in c["env"]}
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.namespace"
        # Deployed in the cloudflare mode: the controllers' own Access service token, from the
        # Secret; the local mode's internal token is never deployed.
        for key in ("FALCON_CF_CLIENT_ID", "FALCON_CF_CLIENT_SECRET"):
            assert env[key]["valueFrom"]["secretKeyRef"]["name"] == "falcon-secrets"
        assert "FALCON_INTERNAL_TOKEN" not in env
        assert c["envFrom"] == [{"configMapRef": {"name": "falcon-logs"}},
                                {"configMapRef": {"name": "falcon-auth"}}]
        assert "DATABASE_URL" not in env  # controllers reach data only through the API
        assert deps[name]["spec"]["replicas"] >= 2
        # Liveness: the loop's heartbeat file, on the writable /tmp emptyDir (the root
        # filesystem is read-only), checked by `manage.py checkheartbeat`.
        beat_file = env["FALCON_HEARTBEAT_FILE"]["value"]
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in deps[name]["spec"]["template"]["spec"]["volumes"]}
        assert beat_file.startswith("/tmp/") and "emptyDir" in volumes[mounts["/tmp"]]
        probe = c["livenessProbe"]
        assert probe["exec"]["command"][:3] == ["python", "manage.py", "checkheartbeat"]
        max_age = float(probe["exec"]["command"][probe["exec"]["command"].index("--max-age")
                                                 + 1])
        assert max_age >= 60 and probe["timeoutSeconds"] >= 5
    http = deps["falcon-api-http"]["spec"]["template"]["spec"]["containers"][0]
    assert http["envFrom"] == [{"configMapRef": {"name": "falcon-logs"}},
                               {"configMapRef": {"name": "falcon-auth"}},
                               {"secretRef": {"name": "falcon-secrets"}}]
    assert not any(o["kind"] == "Secret" for o in all_objects())  # never committed


def test_the_clusters_configmap_is_a_valid_clusters_file():
    from clusters.config import parse_clusters
    from controllers.cluster_backends.loading import kubernetes_config

    cm = next(o for o in all_objects() if o["kind"] == "ConfigMap"
              and o["metadata"]["name"] == "falcon-clusters")
    specs = parse_clusters(cm["data"]["clusters.yaml"])
    for name, entry in specs.items():
        assert kubernetes_config(name, entry).connection.in_cluster


@pytest.mark.parametrize("spec", [
    {"replica": 1},
    {"replica": 1, "device_type": "tpu-v5p", "device_count": 8, "device_topo": "2x2x2",
     "envs": {"JAX_PLATFORMS": "tpu"}},
    {"replica": 1, "device_type": "h100", "device_count": 8},
])
def test_built_jobs_and_services_are_valid_strictly(spec):
    backend = make_backend(service_account="falcon-task", image_pull_secrets=("regcred",),
                           active_deadline_seconds=3600)
    view = job_view(**spec)
    api = client.ApiClient()
    job = api.sanitize_for_serialization(backend.build_job(view))
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    svc = api.sanitize_for_serialization(
        backend.build_service(view, job["metadata"]["name"], "0b5e-uid"))
    kubernetes_validate.validate(svc, K8S_VERSION, strict=True)
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", job["metadata"]["name"])


def test_checkheartbeat_passes_on_a_fresh_beat_and_fails_on_a_stale_or_missing_one(
        tmp_path, monkeypatch):
    import os
    import threading

    from django.core.management import CommandError, call_command

    from controllers.runner import run_loop

    beat_file = tmp_path / "heartbeat"
    monkeypatch.setenv("FALCON_HEARTBEAT_FILE", str(beat_file))
    with pytest.raises(CommandError, match="heartbeat"):
        call_command("checkheartbeat", "--max-age", "120")  # no tick yet

    class Tick:
        name = "t"

        def tick(self):
            return None

    run_loop(Tick(), interval=0, stop=threading.Event(), max_ticks=1)
    call_command("checkheartbeat", "--max-age", "120")
    old = beat_file.stat().st_mtime - 300
    os.utime(beat_file, (old, old))  # a loop stuck for five minutes
    with pytest.raises(CommandError, match="stuck"):
        call_command("checkheartbeat", "--max-age", "120")


def test_a_failing_transient_tick_still_beats(tmp_path, monkeypatch):
    import threading

    from controllers.runner import run_loop

    beat_file = tmp_path / "heartbeat"
    monkeypatch.setenv("FALCON_HEARTBEAT_FILE", str(beat_file))

    class Down:
        name = "down"

        def tick(self):
            raise ConnectionError("API server unreachable")

    run_loop(Down(), interval=0, stop=threading.Event(), is_transient=lambda exc: True,
             max_ticks=2)
    assert beat_file.exists()


def test_dockerfile_is_multi_stage_and_runs_as_a_non_root_user():
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\w+)", text, re.M)
    assert len(stages) >= 2
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert "COPY --from=build" in text


def test_docker_compose_runs_mysql_the_api_and_the_controllers_on_the_local_backend():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"mysql", "migrate", "api-http", "api-grpc", "exp-controller",
            "resource-manager"} <= set(services)
    assert services["mysql"]["image"].startswith("mysql:")
    for name in ("api-http", "api-grpc", "exp-controller", "resource-manager", "migrate"):
        svc = services[name]
        assert svc["image"] == "falcon:dev" and svc["build"] == "."
        env = svc["environment"]
        assert env["DATABASE_URL"].startswith("mysql://") and "@mysql:3306/" in \
            env["DATABASE_URL"]
        assert len(env["FALCON_INTERNAL_TOKEN"]) >= 32
        assert "FALCON_CLUSTERS_FILE" not in env  # the embedded default: the local backend
    for name in ("exp-controller", "resource-manager"):
        assert "--no-leader-election" in services[name]["command"]
    assert services["api-http"]["ports"] == ["127.0.0.1:8000:8000"]
    assert services["migrate"]["depends_on"]["mysql"]["condition"] == "service_healthy"


def test_docker_compose_publishes_every_port_on_loopback_only():
    """Its local mode gives a token for any email and runs user code as the server: nobody but
    the machine's own user may reach it (ports short `IP:HOST:CONTAINER` or long syntax)."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    published = 0
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            published += 1
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", (name, port)
            else:
                assert str(port).startswith("127.0.0.1:") and str(port).count(":") == 2, \
                    (name, port)
    assert published
    env = compose["x-falcon"]["environment"]
    # Local mode with the opt-ins is acceptable only for one person's machine, said in place.
    assert env.get("FALCON_AUTH_MODE", "local") == "local"
    assert env["FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER"] == "1"
    assert "UNSAFE beyond one person" in (ROOT / "docker-compose.yml").read_text()


def test_deployed_processes_run_in_the_cloudflare_mode_with_an_audience():
    """The local mode issues a token for any email: it must never be what a cluster runs
    (decisions.md#auth-1: no audience, no start)."""
    cm = next(o for o in all_objects() if o["kind"] == "ConfigMap"
              and o["metadata"]["name"] == "falcon-auth")
    assert cm["data"]["FALCON_AUTH_MODE"] == "cloudflare"
    assert cm["data"]["FALCON_CF_TEAM_DOMAIN"].startswith("https://")
    assert cm["data"]["FALCON_CF_AUDIENCES"]
    for dep in (o for o in all_objects() if o["kind"] == "Deployment"):
        for c in dep["spec"]["template"]["spec"]["containers"]:
            assert {"configMapRef": {"name": "falcon-auth"}} in c.get("envFrom", []), \
                dep["metadata"]["name"]


def test_every_deployed_process_writes_json_lines():
    """JSON lines in production (core.observability.logs): every container of every Deployment, init
    containers (migrate) included, reads FALCON_LOG_FORMAT=json from the falcon-logs
    ConfigMap; the analyzer passes it on to its analysis Pods."""
    cm = next(o for o in all_objects() if o["kind"] == "ConfigMap"
              and o["metadata"]["name"] == "falcon-logs")
    assert cm["data"]["FALCON_LOG_FORMAT"] == "json"
    deployments = [o for o in all_objects() if o["kind"] == "Deployment"]
    assert len(deployments) >= 6
    for dep in deployments:
        spec = dep["spec"]["template"]["spec"]
        for c in spec["containers"] + spec.get("initContainers", []):
            assert {"configMapRef": {"name": "falcon-logs"}} in c.get("envFrom", []), \
                (dep["metadata"]["name"], c["name"])
            assert "FALCON_LOG_FORMAT" not in {e["name"] for e in c.get("env", [])}


def test_every_process_that_serves_metrics_is_annotated_for_prometheus():
    """/metrics of the HTTP API (its own port, gunicorn's workers added up in a folder on the
    /tmp emptyDir) and a metrics port on rungrpc and each controller, named and annotated."""
    deps = {o["metadata"]["name"]: o for o in all_objects() if o["kind"] == "Deployment"}
    for name in ("falcon-api-http", "falcon-api-grpc", "falcon-exp-controller",
                 "falcon-resource-manager", "falcon-analyzer"):
        pod = deps[name]["spec"]["template"]
        notes = pod["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/path"] == \
            "/metrics", name
        port = int(notes["prometheus.io/port"])
        container = pod["spec"]["containers"][0]
        assert port in [p["containerPort"] for p in container["ports"]], name
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        if name == "falcon-api-http":
            mounts = [m["mountPath"] for m in container["volumeMounts"]]
            assert env["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/") and "/tmp" in mounts
        else:
            assert env["FALCON_METRICS_PORT"] == str(port), name


# -- NetworkPolicies: who reaches which port --------------------------------------------------

NAMESPACE = {"kubernetes.io/metadata.name": "falcon"}


def _matches(selector: dict, labels: dict) -> bool:
    """A LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist) on labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if not {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}[op]:
            return False
    return True


def policies() -> list[dict]:
    return [o for o in all_objects() if o["kind"] == "NetworkPolicy"]


def reaches(peer_pod: dict, peer_ns: dict, target: dict, port: int) -> bool:
    """Whether the ingress NetworkPolicies of k8s/base let a Pod labelled `peer_pod` in a
    namespace labelled `peer_ns` connect to `port` of a Falcon Pod labelled `target`
    (NetworkPolicy semantics: a Pod no policy selects is open; a selected one only to what
    some rule allows)."""
    selecting = [p for p in policies() if "Ingress" in p["spec"]["policyTypes"]
                 and _matches(p["spec"]["podSelector"], target)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            if rule.get("ports") and port not in {p["port"] for p in rule["ports"]}:
                continue
            for peer in rule.get("from") or []:
                ns_ok = (_matches(peer["namespaceSelector"], peer_ns)
                         if "namespaceSelector" in peer else peer_ns == NAMESPACE)
                pod_ok = _matches(peer.get("podSelector") or {}, peer_pod)
                if ns_ok and pod_ok:
                    return True
    return False


def falcon_pods() -> dict[str, tuple[dict, set[int]]]:
    """`{Deployment name: (Pod labels, container ports)}` of k8s/base."""
    out = {}
    for dep in (o for o in all_objects() if o["kind"] == "Deployment"):
        template = dep["spec"]["template"]
        ports = {p["containerPort"] for c in template["spec"]["containers"]
                 for p in c.get("ports", [])}
        out[dep["metadata"]["name"]] = (template["metadata"]["labels"], ports)
    return out


def test_every_network_policy_selects_pods_that_exist():
    from controllers.analyzer.backends.kubernetes import COMPONENT

    labels = [lbl for lbl, _ in falcon_pods().values()] + [COMPONENT]
    names = set()
    for policy in policies():
        names.add(policy["metadata"]["name"])
        selectors = [policy["spec"]["podSelector"]] + [
            peer["podSelector"] for rule in policy["spec"].get("ingress") or []
            for peer in rule.get("from") or [] if "podSelector" in peer]
        for selector in selectors:
            assert any(_matches(selector, lbl) for lbl in labels), (policy, selector)
        for rule in policy["spec"].get("ingress") or []:
            for peer in rule.get("from") or []:
                if "podSelector" in peer and "namespaceSelector" not in peer:
                    for expr in peer["podSelector"].get("matchExpressions") or []:
                        assert all(any(lbl.get(expr["key"]) == v for lbl in labels)
                                   for v in expr["values"]), expr
    assert "falcon-default-deny-ingress" in names
    deny = next(p for p in policies() if p["metadata"]["name"] == "falcon-default-deny-ingress")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}


def test_every_falcon_port_is_open_to_its_callers_only():
    pods = falcon_pods()
    edge = {"kubernetes.io/metadata.name": "ingress-nginx", "falcon.dev/ingress": "allowed"}
    metrics = {"kubernetes.io/metadata.name": "monitoring", "falcon.dev/metrics": "allowed"}
    elsewhere = {"kubernetes.io/metadata.name": "default"}
    for name, (labels, ports) in pods.items():
        assert ports <= {8000, 50051, 50052, 9100}, (name, ports)
        for port in ports:  # every port a Deployment opens has a rule
            callers = [p for p, _ in pods.values() if reaches(p, NAMESPACE, labels, port)]
            reached = (callers or reaches({"app": "prometheus"}, metrics, labels, port)
                       or reaches({"app": "edge"}, edge, labels, port))
            assert reached, (name, port)
            # Nothing in another namespace without the labels, whatever its Pod labels.
            assert not reaches(labels, elsewhere, labels, port), (name, port)
    http, grpc, analyzer = (pods[n][0] for n in ("falcon-api-http", "falcon-api-grpc",
                                                  "falcon-analyzer"))
    controller = pods["falcon-exp-controller"][0]
    assert reaches(controller, NAMESPACE, grpc, 50051)
    assert reaches({"app": "cloudflared"}, edge, http, 8000)
    assert reaches({"app": "cloudflared"}, edge, grpc, 50051)
    assert not reaches({"app": "cloudflared"}, edge, analyzer, 50052)
    assert reaches(http, NAMESPACE, analyzer, 50052)
    assert not reaches(controller, NAMESPACE, analyzer, 50052)
    assert reaches({"app": "prometheus"}, metrics, controller, 9100)
    assert not reaches({"app": "prometheus"}, metrics, analyzer, 50052)
