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
3. starts the API under gunicorn as the Dockerfile does (`falcon_site.wsgi`, sync workers, here
   one per CPU: `--workers`) on 127.0.0.1 and a free port, with `FALCON_DB_CONN_MAX_AGE` as
   configured (the production default unless `--conn-max-age` is given);
4. for each measured operation, after a `--warmup` window of the same load, runs `--clients`
   concurrent clients in a closed loop for `--seconds` seconds against 127.0.0.1 only, with
   wrk (`--driver wrk`, the default when it is installed: scripts/setup.sh installs Debian's
   `wrk`; about 0.3 to 0.5 ms of CPU per request) or in this process (`--driver
   aiohttp`: one asyncio loop, about 1.5 ms of CPU per request, taken from the CPUs the server
   shares), and prints requests per second, the 50th/95th/99th percentile latency in
   milliseconds, and the CPU per request of the server (its master and workers) and of the
   load generator. The list operations are: no filter, each filter (`status`, `creator`,
   `cluster_name`, `exp_type`, a rare label `baseline=true` on 1 % of the rows and a common
   one `team=llama` on a sixth), page 1 and page 21 (the cursor of page 21 is found by
   following `next` links first), and `search`; then create, then `/healthz`: no database,
   no authentication, the floor of what any request costs through gunicorn and Django's
   middleware (not counted in the targets).

Authentication is the local mode's: a token of the local issuer for a seeded user.

