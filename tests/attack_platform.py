"""A live Falcon for attack tests: the whole platform as separate processes, in either auth mode.

- `local`: `manage.py runlocal` on loopback, as `make run` starts it (HTTP runserver, gRPC, the
  three controllers, the retention runner); users log in through the local issuer (`falcon auth
  login --email`, the token endpoint).
- `cloudflare`: the production shape, one process per component as in a Deployment: gunicorn
  with the repo's `gunicorn.conf.py` (HTTP), `rungrpc`, and `runcontroller exp|resources|analyzer`,
  each controller with its own Access service token and role (`FALCON_SERVICE_ROLES`), exchanged
  at an `AccessEdge` served by the test; tokens are signed by the test's offline Access team
  (`accounts.tests.cloudflare`), whose certs the processes fetch over loopback. `runlocal` is not
  used here: it gives every controller one environment, so one service token and one role.

Both run against the test database (SQLite file or MariaDB) with their own `FALCON_VAR_DIR`,
artifact root and analysis store under the test's tmp folder, on free loopback ports. Every wait
is for an event (a port answering, a log line, a status) with a deadline. `stop` ends every
process the platform started, and any task or analysis run whose environment names the
platform's var folder (the local backends start those in their own process groups), whether the
tests passed or not.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import httpx

from accounts.tests.cloudflare import AUD, TEAM, AccessEdge, CloudflareAccess, offline_access
from core.testing import wait_until as poll_until
from tests.test_e2e import free_port

ROOT = Path(__file__).resolve().parent.parent
MODES = ("cloudflare", "local")
START_TIMEOUT = 90.0  # seconds for every process to listen, on a loaded 2-CPU machine
UNSAFE_OPT_IN = "FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER"

# The controllers' service tokens (client id, secret, role) and the read-only one tests use.
CONTROLLERS = {
    "exp": ("falcon-exp.access", "exp-secret-0123456789abcdef", "exp-controller"),
    "resources": ("falcon-rm.access", "rm-secret-0123456789abcdef", "resource-manager"),
    "analyzer": ("falcon-analyzer.access", "an-secret-0123456789abcdef", "analyzer"),
}
READ_ONLY_SERVICE = "falcon-readonly.access"
# The HTTP API's token for the analyzer controller's AnalyzerService (cloudflare mode).
ANALYZER_TOKEN = "attack-suite-analyzer-token-0123456789abcdef"

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], timeout: float = 60.0,
             every: float = 0.1) -> T:
    """Return `probe()`'s first truthy value; fail naming `what` after `timeout` seconds."""
    return poll_until(probe, timeout=timeout, what=what, every=every)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def listening(port: int) -> bool:
    """Whether anything listens on TCP `port` on any address (/proc/net, IPv4 and IPv6)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return True
    return False


# Address space of each platform process (and the tasks it starts). An attack that makes the
# server build something huge (the YAML alias chain expands to 10^9 items) must fail there, as
# a MemoryError, not take the memory of the machine the suite shares.
MEMORY_CAP_BYTES = 4 << 30


def capped_memory(cmd: list[str]) -> list[str]:
    """Return `cmd` run with its address space capped at `MEMORY_CAP_BYTES` (inherited by its
    own children, so runlocal's processes and the local cluster's tasks too).

    Through a shell's `ulimit`, not a `preexec_fn`: a preexec_fn makes subprocess fork the test
    process, whose gRPC threads can abort the child before it execs.
    """
    return ["sh", "-c", f'ulimit -v {MEMORY_CAP_BYTES >> 10} && exec "$@"', "sh", *cmd]


def prepared_env(tmp: Path, env: dict[str, str]) -> dict[str, str]:
    """Run `manage.py prepare` in `env` (its var folder: secret key, tokens); return `env`."""
    done = subprocess.run(manage("prepare"), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return env


def base_env(tmp: Path, db_url: str, **extra: str) -> dict[str, str]:
    """The environment of one platform's processes: its own var folder, stores and database."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FALCON_", "PYTEST_", "DJANGO_"))}
    env.update(
        DATABASE_URL=db_url,
        FALCON_VAR_DIR=str(tmp / "var"),
        FALCON_ARTIFACT_ROOT=(tmp / "artifacts").as_uri(),
        FALCON_ANALYSIS_ROOT=(tmp / "analysis-store").as_uri(),
        FALCON_LOG_FORMAT="text",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.update(extra)
    return env


def cloudflare_env(tmp: Path, db_url: str, access: CloudflareAccess, edge: AccessEdge,
                   **extra: str) -> dict[str, str]:
    """`base_env` in the cloudflare mode: team, audience, certs on loopback, service roles."""
    roles = [f"{cid}={role}" for cid, _, role in CONTROLLERS.values()]
    return base_env(
        tmp, db_url, FALCON_AUTH_MODE="cloudflare", FALCON_CF_TEAM_DOMAIN=TEAM,
        FALCON_CF_CERTS_URL=access.certs.url, FALCON_CF_AUDIENCES=AUD,
        FALCON_SERVICE_ROLES=",".join([*roles, f"{READ_ONLY_SERVICE}=read-only"]),
        FALCON_CONTROLLER_ACCESS_URL=edge.url, FALCON_ANALYZER_TOKEN=ANALYZER_TOKEN, **extra)


def kill_runs_of(var_dir: Path) -> None:
    """Kill the processes whose environment names `var_dir` (this platform's tasks and runs)."""
    marker = f"FALCON_VAR_DIR={var_dir}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except OSError:
            continue


@dataclass
class Platform:
    """One running platform; the handles the attack tests use.

    Attributes:
        mode: `cloudflare` or `local`.
        http: the HTTP API's base URL; `grpc_addr` the gRPC API's host:port.
        tokens: a person's or service's name -> its bearer token (`alice`, `bob`, `staff`,
            and in the cloudflare mode `readonly`).
        cli_dirs: name -> FALCON_CONFIG_DIR holding that user's CLI login.
        log_paths: the files the processes write (the HTTP server's first).
        access: the cloudflare mode's offline Access team (None in the local mode).
        edge: the cloudflare mode's service-token edge (None in the local mode).
    """

    mode: str
    tmp: Path
    env: dict[str, str]
    http: str
    grpc_addr: str
    log_paths: list[Path]
    procs: list[subprocess.Popen] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    cli_dirs: dict[str, Path] = field(default_factory=dict)
    access: CloudflareAccess | None = None
    edge: AccessEdge | None = None
    _logs: list[Any] = field(default_factory=list)

    # -- talking to it ------------------------------------------------------------------------

    def request(self, method: str, path: str, *, as_: str | None = None, token: str | None = None,
                timeout: float = 30.0, **kwargs) -> httpx.Response:
        """One HTTP request to the API, as user `as_` (or with `token`, or none)."""
        headers = dict(kwargs.pop("headers", {}) or {})
        token = token if token is not None else (self.tokens[as_] if as_ else None)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        with httpx.Client(base_url=self.http, timeout=timeout, follow_redirects=False) as client:
            return client.request(method, path, headers=headers, **kwargs)

    @contextlib.contextmanager
    def channel(self) -> Iterator[grpc.Channel]:
        from core.grpc.channel import CHANNEL_OPTIONS

        channel = grpc.insecure_channel(self.grpc_addr, options=CHANNEL_OPTIONS)
        try:
            yield channel
        finally:
            channel.close()

    def md(self, who: str | None = None, token: str | None = None) -> tuple:
        return (("authorization", f"Bearer {token if token is not None else self.tokens[who]}"),)

    def cli(self, who: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run `falcon ARGS` as `who` (its own CLI login)."""
        env = dict(self.env, FALCON_CONFIG_DIR=str(self.cli_dirs[who]), FALCON_SERVER=self.http)
        return subprocess.run([sys.executable, "-m", "cli.main", *args], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)

    def log_bytes(self) -> bytes:
        return b"".join(p.read_bytes() for p in self.log_paths if p.exists())

    # -- domain shortcuts -----------------------------------------------------------------------

    def create_exp(self, who: str, name: str, command: str, *, config: str = "steps: 1\n",
                   replica: int = 1) -> dict:
        """CreateExp over HTTP as `who`; return the experiment."""
        body = {"name": name, "cluster_name": "local", "exp_type": "attack",
                "role_to_task_spec": {"main": {"command": command, "replica": replica}},
                "config": config}
        res = self.request("POST", "/api/v1/exps", as_=who, json=body)
        assert res.status_code == 201, res.text
        return res.json()

    def exp(self, exp_id: int, who: str = "alice") -> dict:
        res = self.request("GET", f"/api/v1/exps/{exp_id}", as_=who)
        assert res.status_code == 200, res.text
        return res.json()

    def wait_status(self, exp_id: int, statuses: set[str], timeout: float = 90.0) -> dict:
        return wait_for(f"experiment {exp_id} reaching {sorted(statuses)}",
                        lambda: e if (e := self.exp(exp_id))["status"] in statuses else None,
                        timeout, every=0.3)

    # -- lifecycle ----------------------------------------------------------------------------

    def spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        log_path = self.tmp / f"{name}.log"
        log = open(log_path, "ab")
        self._logs.append(log)
        self.log_paths.append(log_path)
        self.procs.append(subprocess.Popen(capped_memory(cmd), cwd=ROOT, env=env or self.env,
                                           stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def check_alive(self) -> None:
        for proc in self.procs:
            assert proc.poll() is None, (f"{proc.args[2:4]} exited {proc.returncode}:\n"
                                         + self.log_bytes().decode(errors="replace")[-6000:])

    def stop(self) -> None:
        """SIGTERM every process group, SIGKILL what is left after 15 s, then the runs."""
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        kill_runs_of(Path(self.env["FALCON_VAR_DIR"]))
        for log in self._logs:
            log.close()


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def _ready(platform: Platform) -> None:
    def up() -> bool:
        platform.check_alive()
        return answers(f"{platform.http}/readyz") and listening(int(
            platform.grpc_addr.rsplit(":", 1)[1]))

    wait_for(f"the {platform.mode} platform listening", up, START_TIMEOUT, every=0.2)


def start_local(tmp: Path, db_url: str) -> Platform:
    """`runlocal` on free loopback ports; alice and bob log in with the CLI, staff by the
    token endpoint (its row made staff before its first request)."""
    http = free_port()
    env = base_env(tmp, db_url)
    platform = Platform("local", tmp, env, f"http://127.0.0.1:{http}",
                        f"127.0.0.1:{free_port()}", [])
    platform.spawn("runlocal", manage(
        "runlocal", "--http", f"127.0.0.1:{http}", "--grpc", platform.grpc_addr,
        "--analyzer", f"127.0.0.1:{free_port()}", "--interval", "0.3"))
    try:
        wait_for("runlocal announcing it runs", lambda: (platform.check_alive(), b"Falcon is running"
                 in platform.log_bytes())[1], START_TIMEOUT, every=0.2)
        _ready(platform)
        for who in ("alice", "bob"):
            platform.cli_dirs[who] = tmp / f"cli-{who}"
            res = platform.cli(who, "auth", "login", "--email", f"{who}@example.com")
            assert res.returncode == 0, res.stdout + res.stderr
            platform.tokens[who] = _cached_token(platform, who)
        res = platform.request("POST", "/api/v1/auth/token", json={"email": "staff@example.com"})
        assert res.status_code == 201, res.text
        platform.tokens["staff"] = res.json()["token"]
        platform.cli_dirs["staff"] = tmp / "cli-staff"
        _seed_cli(platform, "staff", "staff@example.com", "local")
    except BaseException:
        platform.stop()
        raise
    return platform


def _cached_token(platform: Platform, who: str) -> str:
    from cli.token_cache import CredentialStore

    session = CredentialStore(platform.cli_dirs[who]).get(platform.http)
    assert session is not None, f"no CLI session for {who}"
    return session.token


def _seed_cli(platform: Platform, who: str, email: str, method: str) -> None:
    """Cache `who`'s token for the CLI as its login would (`cli.token_cache`)."""
    import jwt

    from cli.token_cache import CredentialStore, Session, normalize_server

    token = platform.tokens[who]
    exp = int(jwt.decode(token, options={"verify_signature": False})["exp"])
    CredentialStore(platform.cli_dirs[who]).put(Session(
        server=normalize_server(platform.http), token=token, email=email, expires_at=exp,
        method=method, obtained_at=int(time.time())))


@contextlib.contextmanager
def cloudflare_access() -> Iterator[tuple[CloudflareAccess, AccessEdge]]:
    """The offline Access team and the controllers' service-token edge."""
    with offline_access() as access:
        edge = AccessEdge(access, {cid: secret for cid, secret, _ in CONTROLLERS.values()})
        try:
            yield access, edge
        finally:
            edge.close()


def controller_cmd(kind: str, analyzer_addr: str) -> list[str]:
    extra = ["--addr", analyzer_addr] if kind == "analyzer" else []
    return manage("runcontroller", kind, *extra, "--interval", "0.3", "--no-leader-election",
                  "--no-schedule")


def controller_env(env: dict[str, str], kind: str) -> dict[str, str]:
    cid, secret, _ = CONTROLLERS[kind]
    return dict(env, FALCON_CF_CLIENT_ID=cid, FALCON_CF_CLIENT_SECRET=secret)


def start_cloudflare(tmp: Path, db_url: str, access: CloudflareAccess,
                     edge: AccessEdge) -> Platform:
    """gunicorn, rungrpc and the three controllers in the cloudflare mode (module docstring)."""
    http, grpc_port, analyzer = free_port(), free_port(), f"127.0.0.1:{free_port()}"
    env = cloudflare_env(tmp, db_url, access, edge, **{
        UNSAFE_OPT_IN: "1", "FALCON_GRPC_ADDR": f"127.0.0.1:{grpc_port}",
        "FALCON_GRPC_TARGET": f"127.0.0.1:{grpc_port}", "FALCON_ANALYZER_ADDR": analyzer,
        "FALCON_ANALYZER_TARGET": analyzer})
    platform = Platform("cloudflare", tmp, env, f"http://127.0.0.1:{http}",
                        f"127.0.0.1:{grpc_port}", [], access=access, edge=edge)
    try:
        prepared_env(tmp, env)
        platform.spawn("http", [sys.executable, "-m", "gunicorn", "falcon_site.wsgi", "-c",
                                str(ROOT / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{http}",
                                "--workers", "2", "--access-logfile", "-",
                                "--no-control-socket"])
        platform.spawn("grpc", manage("rungrpc", "--addr", platform.grpc_addr))
        _ready(platform)
        for kind in CONTROLLERS:
            platform.spawn(kind, controller_cmd(kind, analyzer), controller_env(env, kind))
        wait_for("every controller fetching its service token", lambda: (
            platform.check_alive(),
            all(edge.hits.get(cid) for cid, _, _ in CONTROLLERS.values()))[1],
            START_TIMEOUT, every=0.2)
        for who in ("alice", "bob", "staff"):
            platform.tokens[who] = access.sign(email=f"{who}@example.com", sub=f"cf-sub-{who}")
            platform.cli_dirs[who] = tmp / f"cli-{who}"
            _seed_cli(platform, who, f"{who}@example.com", "cloudflare")
        platform.tokens["readonly"] = access.sign(access.service_claims(READ_ONLY_SERVICE))
    except BaseException:
        platform.stop()
        raise
    return platform


def make_staff(email: str, user_id: str) -> None:
    """Insert the staff user before its first request (no process has cached it yet)."""
    from accounts.models import User

    User.objects.update_or_create(user_id=user_id, defaults={"email": email, "is_staff": True})


def staff_subject(mode: str) -> str:
    if mode == "cloudflare":
        return "cf-sub-staff"
    from accounts.issuer import local_subject

    return local_subject("staff@example.com")


def alias_chain_config() -> str:
    """YAML of 9 levels, each a list of ten aliases of the previous: ~400 bytes that expand to
    10^9 leaves (the "billion laughs")."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):
        prev = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{', '.join([prev] * 10)}]")
    return "\n".join(lines) + "\n"

