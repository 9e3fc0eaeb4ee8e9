"""Measure the HTTP API's list and create under concurrent clients, as production serves it.

Run from the repository root:

    .venv/bin/python bench/api.py [--n 100000] [--mariadb [URL]] [--clients 20] [--seconds 8]

What it does, in order:

1. makes a FRESH database: an SQLite file in a temporary folder (default), or with `--mariadb`
   a uniquely named database on the MariaDB server (default `mysql://root@127.0.0.1:3306`),
   dropped at the end whatever happens;
2. runs `manage.py prepare` and `manage.py migrate` on it, then inserts N experiments (default
   100,000), one job and one artifact each, with bulk inserts: 6 users, 6 statuses spread
   evenly, 4 clusters, 5 types, names `<family>-<size>-<n>`, labels `team=<family>` (and
   `baseline=true` on every 100th) and creation times one year back;
3. starts the API under gunicorn as the Dockerfile does (`falcon_site.wsgi`, here 4 workers) on
   127.0.0.1 and a free port, with `FALCON_DB_CONN_MAX_AGE` as configured (the production
   default unless `--conn-max-age` is given);
4. for each measured operation, runs `--clients` client threads (one httpx client each) for
   `--seconds` seconds against 127.0.0.1 only, and prints requests per second and the
   50th/95th/99th percentile latency in milliseconds, and the CPU the client itself used per
   request (it shares the machine's CPUs with the server). The list operations are: no filter,
   each filter (`status`, `creator`, `cluster_name`, `exp_type`, a rare label `baseline=true` on
   1 % of the rows and a common one `team=llama` on a sixth), page 1 and page 21 (the cursor
   of page 21 is found by following `next` links first), and `search`; then create.

Authentication is the local mode's: a token of the local issuer for a seeded user.

This is a measurement, not a test: timings depend on the machine, so no test asserts them.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))

STATUSES = ["Created", "Running", "Succeeded", "Failed", "Aborting", "Aborted"]
CLUSTERS = ["local", "tpu-east", "gpu-west", "cpu-pool"]
TYPES = ["profiling", "benchmark", "training", "evaluation", "sweep"]
FAMILIES = ["llama", "mistral", "resnet", "vit", "bert", "whisper"]
SIZES = ["7b", "13b", "70b", "base", "large"]
USERS = ["alice", "bob", "carol", "dave", "erin", "frank"]
CONFIG = "\n".join(f"param_{i}: {i * 37 % 1000}" for i in range(80))  # about 1 KiB


def free_port() -> int:
    """Return a TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Database:
    """A fresh database for one run: an SQLite file, or a uniquely named MariaDB database."""

    def __init__(self, tmp: Path, mariadb: str | None):
        self.mariadb = mariadb.rstrip("/") if mariadb else None
        self.name = f"falcon_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        if self.mariadb:
            self.url = f"{self.mariadb}/{self.name}"
        else:
            self.url = f"sqlite:///{tmp / 'falcon.sqlite3'}"

    def _server(self):
        import MySQLdb
        from urllib.parse import urlsplit
        parts = urlsplit(self.mariadb)
        return MySQLdb.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
                               user=parts.username or "root", passwd=parts.password or "")

    def create(self) -> None:
        """Create the MariaDB database (an SQLite file is created by migrate)."""
        if self.mariadb:
            conn = self._server()
            conn.cursor().execute(f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4 "
                                  "COLLATE utf8mb4_unicode_ci")
            conn.close()

    def drop(self) -> None:
        """Drop the MariaDB database (the SQLite file goes with the temporary folder)."""
        if self.mariadb:
            conn = self._server()
            conn.cursor().execute(f"DROP DATABASE IF EXISTS `{self.name}`")
            conn.close()


def run_manage(env: dict[str, str], *args: str) -> None:
    """Run `manage.py <args>` with `env`; raise if it fails."""
    subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)


