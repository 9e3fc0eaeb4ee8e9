"""Attacks on the server through users' code and through listeners beyond loopback.

User code runs as the server (the local cluster backend, the local analysis backend): a task
or an online script could read `/proc/<pid>/environ` of Falcon's other processes, `var/` and
the database, and with them become staff and abort other users' experiments. Once more than one
person can log in (`FALCON_AUTH_MODE=cloudflare`, or the local mode with
`FALCON_LOCAL_ALLOW_NONLOOPBACK=1`) every process that would run such code or accept work for it
refuses to start, unless `FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER=1` says every user acts as the
server. The attack then has nothing to run on: each test starts the real command and shows it
exits non-zero, naming the setting and the safe way, with nothing listening, created or run.
Even with the opt-in (or on one person's machine), a real task and a real online script see a
scrubbed environment: none of the server's secrets.

The local mode listens on loopback only: `runserver`, the metrics listener
(`FALCON_METRICS_ADDR`) and `runlocal --analyzer` refuse another address without the opt-in,
as `runlocal --http/--grpc`, `rungrpc`, the analyzer's `--addr` and gunicorn already do
(accounts/tests/test_attacks.py).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.testing import wait_until as poll_until
from core.processes.ports import bind_problem
from tests.test_e2e import create, database_url, falcon, free_port, get, wait_until

ROOT = Path(__file__).resolve().parent.parent
OPT_IN = "FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER"
CLOUDFLARE = {"FALCON_AUTH_MODE": "cloudflare",
              "FALCON_CF_TEAM_DOMAIN": "https://falcon-test.cloudflareaccess.com",
              "FALCON_CF_AUDIENCES": "test-audience"}
# Every name this file sets itself, removed from the inherited environment first.
OWN = ("FALCON_AUTH_MODE", "FALCON_CF_TEAM_DOMAIN", "FALCON_CF_AUDIENCES", "FALCON_CLUSTERS_FILE",
       "FALCON_LOCAL_ALLOW_NONLOOPBACK", OPT_IN, "FALCON_ANALYZER_BACKEND", "FALCON_VAR_DIR",
       "FALCON_METRICS_PORT", "FALCON_METRICS_ADDR", "FALCON_LOG_FORMAT")
# What a task or a script must never see (the values are markers, searched for in its output).
SECRETS = {
    "DJANGO_SECRET_KEY": "marker-django-secret-key-0123456789abcdef0123456789",
    "FALCON_INTERNAL_TOKEN": "marker-internal-token-0123456789abcdef0123456789",
    "FALCON_ANALYZER_TOKEN": "marker-analyzer-token-0123456789abcdef0123456789",
    "FALCON_CF_CLIENT_ID": "marker-access-client-id.access",
    "FALCON_CF_CLIENT_SECRET": "marker-access-client-secret-0123456789abcdef",
}


def run_manage(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
               program: list[str] | None = None,
               signing_key: bool = False) -> subprocess.CompletedProcess:
    """Run `manage.py ARGS` (or `program`) to its exit with a clean environment plus `env`.

    The state folder is a fresh `tmp_path/var`; secrets come from the environment, so a refused
    process has nothing of its own to read or prepare there. `signing_key`: put the local
    issuer's key there first (the system checks of a local-mode command want it).
    """
    if signing_key:
        from django.conf import settings

        (tmp_path / "var").mkdir(exist_ok=True)
        shutil.copy(settings.FALCON_LOCAL_SIGNING_KEY, tmp_path / "var" / "jwt-signing-key.pem")
    base = {k: v for k, v in os.environ.items() if k not in OWN}
    base.update({"PYTHONPATH": str(ROOT), "FALCON_VAR_DIR": str(tmp_path / "var"),
                 "DJANGO_SECRET_KEY": SECRETS["DJANGO_SECRET_KEY"],
                 "FALCON_INTERNAL_TOKEN": SECRETS["FALCON_INTERNAL_TOKEN"],
                 "FALCON_ANALYZER_TOKEN": SECRETS["FALCON_ANALYZER_TOKEN"],
                 "DATABASE_URL": f"sqlite:///{tmp_path / 'never-opened.sqlite3'}",
                 **(env or {})})
    argv = program or [sys.executable, str(ROOT / "manage.py"), *args]
    return subprocess.run(argv, cwd=ROOT, env=base, capture_output=True, text=True, timeout=120)


def assert_refused_user_code(result: subprocess.CompletedProcess, tmp_path: Path) -> None:
    """The process stopped, said why and what to do instead, and started nothing."""
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert OPT_IN in out and "OS user" in out and "secrets" in out, out
    assert "FALCON_ANALYZER_BACKEND=kubernetes" in out and "Kubernetes clusters" in out, out
    # No local cluster or analyzer state, no database: nothing ran and nothing was written.
    for made in ("var/local-cluster", "var/local-analyzer", "never-opened.sqlite3"):
        assert not (tmp_path / made).exists(), made


def kubernetes_only_clusters(tmp_path: Path) -> str:
    path = tmp_path / "clusters.yaml"
    path.write_text("clusters:\n  tpu-a:\n    backend: kubernetes\n    namespace: falcon-jobs\n"
                    "    in_cluster: true\n")
    return str(path)


def local_and_kubernetes_clusters(tmp_path: Path) -> str:
    path = tmp_path / "clusters-mixed.yaml"
    path.write_text("clusters:\n  tpu-a:\n    backend: kubernetes\n    namespace: falcon-jobs\n"
                    "    in_cluster: true\n  laptop:\n    backend: local\n")
    return str(path)


# -- item 1: user code never runs as a server that several people log in to --------------------

@pytest.mark.parametrize("args", [
    ("runcontroller", "resources", "--no-leader-election", "--once"),
    ("rungrpc", "--addr", "127.0.0.1:0"),
    ("runserver", "--noreload", "127.0.0.1:0"),
    ("runserver", "127.0.0.1:0"),  # with the autoreloader: it must exit, not wait for edits
], ids=["resource-manager", "rungrpc", "runserver", "runserver-autoreload"])
def test_cloudflare_mode_refuses_the_default_local_cluster(tmp_path, args):
    result = run_manage(tmp_path, *args, env=CLOUDFLARE)
    assert_refused_user_code(result, tmp_path)
    assert "local cluster local (the default when FALCON_CLUSTERS_FILE is unset)" in result.stderr


def test_cloudflare_mode_refuses_a_local_cluster_in_the_clusters_file(tmp_path):
    result = run_manage(tmp_path, "rungrpc", "--addr", "127.0.0.1:0",
                        env={**CLOUDFLARE,
                             "FALCON_CLUSTERS_FILE": local_and_kubernetes_clusters(tmp_path)})
    assert_refused_user_code(result, tmp_path)
    assert "local cluster laptop" in result.stderr


def test_cloudflare_mode_refuses_the_local_analyzer_backend(tmp_path):
    result = run_manage(tmp_path, "runcontroller", "analyzer", "--no-leader-election", "--once",
                        "--addr", "127.0.0.1:0",
                        env={**CLOUDFLARE, "FALCON_ANALYZER_BACKEND": "local",
                             "FALCON_CLUSTERS_FILE": kubernetes_only_clusters(tmp_path)})
    assert_refused_user_code(result, tmp_path)
    assert "FALCON_ANALYZER_BACKEND=local would run" in result.stderr


def test_gunicorn_refuses_to_serve_a_local_cluster_in_cloudflare_mode(tmp_path):
    gunicorn = Path(sys.executable).parent / "gunicorn"
    result = run_manage(tmp_path, env=CLOUDFLARE, program=[
        str(gunicorn), "falcon_site.wsgi", "--bind", f"127.0.0.1:{free_port()}", "--workers", "1"])
    assert_refused_user_code(result, tmp_path)


@pytest.mark.parametrize("args", [
    ("runlocal", "--http", "0.0.0.0:{http}", "--grpc", "0.0.0.0:{grpc}",
     "--analyzer", "0.0.0.0:{analyzer}"),
    ("runcontroller", "resources", "--no-leader-election", "--once"),
], ids=["runlocal", "resource-manager"])
def test_local_mode_beyond_loopback_refuses_to_run_user_code(tmp_path, args):
    ports = {"http": free_port(), "grpc": free_port(), "analyzer": free_port()}
    result = run_manage(tmp_path, *(a.format(**ports) for a in args),
                        env={"FALCON_AUTH_MODE": "local", "FALCON_LOCAL_ALLOW_NONLOOPBACK": "1"},
                        signing_key=True)
    assert_refused_user_code(result, tmp_path)
    assert "FALCON_LOCAL_ALLOW_NONLOOPBACK=1" in result.stderr
    # Refused before preparing anything (no new state file) and with nobody listening.
    assert sorted(p.name for p in (tmp_path / "var").iterdir()) == ["jwt-signing-key.pem"]
    assert all(bind_problem(f"127.0.0.1:{port}") is None for port in ports.values())


@pytest.mark.parametrize("value", ["yes", "true", "2", "on"])
def test_a_bad_value_of_the_opt_in_is_refused_naming_it(tmp_path, value):
    result = run_manage(tmp_path, "rungrpc", "--addr", "127.0.0.1:0", env={OPT_IN: value})
    assert result.returncode != 0
    assert f"{OPT_IN}={value!r} is not 0, 1 or empty" in result.stderr
    assert "FALCON_ANALYZER_BACKEND=kubernetes" in result.stderr


def start_until(tmp_path: Path, args: list[str], env: dict[str, str], line: str,
                timeout: float = 60.0) -> str:
    """Start `manage.py ARGS`, wait until its output shows `line`, stop it; return the output."""
    base = {k: v for k, v in os.environ.items() if k not in OWN}
    base.update({"PYTHONPATH": str(ROOT), "FALCON_VAR_DIR": str(tmp_path / "var"),
                 "DJANGO_SECRET_KEY": SECRETS["DJANGO_SECRET_KEY"],
                 "FALCON_INTERNAL_TOKEN": SECRETS["FALCON_INTERNAL_TOKEN"],
                 "PYTHONUNBUFFERED": "1", **env})
    log_path = tmp_path / "out.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT,
                                env=base, stdout=log, stderr=subprocess.STDOUT)
    try:
        def written() -> bool:
            assert proc.poll() is None, log_path.read_text(errors="replace")
            return line in log_path.read_text(errors="replace")

        poll_until(written, timeout=max(timeout, 60.0), every=0.05,
                   what=f"{line!r} in the log of {args}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return log_path.read_text(errors="replace")


def test_the_opt_in_starts_with_a_warning_saying_what_it_means(tmp_path):
    out = start_until(tmp_path, ["rungrpc", "--addr", "127.0.0.1:0"],
                      {**CLOUDFLARE, OPT_IN: "1"}, "gRPC API listening")
    assert f"WARNING: {OPT_IN}=1" in out and "run every user's code as this server's OS user" \
        in out


def test_cloudflare_mode_with_kubernetes_clusters_only_starts(tmp_path):
    out = start_until(tmp_path, ["rungrpc", "--addr", "127.0.0.1:0"],
                      {**CLOUDFLARE, "FALCON_CLUSTERS_FILE": kubernetes_only_clusters(tmp_path)},
                      "gRPC API listening")
    assert OPT_IN not in out


# -- item 1, the defence kept with the opt-in: a scrubbed environment ------------------------

@pytest.fixture
def platform_with_secrets(tmp_path):
    """`runlocal` on loopback (one person's machine) whose environment holds every secret."""
    http = free_port()
    env = {k: v for k, v in os.environ.items() if k not in OWN}
    env.update(
        SECRETS,
        DATABASE_URL=database_url(),
        FALCON_VAR_DIR=str(tmp_path / "var"),
        FALCON_ARTIFACT_ROOT=(tmp_path / "artifacts").as_uri(),
        FALCON_CONFIG_DIR=str(tmp_path / "cli"),
        FALCON_SERVER=f"http://127.0.0.1:{http}",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONPATH=str(ROOT),
    )
    log_path = tmp_path / "runlocal.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runlocal", "--http", f"127.0.0.1:{http}",
             "--grpc", f"127.0.0.1:{free_port()}", "--analyzer", f"127.0.0.1:{free_port()}",
             "--interval", "0.3"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    import urllib.request

    def ready() -> bool:
        assert proc.poll() is None, log_path.read_text()
        try:
            with urllib.request.urlopen(f"{env['FALCON_SERVER']}/readyz", timeout=2):
                return True
        except OSError:
            return False

    poll_until(ready, timeout=120, what="the platform to start", every=0.1)
    env["_tmp"] = str(tmp_path)
    try:
        login = falcon(env, "auth", "login", "--email", "alice@example.com")
        assert login.returncode == 0, login.stderr
        yield env
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


DUMP = 'env > "$FALCON_ARTIFACT_PATH/env-$FALCON_REPLICA_INDEX"'


def assert_no_secret(text: str, where: str) -> None:
    for name, value in SECRETS.items():
        assert value not in text and f"{name}=" not in text, f"{name} reached {where}"
    assert "DATABASE_URL" not in text and database_url() not in text, f"the database in {where}"


@pytest.mark.django_db(transaction=True)
def test_a_task_and_an_analysis_script_see_none_of_the_servers_secrets(platform_with_secrets):
    env = platform_with_secrets
    exp = create(env, "dump-env", {"main": {"command": DUMP, "replica": 1}})
    wait_until(lambda: get(env, exp["id"])["status"] in ("Succeeded", "Failed"), timeout=90)
    done = get(env, exp["id"])
    assert done["status"] == "Succeeded", done
    dumps = list((Path(env["_tmp"]) / "artifacts").rglob("env-0"))
    assert len(dumps) == 1
    task_env = dumps[0].read_text()
    assert "FALCON_JOB_ID=" in task_env  # the dump is the task's environment
    assert_no_secret(task_env, "a task")

    script = Path(env["_tmp"]) / "dump.sh"
    script.write_text("env\n")
    res = falcon(env, "analysis", "create", "--exp", str(exp["id"]), "--command",
                 'sh "$FALCON_SCRIPT"', "--script", str(script), "--wait", "--timeout", "90",
                 "-o", "json")
    assert res.returncode == 0, res.stdout + res.stderr
    analysis = json.loads(res.stdout)
    logs = falcon(env, "analysis", "logs", str(analysis["id"]))
    assert logs.returncode == 0, logs.stderr
    assert "FALCON_ANALYSIS_ID=" in logs.stdout  # the log is the script's environment
    assert_no_secret(logs.stdout, "an analysis script")


# -- item 11: every listener of the local mode stays on loopback ------------------------------

@pytest.mark.parametrize("addr", ["0.0.0.0:{port}", "0:{port}", "[::]:{port}"])
def test_runserver_refuses_a_non_loopback_address_in_local_mode(tmp_path, addr):
    port = free_port()
    argv = ["runserver", addr.format(port=port)] + (["-6"] if addr.startswith("[") else [])
    result = run_manage(tmp_path, *argv, env={"FALCON_AUTH_MODE": "local"})
    assert result.returncode != 0, result.stdout + result.stderr
    assert "refusing to listen on" in result.stderr
    assert "FALCON_LOCAL_ALLOW_NONLOOPBACK" in result.stderr
    assert "token for any email" in result.stderr
    assert bind_problem(f"0.0.0.0:{port}") is None  # nothing listens there


@pytest.mark.parametrize("args", [
    ("rungrpc", "--addr", "127.0.0.1:0"),
    ("runcontroller", "exp", "--no-leader-election", "--once"),
], ids=["rungrpc", "exp-controller"])
def test_metrics_refuse_a_non_loopback_address_in_local_mode(tmp_path, args):
    port = free_port()
    result = run_manage(tmp_path, *args, env={
        "FALCON_AUTH_MODE": "local", "FALCON_METRICS_PORT": str(port),
        "FALCON_METRICS_ADDR": "0.0.0.0"}, signing_key=True)
    assert result.returncode != 0, result.stdout + result.stderr
    assert f"FALCON_METRICS_ADDR=0.0.0.0: refusing to listen on 0.0.0.0:{port}" in result.stderr
    assert "FALCON_LOCAL_ALLOW_NONLOOPBACK" in result.stderr
    assert bind_problem(f"0.0.0.0:{port}") is None


def test_runlocal_refuses_a_non_loopback_analyzer_address(tmp_path):
    result = run_manage(tmp_path, "runlocal", "--http", f"127.0.0.1:{free_port()}",
                        "--grpc", f"127.0.0.1:{free_port()}",
                        "--analyzer", f"0.0.0.0:{free_port()}",
                        env={"FALCON_AUTH_MODE": "local"})
    assert result.returncode != 0
    assert "--analyzer: refusing to listen on 0.0.0.0" in result.stderr
    assert not (tmp_path / "var").exists()  # refused before anything was prepared
