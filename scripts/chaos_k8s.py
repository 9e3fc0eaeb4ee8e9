"""Chaos run: two resource-manager replicas and the exp controller against the fake Kubernetes
API, killed (SIGKILL) at random moments, then checked.

    .venv/bin/python scripts/chaos_k8s.py            # short: 12 experiments, ~40 s of chaos
    .venv/bin/python scripts/chaos_k8s.py --long     # 40 experiments, ~150 s of chaos

Everything runs on this machine: the fake API server (controllers/tests/fake_k8s.py) on
loopback in this process, the gRPC API (`manage.py rungrpc`) on a fresh SQLite database, and the
controllers as `manage.py runcontroller resources|exp` child processes under leader election
on a Lease of the fake (short durations). This process plays the Kubernetes Job controller and
kubelet (Pods appear, run, then complete, fail, or never get scheduled) and the users (some
experiments are aborted), while it kills a random controller every few seconds and starts it
again. Then it stops the chaos, lets the controllers converge, and checks:

- every experiment is terminal and consistent with its jobs (Succeeded: every job Succeeded;
  Aborted or Failed: no job left Pending or Running);
- no cluster Job was created twice under one name (the fake's ADDED events);
- no orphan: no unfinished Falcon Job and no live Pod of a terminal or unknown Falcon job;
- no write to the cluster (POST, PUT, PATCH, DELETE of Jobs and Pods) by a resource-manager
  replica that did not hold the Lease when the write reached the API server.

Exit status 0 when every check holds, 1 otherwise (each failure printed).
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NS = "falcon-chaos"
CLUSTER = "k8s-chaos"
REPLICAS = ("rm-a", "rm-b")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help="40 experiments, ~150 s of chaos")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    exps_n, chaos_s = (40, 150.0) if args.long else (12, 40.0)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}: {exps_n} experiments, {chaos_s:g} s of chaos")

    tmp = Path(tempfile.mkdtemp(prefix="falcon-chaos-"))
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'chaos.sqlite3'}"
    os.environ["FALCON_ARTIFACT_ROOT"] = f"file://{tmp / 'artifacts'}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "falcon_site.settings")
    os.environ["FALCON_LOG_LEVEL"] = "WARNING"

    from controllers.tests.fake_k8s import FakeKube

    fake = FakeKube().serve()
    import yaml

    def clusters_file(name: str) -> Path:
        kubeconfig = fake.kubeconfig(tmp / f"kubeconfig-{name}", token=f"token-{name}")
        path = tmp / f"clusters-{name}.yaml"
        path.write_text(yaml.safe_dump({"clusters": {CLUSTER: {
            "backend": "kubernetes", "namespace": NS, "kubeconfig": str(kubeconfig),
            "backoff_initial": 0.05, "backoff_max": 0.5, "cache_sync_wait": 0.5}}}))
        return path

    os.environ["FALCON_CLUSTERS_FILE"] = str(clusters_file("script"))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from accounts.models import User
    from core.statuses import EXP_TERMINAL, ExpStatus, JobStatus
    from experiments.models import Experiment
    from experiments.services import exp_abort, exp_create
    from jobs.models import Job

    port = 50000 + rng.randrange(10000)
    base_env = {**os.environ, "FALCON_GRPC_TARGET": f"127.0.0.1:{port}",
                "FALCON_LEASE_NAMESPACE": NS, "FALCON_PENDING_TIMEOUT_SECONDS": "8",
                "FALCON_PROGRESS_DEADLINE_SECONDS": "5", "FALCON_ORPHAN_GRACE_SECONDS": "2",
                "FALCON_LEASE_DURATION_SECONDS": "3", "FALCON_LEASE_RENEW_DEADLINE_SECONDS": "2",
                "FALCON_LEASE_RETRY_PERIOD_SECONDS": "0.5", "FALCON_LEASE_IN_CLUSTER": "false",
                "PYTHONPATH": ""}
    manage = str(ROOT / "manage.py")
    logs = tmp / "logs"
    logs.mkdir()

    def spawn(name: str) -> subprocess.Popen:
        env = dict(base_env, POD_NAME=name)
        if name == "grpc":
            cmd = [sys.executable, manage, "rungrpc", "--addr", f"127.0.0.1:{port}"]
        elif name == "exp":
            env["FALCON_LEASE_KUBECONFIG"] = str(fake.kubeconfig(tmp / "kc-exp", token="t-exp"))
            cmd = [sys.executable, manage, "runcontroller", "exp", "--interval", "0.5"]
        else:
            clusters = clusters_file(name)
            env["FALCON_CLUSTERS_FILE"] = str(clusters)
            env["FALCON_LEASE_KUBECONFIG"] = str(tmp / f"kubeconfig-{name}")
            cmd = [sys.executable, manage, "runcontroller", "resources", "--interval", "0.5"]
        out = open(logs / f"{name}.log", "a")
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                cwd=ROOT, start_new_session=True)

    procs = {"grpc": spawn("grpc")}
    time.sleep(2.0)
    for name in (*REPLICAS, "exp"):
        procs[name] = spawn(name)

    user, _ = User.objects.get_or_create(user_id="chaos", defaults={"email": "c@example.com"})
    spec = {"command": "true", "replica": 2, "image": "busybox:1", "envs": {}}
    exps = [exp_create(creator=user, name=f"chaos-{i}", cluster_name=CLUSTER,
                       exp_type="benchmark", role_to_task_spec={"a": spec, "b": spec},
                       config="x: 1\n") for i in range(exps_n)]
    fates: dict[str, tuple[str, float]] = {}  # Job name -> (fate, when)
    aborted: set[int] = set()
    kills = 0
    started = time.monotonic()
    next_kill = started + rng.uniform(1, 3)

    def play_cluster() -> None:
        """The Job controller and kubelet: Pods for new Jobs, then their fate."""
        now = time.monotonic()
        for job in fake.list("jobs", NS):
            meta = job["metadata"]
            name = meta["name"]
            if meta.get("deletionTimestamp") or (job.get("status") or {}).get("conditions"):
                continue
            if name not in fates:
                fate = rng.choices(["succeed", "fail", "stuck"], [6, 2, 1])[0]
                fates[name] = (fate, now + rng.uniform(1, 4))
                if fate != "stuck":
                    fake.spawn_pods(NS, name, status={"phase": "Running", "conditions": [
                        {"type": "Ready", "status": "True"}]})
                    total = job["spec"].get("completions") or 1
                    fake.set_job_status(NS, name, {"active": total, "ready": total})
                else:
                    fake.spawn_pods(NS, name, status={"phase": "Pending", "conditions": [
                        {"type": "PodScheduled", "status": "False",
                         "reason": "Unschedulable"}]})
                    fake.set_job_status(NS, name, {"active": 1, "ready": 0})
                continue
            fate, when = fates[name]
            if fate == "stuck" or now < when:
                continue
            total = job["spec"].get("completions") or 1
            if fate == "succeed":
                path = Path(str(Job.objects.filter(pk=int(meta["labels"]["falcon.io/job-id"]))
                                .values_list("artifact_path", flat=True).first() or "")
                            .removeprefix("file://"))
                if str(path):
                    path.mkdir(parents=True, exist_ok=True)
                    (path / "result.txt").write_text("ok\n")
                fake.set_job_status(NS, name, {"succeeded": total, "conditions": [
                    {"type": "Complete", "status": "True"}]})
            else:
                fake.set_job_status(NS, name, {"failed": 1, "conditions": [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                     "message": "chaos"}]})
            with fake.lock:
                for key, pod in list(fake.objects.items()):
                    if key[0] == "pods" and pod["metadata"]["labels"].get(
                            "batch.kubernetes.io/job-name") == name:
                        pod["status"] = {"phase": "Succeeded" if fate == "succeed" else "Failed"}
                        fake._touch(key)

    try:
        while time.monotonic() - started < chaos_s:
            play_cluster()
            if rng.random() < 0.02:
                exp = rng.choice(exps)
                if exp.pk not in aborted:
                    try:
                        exp_abort(exp_id=exp.pk, actor=user)
                        aborted.add(exp.pk)
                    except Exception:
                        pass  # already finished
            if time.monotonic() >= next_kill:
                victim = rng.choice([*REPLICAS, "exp"])
                procs[victim].send_signal(signal.SIGKILL)
                procs[victim].wait()
                kills += 1
                time.sleep(rng.uniform(0, 1.0))
                procs[victim] = spawn(victim)
                next_kill = time.monotonic() + rng.uniform(1, 4)
            time.sleep(0.1)
        # Converge: no more kills; the cluster keeps playing until every experiment ends.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            play_cluster()
            if not Experiment.objects.exclude(status__in=EXP_TERMINAL).exists():
                break
            time.sleep(0.2)
        time.sleep(6.0)  # the orphan grace, then a few ticks of sweeping
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    problems: list[str] = []
    for exp in Experiment.objects.order_by("pk"):
        statuses = list(Job.objects.filter(experiment=exp).values_list("status", flat=True))
        if exp.status not in EXP_TERMINAL:
            problems.append(f"exp {exp.pk} is {exp.status} (jobs {statuses})")
        elif exp.status == ExpStatus.SUCCEEDED and any(s != JobStatus.SUCCEEDED
                                                       for s in statuses):
            problems.append(f"exp {exp.pk} Succeeded with jobs {statuses}")
        elif any(s in (JobStatus.PENDING, JobStatus.RUNNING) for s in statuses):
            problems.append(f"exp {exp.pk} is {exp.status} with jobs {statuses}")
    added: dict[str, int] = {}
    for _rv, kind, res, ns, obj in fake.events:
        if kind == "ADDED" and res == "jobs":
            added[obj["metadata"]["name"]] = added.get(obj["metadata"]["name"], 0) + 1
    problems += [f"Job {n} created {c} times" for n, c in added.items() if c > 1]
    open_ids = set(Job.objects.exclude(status__in=(JobStatus.SUCCEEDED, JobStatus.FAILED,
                                                   JobStatus.ABORTED))
                   .values_list("pk", flat=True))
    for job in fake.list("jobs", NS):
        done = any(c.get("type") in ("Complete", "Failed")
                   for c in (job.get("status") or {}).get("conditions") or [])
        owner = int(job["metadata"]["labels"].get("falcon.io/job-id", 0))
        if not done and owner not in open_ids:
            problems.append(f"orphan Job {job['metadata']['name']} (falcon job {owner})")
    for pod in fake.list("pods", NS):
        owner = int(pod["metadata"]["labels"].get("falcon.io/job-id", 0))
        if (pod.get("status") or {}).get("phase") in ("Running", "Pending") \
                and not pod["metadata"].get("deletionTimestamp") and owner not in open_ids:
            problems.append(f"orphan Pod {pod['metadata']['name']} (falcon job {owner})")
    writes = 0
    for req in fake.requests:
        if req.method == "GET" or req.resource not in ("jobs", "pods") or \
                not req.token.startswith("token-rm-"):
            continue
        writes += 1
        identity = req.token.removeprefix("token-")
        holders = [h for lease, h in req.holders.items() if "resources" in lease]
        if identity not in holders:
            problems.append(f"{req.method} {req.resource}/{req.name} by {identity} while the "
                            f"Lease was held by {holders or 'nobody'}")
    by_status: dict[str, int] = {}
    for status in Experiment.objects.values_list("status", flat=True):
        by_status[status] = by_status.get(status, 0) + 1
    print(f"{kills} kills, {len(aborted)} aborts, {writes} cluster writes by resource managers, "
          f"experiments: {by_status}")
    fake.close()
    if problems:
        print(f"FAILED ({len(problems)}); logs in {logs}:")
        for problem in problems:
            print(f"  {problem}")
        return 1
    print("OK: every experiment terminal and consistent, no duplicate Job, no orphan, no write "
          "without the Lease")
    return 0


if __name__ == "__main__":
    sys.exit(main())