def seed(n: int) -> dict[str, str]:
    """Insert `n` experiments with one job and one artifact each; return `{user: email}`.

    Runs in this process (Django set up on the benchmark's database). Creation times are set
    explicitly (auto_now_add is switched off while inserting), one year back to now, ids in
    the same order.
    """
    import django
    django.setup()
    from django.db import transaction
    from django.utils import timezone

    from accounts.issuer import local_subject
    from accounts.models import User
    from artifacts.models import Artifact
    from experiments.models import ExpLabel, Experiment
    from jobs.models import Job

    emails = {u: f"{u}@example.com" for u in USERS}
    User.objects.bulk_create([User(user_id=local_subject(e), email=e, password="!")
                              for e in emails.values()])
    subjects = [local_subject(e) for e in emails.values()]
    for model in (Experiment, Job, Artifact):
        for field in model._meta.fields:
            if field.name in ("created_at", "updated_at"):
                field.auto_now_add = field.auto_now = False
    rng = random.Random(16)
    start = timezone.now() - timedelta(days=365)
    step = timedelta(days=365) / max(n, 1)
    batch = 5000
    for first in range(0, n, batch):
        exps = []
        for i in range(first, min(n, first + batch)):
            created = start + step * i
            family, size = rng.choice(FAMILIES), rng.choice(SIZES)
            name = f"{family}-{size}-{i}"
            spec = {"main": {"command": "python train.py", "replica": 1, "image": "",
                             "device_count": None, "device_type": "", "device_topo": "",
                             "envs": {"SEED": str(i)}}}
            labels = {"team": family, **({"baseline": "true"} if i % 100 == 0 else {})}
            exps.append(Experiment(
                name=name, creator_id=subjects[i % len(subjects)], labels=labels,
                cluster_name=CLUSTERS[i % len(CLUSTERS)], exp_type=TYPES[i % len(TYPES)],
                role_to_task_spec=spec, config=CONFIG, status=STATUSES[i % len(STATUSES)],
                artifact_path=f"file:///var/artifacts/{i + 1}-{name}",
                created_at=created, updated_at=created))
        with transaction.atomic():
            Experiment.objects.bulk_create(exps)
            ids = list(Experiment.objects.filter(created_at__gte=exps[0].created_at)
                       .order_by("id").values_list("id", "created_at", "name", "exp_type",
                                                   "cluster_name", "artifact_path"))
            Job.objects.bulk_create([
                Job(experiment_id=pk, role="main", cluster_name=cluster, exp_type=typ,
                    task_spec=exps[0].role_to_task_spec["main"], artifact_path=f"{path}/main",
                    status="Pending", created_at=created, updated_at=created)
                for pk, created, _name, typ, cluster, path in ids])
            Artifact.objects.bulk_create([
                Artifact(experiment_id=pk, path=path, artifact_type=typ, created_at=created,
                         updated_at=created)
                for pk, created, _name, typ, _cluster, path in ids])
            ExpLabel.objects.bulk_create([
                ExpLabel(experiment_id=pk, key=key, value=value)
                for (pk, *_rest), exp in zip(ids, exps) for key, value in exp.labels.items()])
    return emails


def drive(url: str, headers: dict[str, str], seconds: float, clients: int,
          method: str = "GET", body_for=None) -> tuple[list[float], int, float]:
    """Run `clients` threads sending requests for `seconds`; return (latencies, errors, wall)."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(index: int) -> None:
        mine: list[float] = []
        bad = 0
        with httpx.Client(headers=headers, timeout=60) as client:
            count = 0
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                if method == "GET":
                    res = client.get(url)
                else:
                    res = client.post(url, json=body_for(index, count))
                mine.append(time.perf_counter() - t0)
                count += 1
                if res.status_code >= 400:
                    bad += 1
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors[0], time.monotonic() - started


def percentile(values: list[float], q: float) -> float:
    """Return the q-th percentile (0..100) of `values`, in milliseconds."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index] * 1000


def page_url(base: str, headers: dict[str, str], query: str, page: int) -> str | None:
    """Return the URL of page `page` (1-based) of the list with `query`, following `next`.

    None when the list has fewer pages.
    """
    url = f"{base}/api/v1/exps?{query}" if query else f"{base}/api/v1/exps"
    with httpx.Client(headers=headers, timeout=120) as client:
        for _ in range(page - 1):
            res = client.get(url)
            res.raise_for_status()
            url = res.json()["next"]
            if url is None:
                return None
    return url