`--reuse DIR` (SQLite only) keeps the database in DIR and seeds it the first time (migrations
are applied every run), for trying a change again quickly; the experiments earlier runs
created are deleted first, so every run lists the seeded rows. A DIR seeded with another
`--n` is refused (give its `--n`, or another DIR).
The last lines say which operations meet the targets (p95 under 50 ms; with
`--mlflow-list-rps`, list throughput at least ten times MLflow's).

`--hold` measures nothing: it seeds, starts the server, prints `FALCON_URL=...` and
`FALCON_AUTH_HEADER=...` and keeps it up until SIGINT or SIGTERM, for another load generator
(a side-by-side run against the MLflow tracking server reads those two variables); the token
is valid for an hour.

This is a measurement, not a test: timings depend on the machine, so no test asserts them.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
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


def port_problem(port: int) -> str | None:
    """Say why the server cannot listen on 127.0.0.1:`port` now, or None when it can."""
    if not 1 <= port <= 65535:
        return "a TCP port is 1 to 65535"
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except PermissionError:
            return "this user may not listen on it (ports under 1024 need root)"
        except OSError:
            return f"something already listens on 127.0.0.1:{port}; stop it or choose another"
    return None


def free_port() -> int:
    """Return a TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Database:
    """A fresh database for one run: an SQLite file, or a uniquely named MariaDB database."""

    def __init__(self, tmp: Path, mariadb: str | None, name: str | None = None):
        self.mariadb = mariadb.rstrip("/") if mariadb else None
        self.name = name or f"falcon_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
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
            conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{self.name}` "
                                  "CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
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
                ExpLabel(experiment_id=pk, key=key, value=value, created_at=created)
                for (pk, created, *_rest), exp in zip(ids, exps)
                for key, value in exp.labels.items()])
    return emails


def drop_later_rows(max_id: int) -> int:
    """Delete the experiments after the seeded ones (made by earlier runs' creates); return how many.

    A reused database then holds what `seed` wrote: rows created by an earlier run are the
    newest, unlabelled and all Created, and a list walking the newest rows first (a label
    filter, `status`) would measure them instead of the seeded mix.
    """
    from experiments.models import Experiment

    later = Experiment.objects.filter(pk__gt=max_id)
    count = later.count()
    if count:
        later.delete()  # jobs, artifacts and labels go with them (foreign keys, CASCADE)
    return count


def drive(url: str, headers: dict[str, str], seconds: float, clients: int,
          method: str = "GET", body: str | None = None) -> tuple[dict[str, float], float]:
    """Run `clients` concurrent clients for `seconds`; return (their figures, CPU seconds).

    Each client sends its next request when the previous answer has been read (a closed loop,
    as a CLI or a dashboard does). All of them run in one asyncio loop on one aiohttp session
    with a connection per client, kept alive when the server allows it (1.5 to 2 ms of this
    process's CPU per request, against 1.4 to 4.5 ms for one thread per client with a
    synchronous client). The figures and `body` are `drive_wrk`'s; the CPU is this process's.
    """
    import asyncio

    import aiohttp

    async def run() -> tuple[list[float], int, float]:
        latencies: list[float] = []
        errors = 0
        connector = aiohttp.TCPConnector(limit=clients)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(headers=headers, connector=connector,
                                         timeout=timeout) as session:
            deadline = time.monotonic() + seconds

            async def client(index: int) -> None:
                nonlocal errors
                count = 0
                while time.monotonic() < deadline:
                    t0 = time.perf_counter()
                    kwargs = {} if body is None else {
                        "data": body.replace("{n}", f"{index}-{count}"),
                        "headers": {"Content-Type": "application/json"}}
                    async with session.request(method, url, **kwargs) as res:
                        await res.read()
                        status = res.status
                    latencies.append(time.perf_counter() - t0)
                    count += 1
                    errors += status >= 400

            started = time.monotonic()
            await asyncio.gather(*(client(i) for i in range(clients)))
            return latencies, errors, time.monotonic() - started

    cpu0 = time.process_time()
    latencies, errors, wall = asyncio.run(run())
    figures = {"requests": len(latencies), "seconds": wall, "errors": errors,
               **{f"p{q}": percentile(latencies, q) for q in (50, 95, 99)}}
    return figures, time.process_time() - cpu0


# wrk's script (its Lua API: `init`, `request`, `done`): the headers and method of every
# request, a body per request for create (`{n}` becomes a number unique to the run), and a last
# line of JSON with the counts and the latency percentiles in microseconds.
WRK_SCRIPT = """
local counter = 0
local template = nil
local threads = {}
function setup(thread)
  thread:set("thread_id", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  for i = 1, #args, 2 do wrk.headers[args[i]] = args[i + 1] end
  wrk.method = os.getenv("BENCH_METHOD")
  template = os.getenv("BENCH_BODY")
  if template == "" then template = nil end
end
function request()
  if template == nil then return wrk.format() end
  counter = counter + 1
  return wrk.format(nil, nil, nil, (template:gsub("{n}", thread_id .. "-" .. counter)))
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "micros": %d, "status_errors": %d, "socket_errors": %d, '
    .. '"p50": %d, "p95": %d, "p99": %d}\\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99)))
end
"""


def drive_wrk(url: str, headers: dict[str, str], seconds: float, clients: int,
              method: str = "GET", body: str | None = None,
              ) -> tuple[dict[str, float], float]:
    """Run wrk with `clients` connections for `seconds`; return (its figures, its CPU seconds).

    wrk (a C load generator, Debian's `wrk`) keeps each connection in a closed loop, as
    `drive` does, and takes about 0.3 to 0.5 ms of CPU per request where an asyncio client
    takes 1.5 to 2 ms: on a machine whose CPUs the server shares with the load,
    the figures are then the server's. The figures are `requests`, `seconds` (wall), `errors`
    (status 400 and over, and socket errors) and `p50`, `p95`, `p99` in milliseconds. `body`
    is sent with every request, `{n}` replaced by a number unique to the run.
    """
    import resource
    import shlex

    script = Path(tempfile.mkdtemp(prefix="falcon-wrk-")) / "bench.lua"
    script.write_text(WRK_SCRIPT)
    args = [item for name, value in headers.items() for item in (name, value)]
    if body is not None:
        args += ["Content-Type", "application/json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        out = subprocess.run(
            ["wrk", "-t", str(min(2, clients)), "-c", str(clients), "-d", f"{int(seconds)}s", "--timeout", "60s", "-s", str(script), url, "--",
             *args],
            env={**os.environ, "BENCH_METHOD": method, "BENCH_BODY": body or ""},
            capture_output=True, text=True, check=True).stdout
    except subprocess.CalledProcessError as exc:
        # The arguments after `--` are the headers, the token among them: not printed.
        shown = shlex.join(exc.cmd[:exc.cmd.index("--")])
        raise SystemExit(f"wrk failed ({exc.returncode}): {shown} -- <headers>\n"
                         f"{(exc.stderr or exc.stdout).strip()}") from None
    finally:
        shutil.rmtree(script.parent, ignore_errors=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    raw = json.loads(out.strip().splitlines()[-1])
    figures = {"requests": raw["requests"], "seconds": raw["micros"] / 1e6,
               "errors": raw["status_errors"] + raw["socket_errors"],
               **{q: raw[q] / 1000 for q in ("p50", "p95", "p99")}}
    return figures, cpu


def session_cpu_seconds(sid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of session `sid`.

    The server runs in a session of its own (`start_new_session`), so its master and workers
    are counted whatever their pids (Linux /proc; `proc(5)`: fields 6 `session`, 14 `utime`,
    15 `stime`, in clock ticks).
    """
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[3]) == sid:  # fields[0] is field 3 (state)
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


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


def wait_ready(base: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    """Wait until the server answers /readyz (or fail when it exits or takes too long).

    Raises:
        SystemExit: gunicorn exited first (the end of its `log` is shown), or was not ready
            within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"gunicorn exited before it was ready:\n{_tail(log)}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"gunicorn was not ready in {timeout:g} s:\n{_tail(log)}")


def _tail(log: Path, lines: int = 15) -> str:
    """The last `lines` lines of a log file."""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


# The lists measured (label, query), each on page 1 and page 21, then a search and create.
LISTS = [("list", ""), ("status=Failed", "status=Failed"), ("creator", "creator=bob@example.com"),
         ("cluster_name", "cluster_name=gpu-west"), ("exp_type", "exp_type=training"),
         ("label=baseline", "label=baseline=true"), ("label=team", "label=team=llama")]
OPERATIONS = [f"{label} p{page}" for label, _query in LISTS for page in (1, 21)] + [
    "search p1", "create", "healthz"]
# Not an API operation: what any request costs through the WSGI server and Django's middleware
# (the floor under every figure above it); measured last, not counted in the targets.
FLOOR = "healthz"

# The targets (docs/performance.md): p95 under 50 ms for every list and for create at 20
# concurrent clients, and list throughput at least ten times MLflow's SearchRuns on the same
# database, measured side by side (give its req/s with --mlflow-list-rps).
P95_TARGET_MS = 50.0
MLFLOW_FACTOR = 10.0


def print_targets(results: list[tuple[str, float, float, int]], args) -> None:
    """Print, per target, the operations that meet it and those that do not."""
    if not results:
        return
    # No answer (p95 is NaN) or any failed request does not meet it either.
    slow = [f"{label} ({p95:.0f} ms{f', {errors} errors' if errors else ''})"
            for label, _rps, p95, errors in results
            if not p95 < P95_TARGET_MS or errors]
    print(f"# target p95 < {P95_TARGET_MS:.0f} ms at {args.clients} clients: "
          + (f"met by all {len(results)} operations" if not slow
             else f"NOT met by {len(slow)} of {len(results)}: {', '.join(slow)}"), flush=True)
    if args.mlflow_list_rps:
        lists = [(label, rps) for label, rps, _p95, _errors in results
                 if label not in ("create", FLOOR)]
        if lists:
            worst_label, worst = min(lists, key=lambda item: item[1])
            ratio = worst / args.mlflow_list_rps
            print(f"# target list req/s >= {MLFLOW_FACTOR:.0f} x MLflow "
                  f"({args.mlflow_list_rps:g} req/s): lowest list {worst_label} {worst:.1f} req/s"
                  f" = {ratio:.1f} x: {'met' if ratio >= MLFLOW_FACTOR else 'NOT met'}",
                  flush=True)


def measure(args, url: str, headers: dict[str, str], method: str, template: dict | None,
            server_sid: int) -> dict[str, float]:
    """Warm up, then load `url` for `args.seconds` with `args.driver`; return its figures.

    The figures: `rps`, `p50`/`p95`/`p99` (ms), `errors`, and the CPU milliseconds per request
    of the server (`server_cpu`, its session's processes) and of the load generator
    (`client_cpu`). `template` is the JSON body of a POST, its `{n}` replaced by a number unique
    to the run (the names of created experiments differ).
    """
    load = drive_wrk if args.driver == "wrk" else drive
    body = json.dumps(template) if template is not None else None
    if args.warmup > 0:  # every worker has compiled its queries and filled its caches
        load(url, headers, args.warmup, args.clients, method,
             body and body.replace("{n}", "warmup-{n}"))
    server0 = session_cpu_seconds(server_sid)
    got, client_cpu = load(url, headers, args.seconds, args.clients, method, body)
    count = max(got["requests"], 1)
    return {"rps": got["requests"] / got["seconds"], "p50": got["p50"], "p95": got["p95"],
            "p99": got["p99"], "errors": got["errors"],
            "server_cpu": (session_cpu_seconds(server_sid) - server0) * 1000 / count,
            "client_cpu": client_cpu * 1000 / count}


def operations(base: str, headers: dict[str, str], only: set[str]) -> list[tuple[str, str | None]]:
    """Return (label, URL) of each operation to run, in order; None for a page the list lacks.

    Each list on page 1 and page 21, the search, create (`POST /api/v1/exps`), then the floor.
    A page's URL is found only for the operations that run (page 21 follows 20 `next` links).
    """
    pages = [(f"{label} p{page}", query, page) for label, query in LISTS for page in (1, 21)]
    pages.append(("search p1", "search=whisper-70b", 1))
    ops = [(label, page_url(base, headers, query, page)) for label, query, page in pages
           if not only or label in only]
    ops += [(label, url) for label, url in (("create", f"{base}/api/v1/exps"),
                                            (FLOOR, f"{base}/healthz"))
            if not only or label in only]
    return ops


def run_operation(args, label: str, url: str, headers: dict[str, str],
                  server_sid: int) -> dict[str, float]:
    """Measure one operation (`measure`); a create posts experiments with names unique to it."""
    if label != "create":
        return measure(args, url, headers, "GET", None, server_sid)
    run = uuid.uuid4().hex[:6]
    template = {"name": f"bench-{run}-{{n}}", "cluster_name": "local", "exp_type": "benchmark",
                "config": CONFIG,
                "role_to_task_spec": {"main": {"command": "true", "replica": 1}}}
    return measure(args, url, headers, "POST", template, server_sid)


def hold(base: str, headers: dict[str, str], server: subprocess.Popen) -> None:
    """Print the server's URL and auth header, then wait for SIGINT or SIGTERM (or its exit).

    The lines are `FALCON_URL=...`, `FALCON_AUTH_HEADER=Authorization: Bearer ...` and
    `FALCON_SERVER_SID=...` (the session of gunicorn's master and workers, whose CPU time
    `session_cpu_seconds` reads), as a side-by-side harness reads them; the caller's
    `finally` stops the server and drops the database (a `--reuse`d one is kept).
    """
    stop = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.append(1))
    print(f"FALCON_URL={base}", flush=True)
    print(f"FALCON_AUTH_HEADER=Authorization: {headers['Authorization']}", flush=True)
    print(f"FALCON_SERVER_SID={server.pid}", flush=True)
    while not stop and server.poll() is None:
        time.sleep(0.2)


def sizes_of(text: str) -> list[int]:
    """Parse `--n`: one size or a comma list of sizes, each a whole number of at least 1."""
    try:
        sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give whole numbers separated by commas, e.g. 10000,100000") from None
    if not sizes or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give one or more different sizes of at least 1, e.g. 10000,100000")
    return sizes


class HeldServer:
    """This script run with `--hold` for one size: its database seeded, its server up."""

    def __init__(self, args, n: int):
        self.n = n
        command = [PYTHON, __file__, "--n", str(n), "--hold", "--workers", str(args.workers),
                   "--threads", str(args.threads)]
        for flag, value in (("--mariadb", args.mariadb), ("--keep-alive", args.keep_alive),
                            ("--conn-max-age", args.conn_max_age)):
            if value is not None:
                command += [flag, str(value)]
        if args.reuse:
            command += ["--reuse", str(Path(args.reuse).resolve() / f"n-{n}")]
        self.proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        found: dict[str, str] = {}
        for line in self.proc.stdout:
            key, _, value = line.rstrip("\n").partition("=")
            if key in ("FALCON_URL", "FALCON_AUTH_HEADER", "FALCON_SERVER_SID"):
                found[key] = value
                if len(found) == 3:
                    break
            else:
                print(f"# n={n}: {line.rstrip()}", flush=True)
        if len(found) < 3:
            self.stop()
            raise SystemExit(f"the server for --n {n} did not start (exit {self.proc.returncode})")
        self.base = found["FALCON_URL"]
        name, _, value = found["FALCON_AUTH_HEADER"].partition(": ")
        self.headers = {name: value}
        self.sid = int(found["FALCON_SERVER_SID"])

    def stop(self) -> None:
        """End the run: its `finally` stops gunicorn and drops the database (unless reused)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def sizes_side_by_side(args, only: set[str]) -> None:
    """Seed and serve every size of `args.n`, then measure each operation at each size in turn.

    One server per size stays up for the whole run (seeded one after the other), and each
    operation runs at every size before the next operation starts, so a change of the
    machine's speed during the run falls on all sizes alike. Printed: each measurement as it
    is taken, then per operation the median server CPU per request at each size, its ratio
    to the floor (`/healthz` at that size) and its ratio to the first size.
    """
    servers: list[HeldServer] = []
    try:
        for n in args.n:
            servers.append(HeldServer(args, n))
        plans = {server.n: dict(operations(server.base, server.headers, only))
                 for server in servers}
        labels = list(plans[args.n[0]])
        load_before = os.getloadavg()[0]
        print(f"# sizes {', '.join(f'{n:,}' for n in args.n)} on "
              f"{'MariaDB' if args.mariadb else 'SQLite'}; {args.clients} clients, "
              f"{args.seconds:g} s each, {args.rounds} round(s), gunicorn {args.workers} "
              f"workers x {args.threads} thread(s), load by {args.driver}, "
              f"{os.cpu_count()} CPUs, load average {load_before:.1f} before", flush=True)
        print(f"{'operation':<20} {'n':>9} {'req/s':>8} {'p95 ms':>8} {'errors':>6} "
              f"{'server cpu ms/req':>17}", flush=True)
        cpu: dict[str, dict[int, list[float]]] = {label: {} for label in labels}
        for _round in range(args.rounds):
            for label in labels:
                for server in servers:
                    url = plans[server.n][label]
                    if url is None:
                        print(f"{label:<20} {server.n:>9} (skipped: the list has fewer pages)",
                              flush=True)
                        continue
                    got = run_operation(args, label, url, server.headers, server.sid)
                    cpu[label].setdefault(server.n, []).append(got["server_cpu"])
                    print(f"{label:<20} {server.n:>9} {got['rps']:8.1f} {got['p95']:8.1f} "
                          f"{got['errors']:6d} {got['server_cpu']:17.2f}", flush=True)
        print_sizes_table(args.n, cpu)
        print(f"# load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after "
              f"(1 min)", flush=True)
    finally:
        for server in servers:
            server.stop()


# Targets of the sizes table (docs/performance.md, "Cost in N"): every list operation at the
# largest size within 1.3x of its CPU per request at the first; every list page (any filter,
# the search) under 3x and a create under 4x the floor's CPU per request at the same size.
SIZE_FACTOR = 1.3
LIST_FACTOR, CREATE_FACTOR = 3.0, 4.0


def print_sizes_table(sizes: list[int], cpu: dict[str, dict[int, list[float]]]) -> None:
    """Print the median CPU per request of each operation at each size, and the verdicts."""
    median = {label: {n: statistics.median(values) for n, values in per_size.items()}
              for label, per_size in cpu.items()}
    floor = median.get(FLOOR, {})
    first, last = sizes[0], sizes[-1]
    head = " ".join(f"{f'{n:,} ms':>11} {'/floor':>6}" for n in sizes)
    print(f"\n{'operation':<20} {head} " + " ".join(f"{f'{n:,}/{first:,}':>15}"
                                                   for n in sizes[1:]), flush=True)
    verdicts = []
    for label, per_size in median.items():
        cells = []
        for n in sizes:
            value = per_size.get(n)
            over = value / floor[n] if value is not None and floor.get(n) else None
            cells.append(f"{value:11.2f} {over:6.1f}" if over is not None
                         else f"{value:11.2f} {'':>6}" if value is not None
                         else f"{'-':>11} {'':>6}")
            factor = {FLOOR: None, "create": CREATE_FACTOR}.get(label, LIST_FACTOR)
            if factor and over is not None and over >= factor:
                verdicts.append(f"{label} at {n:,} is {over:.1f}x the floor (target "
                                f"< {factor:g}x)")
        ratios = [f"{per_size[n] / per_size[first]:15.2f}"
                  if n in per_size and per_size.get(first) else f"{'-':>15}"
                  for n in sizes[1:]]
        print(f"{label:<20} {' '.join(cells)} {' '.join(ratios)}", flush=True)
        if (label not in ("create", FLOOR) and per_size.get(first) and last in per_size
                and per_size[last] / per_size[first] > SIZE_FACTOR):
            verdicts.append(f"{label} at {last:,} is {per_size[last] / per_size[first]:.2f}x "
                            f"its CPU at {first:,} (target <= {SIZE_FACTOR:g}x)")
    print("# targets " + ("met" if not verdicts else "NOT met: " + "; ".join(verdicts)),
          flush=True)


def main() -> None:
    """Parse the arguments, set up the database and the server, measure, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=sizes_of, default=[100_000],
                        help="experiments to insert; several sizes (`10000,100000,1000000`) "
                             "are seeded into one database each, served side by side and "
                             "measured in turn, operation by operation, and each operation's "
                             "CPU per request is printed beside its figure at the first size")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with several sizes: run every operation at every size this many "
                             "times (the median is reported)")
    parser.add_argument("--mariadb", nargs="?", const="mysql://root@127.0.0.1:3306",
                        default=None, help="use a fresh database on this MariaDB server")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=8.0, help="per operation")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                        help="gunicorn sync workers (default: one per CPU; the workers are "
                             "CPU-bound, and more of them than CPUs only take turns)")
    parser.add_argument("--driver", choices=("wrk", "aiohttp"),
                        default="wrk" if shutil.which("wrk") else "aiohttp",
                        help="load generator: wrk (default when installed; scripts/setup.sh "
                             "installs it) or aiohttp in this process")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads per worker (more than 1: gunicorn's gthread worker)")
    parser.add_argument("--keep-alive", type=int, default=None,
                        help="gunicorn --keep-alive seconds (gthread keeps connections open)")
    parser.add_argument("--conn-max-age", default=None,
                        help="FALCON_DB_CONN_MAX_AGE for the server (default: the settings')")
    parser.add_argument("--only", default="", help="comma list of operation names to run")
    parser.add_argument("--warmup", type=float, default=1.0,
                        help="seconds of the same load before each measured operation")
    parser.add_argument("--reuse", metavar="DIR", default=None,
                        help="keep the database (the SQLite file in DIR; with --mariadb a "
                             "database named in DIR/seeded.json, which is not dropped) and "
                             "seed it once (a DIR seeded with another --n is refused; with "
                             "several sizes, one subfolder DIR/n-N per size)")
    parser.add_argument("--hold", action="store_true",
                        help="seed and start the server, print its URL and an Authorization "
                             "header, and keep it up until SIGINT or SIGTERM instead of "
                             "measuring (for another load generator, e.g. a side-by-side run "
                             "against MLflow); the database is dropped at the end as usual")
    parser.add_argument("--port", type=int, default=0,
                        help="the server's port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--mlflow-list-rps", type=float, default=None,
                        help="MLflow SearchRuns req/s on the same database and machine (from "
                             "the side-by-side run), to print the 10x target's verdict")
    args = parser.parse_args()

    only = {name.strip() for name in args.only.split(",") if name.strip()}
    if unknown := sorted(only - set(OPERATIONS)):
        parser.error(f"--only: no operation {', '.join(map(repr, unknown))}; the operations "
                     f"are {', '.join(map(repr, OPERATIONS))}")
    if args.port and (problem := port_problem(args.port)):
        parser.error(f"--port {args.port}: {problem} (or leave --port out for a free one)")
    for name, value, minimum in (("--clients", args.clients, 1), ("--workers", args.workers, 1),
                                 ("--seconds", args.seconds, 1), ("--warmup", args.warmup, 0)):
        if value < minimum:
            parser.error(f"{name} must be at least {minimum}; got {value:g}")
    if args.driver == "wrk" and not all(float(v).is_integer() for v in (args.seconds,
                                                                        args.warmup)):
        parser.error("--seconds and --warmup are whole seconds with wrk (its -d); got "
                     f"{args.seconds:g} and {args.warmup:g}")
    # A SIGTERM ends the run as Ctrl-C does: the `finally` below stops gunicorn and cleans up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1; got {args.rounds}")
    if len(args.n) > 1:
        if args.hold or args.port:
            parser.error("--hold and --port serve one size; give one --n with them")
        sizes_side_by_side(args, only)
        return
    args.n = args.n[0]
    tmp = Path(args.reuse).resolve() if args.reuse else Path(
        tempfile.mkdtemp(prefix="falcon-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    marker = tmp / "seeded.json"
    seeded = json.loads(marker.read_text()) if args.reuse and marker.exists() else {}
    if seeded and seeded.get("n") != args.n:
        raise SystemExit(f"--reuse {tmp}: it holds {seeded.get('n')} seeded experiments, "
                         f"not --n {args.n}; give --n {seeded.get('n')}, or another folder "
                         "(or delete this one) to seed anew")
    if seeded and bool(seeded.get("database")) != bool(args.mariadb):
        raise SystemExit(f"--reuse {tmp}: it was seeded on "
                         f"{'MariaDB' if seeded.get('database') else 'SQLite'}; give "
                         f"{'--mariadb' if seeded.get('database') else 'no --mariadb'}, or "
                         "another folder")
    # A reused MariaDB database keeps the name its first run gave it (a new one, a new name).
    db = Database(tmp, args.mariadb, seeded.get("database") or (
        f"falcon_bench_reuse_{args.n}_{uuid.uuid4().hex[:8]}" if args.reuse else None))
    env = {**os.environ, "FALCON_VAR_DIR": str(tmp), "DATABASE_URL": db.url,
           "FALCON_AUTH_MODE": "local", "DJANGO_SETTINGS_MODULE": "falcon_site.settings",
           "FALCON_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    if args.conn_max_age is not None:
        env["FALCON_DB_CONN_MAX_AGE"] = str(args.conn_max_age)
    server = None
    if args.reuse and not seeded:  # a seeding that stopped halfway starts again from nothing
        for leftover in tmp.glob("falcon.sqlite3*"):
            leftover.unlink()
    try:
        db.create()
        run_manage(env, "prepare")
        run_manage(env, "migrate")
        os.environ.update(env)
        sys.path.insert(0, str(ROOT))
        t0 = time.monotonic()
        if seeded:
            import django
            django.setup()
            emails = {u: f"{u}@example.com" for u in USERS}
            dropped = drop_later_rows(seeded.get("max_id", args.n))
            print(f"# {'MariaDB ' + db.name if args.mariadb else 'SQLite'}: {args.n} "
                  f"experiments seeded before, in {tmp}"
                  + (f" ({dropped} created by earlier runs deleted)" if dropped else ""),
                  flush=True)
        else:
            emails = seed(args.n)
            if args.reuse:
                from experiments.models import Experiment
                max_id = Experiment.objects.order_by("-id").values_list("id", flat=True)[0]
                marker.write_text(json.dumps({"n": args.n, "max_id": max_id,
                                              **({"database": db.name} if args.mariadb
                                                 else {})}))
            print(f"# {'MariaDB' if args.mariadb else 'SQLite'}: {args.n} experiments inserted "
                  f"in {time.monotonic() - t0:.1f} s", flush=True)
        from django.db import connection
        connection.close()
        from accounts.issuer import local_issuer
        token = local_issuer().issue(emails["alice"], ttl_seconds=3600).token
        headers = {"Authorization": f"Bearer {token}"}

        port = args.port or free_port()
        base = f"http://127.0.0.1:{port}"
        command = [GUNICORN, "falcon_site.wsgi", "--bind", f"127.0.0.1:{port}", "--workers",
                   str(args.workers), "--timeout", "60"]
        if args.threads > 1:
            command += ["--worker-class", "gthread", "--threads", str(args.threads)]
        if args.keep_alive is not None:
            command += ["--keep-alive", str(args.keep_alive)]
        server_log = tmp / "gunicorn.log"
        with open(server_log, "w") as log_file:
            server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_file,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        wait_ready(base, server, server_log)
        if args.hold:
            hold(base, headers, server)
            return

        ops = operations(base, headers, only)
        print(f"# {args.clients} clients, {args.seconds:g} s each, gunicorn {args.workers} "
              f"workers x {args.threads} thread(s), load by {args.driver}, "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} before", flush=True)
        print(f"{'operation':<20} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
              f"{'errors':>6} {'server cpu ms/req':>17} {'client cpu ms/req':>17}", flush=True)
        results: list[tuple[str, float, float, int]] = []
        for label, url in ops:
            if url is None:
                print(f"{label:<20} (skipped: the list has fewer pages)", flush=True)
                continue
            figures = run_operation(args, label, url, headers, server.pid)
            if label != FLOOR:
                results.append((label, figures["rps"], figures["p95"], figures["errors"]))
            print(f"{label:<20} {figures['rps']:8.1f} {figures['p50']:8.1f} "
                  f"{figures['p95']:8.1f} {figures['p99']:8.1f} {figures['errors']:6d} "
                  f"{figures['server_cpu']:17.2f} {figures['client_cpu']:17.2f}", flush=True)
        print_targets(results, args)
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
        if not args.reuse or not marker.exists():  # a half-seeded database is not kept
            db.drop()
        if not args.reuse:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