def wait_ready(base: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Wait until the server answers /readyz (or fail when it exits or takes too long)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("gunicorn exited before it was ready")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("gunicorn was not ready in time")


def main() -> None:
    """Parse the arguments, set up the database and the server, measure, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="experiments to insert")
    parser.add_argument("--mariadb", nargs="?", const="mysql://root@127.0.0.1:3306",
                        default=None, help="use a fresh database on this MariaDB server")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=8.0, help="per operation")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads per worker (more than 1: gunicorn's gthread worker)")
    parser.add_argument("--keep-alive", type=int, default=None,
                        help="gunicorn --keep-alive seconds (gthread keeps connections open)")
    parser.add_argument("--conn-max-age", default=None,
                        help="FALCON_DB_CONN_MAX_AGE for the server (default: the settings')")
    parser.add_argument("--only", default="", help="comma list of operation names to run")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="falcon-bench-"))
    db = Database(tmp, args.mariadb)
    env = {**os.environ, "FALCON_VAR_DIR": str(tmp), "DATABASE_URL": db.url,
           "FALCON_AUTH_MODE": "local", "DJANGO_SETTINGS_MODULE": "falcon_site.settings",
           "FALCON_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    if args.conn_max_age is not None:
        env["FALCON_DB_CONN_MAX_AGE"] = str(args.conn_max_age)
    server = None
    try:
        db.create()
        run_manage(env, "prepare")
        run_manage(env, "migrate")
        os.environ.update(env)
        sys.path.insert(0, str(ROOT))
        t0 = time.monotonic()
        emails = seed(args.n)
        print(f"# {'MariaDB' if args.mariadb else 'SQLite'}: {args.n} experiments inserted in "
              f"{time.monotonic() - t0:.1f} s", flush=True)
        from django.db import connection
        connection.close()
        from accounts.issuer import local_issuer
        token = local_issuer().issue(emails["alice"], ttl_seconds=3600).token
        headers = {"Authorization": f"Bearer {token}"}

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        command = [GUNICORN, "falcon_site.wsgi", "--bind", f"127.0.0.1:{port}", "--workers",
                   str(args.workers), "--timeout", "60"]
        if args.threads > 1:
            command += ["--worker-class", "gthread", "--threads", str(args.threads)]
        if args.keep_alive is not None:
            command += ["--keep-alive", str(args.keep_alive)]
        server = subprocess.Popen(
            command,
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        wait_ready(base, server)

        lists = [("list", ""), ("status=Failed", "status=Failed"),
                 ("creator", f"creator={emails['bob']}"),
                 ("cluster_name", "cluster_name=gpu-west"),
                 ("exp_type", "exp_type=training"),
                 ("label=baseline", "label=baseline=true"), ("label=team", "label=team=llama")]
        ops: list[tuple[str, str | None]] = []
        for label, query in lists:
            ops.append((f"{label} p1", page_url(base, headers, query, 1)))
            ops.append((f"{label} p21", page_url(base, headers, query, 21)))
        ops.append(("search p1", page_url(base, headers, "search=whisper-70b", 1)))
        ops.append(("create", None))
        only = {name.strip() for name in args.only.split(",") if name.strip()}

        print(f"# {args.clients} clients, {args.seconds:g} s each, gunicorn {args.workers} "
              f"workers x {args.threads} thread(s), {os.cpu_count()} CPUs", flush=True)
        print(f"{'operation':<20} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
              f"{'errors':>6} {'client cpu ms/req':>17}", flush=True)
        for label, url in ops:
            if only and label not in only:
                continue
            if url is None and label != "create":
                print(f"{label:<20} (skipped: the list has fewer pages)", flush=True)
                continue
            cpu0 = time.process_time()
            if label == "create":
                run = uuid.uuid4().hex[:6]

                def body(index: int, count: int, run=run) -> dict:
                    return {"name": f"bench-{run}-{index}-{count}", "cluster_name": "local",
                            "exp_type": "benchmark", "config": CONFIG,
                            "role_to_task_spec": {"main": {"command": "true", "replica": 1}}}
                lat, errors, wall = drive(f"{base}/api/v1/exps", headers, args.seconds,
                                          args.clients, method="POST", body_for=body)
            else:
                lat, errors, wall = drive(url, headers, args.seconds, args.clients)
            client_cpu = (time.process_time() - cpu0) * 1000 / max(len(lat), 1)
            print(f"{label:<20} {len(lat) / wall:8.1f} {percentile(lat, 50):8.1f} "
                  f"{percentile(lat, 95):8.1f} {percentile(lat, 99):8.1f} {errors:6d} "
                  f"{client_cpu:17.2f}", flush=True)
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        try:
            from django.db import connections
            connections.close_all()
        except Exception:  # Django was perhaps never set up
            pass
        db.drop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
