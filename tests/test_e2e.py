"""End to end: the real processes (HTTP, gRPC, both controllers, local backend) driven by the CLI.

`manage.py runlocal` runs against this test's database (SQLite file or MariaDB), exactly as a
user runs it; the test acts through the `falcon` command only, then checks the processes of the
local cluster directly.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
import yaml
from django.db import connection

from core.testing import wait_until as poll_until

ROOT = Path(__file__).resolve().parent.parent



def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"mysql://{db['USER']}{password}@{db['HOST']}:{db['PORT'] or 3306}/{db['NAME']}"


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie awaiting its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.django_db
def test_the_session_sets_the_test_database_up():
    """pytest-django creates the test databases only for the aliases its session's marked tests
    name (`_get_databases_for_setup`); the platform tests are unmarked on purpose (a marked test
    holds a transaction, or flushes, under the platform's feet), so this one asks for them."""


def platform_database_url(django_db_blocker) -> str:
    """The test database's URL; refuses to hand out any other (a developer's data)."""
    with django_db_blocker.unblock():
        assert connection.settings_dict["NAME"] == connection.creation._get_test_db_name(), \
            "the test database was not set up: run this module with its marked test"
        return database_url()


@contextlib.contextmanager
def running_platform(tmp_path: Path, db_url: str):
    """`manage.py runlocal` on free loopback ports against `db_url`, with its var folder and
    artifact root under `tmp_path`, and the CLI logged in: yields the CLI's environment."""
    http = free_port()
    env = dict(
        os.environ,
        DATABASE_URL=db_url,
        FALCON_VAR_DIR=str(tmp_path / "var"),
        FALCON_ARTIFACT_ROOT=(tmp_path / "artifacts").as_uri(),
        FALCON_CONFIG_DIR=str(tmp_path / "cli"),
        FALCON_SERVER=f"http://127.0.0.1:{http}",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    log = open(tmp_path / "runlocal.log", "w")
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runlocal", "--http", f"127.0.0.1:{http}",
         "--grpc", f"127.0.0.1:{free_port()}", "--analyzer", f"127.0.0.1:{free_port()}",
         "--interval", "0.3"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def ready() -> bool:
        assert proc.poll() is None, (tmp_path / "runlocal.log").read_text()
        try:
            with urllib.request.urlopen(f"{env['FALCON_SERVER']}/readyz", timeout=2):
                return True
        except OSError:
            return False

    env["_tmp"] = str(tmp_path)
    try:
        poll_until(ready, timeout=120, what="the platform to start", every=0.1)
        assert falcon(env, "auth", "login", "--email", "e2e@example.com").returncode == 0
        yield env
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def platform(django_db_setup, django_db_blocker, tmp_path_factory):
    """One platform for the module's tests (each names its own experiments, and waits for
    them by id); its rows are flushed when the module is done with it."""
    from django.core.management import call_command

    try:
        with running_platform(tmp_path_factory.mktemp("e2e"),
                              platform_database_url(django_db_blocker)) as env:
            yield env
    finally:
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)


def falcon(env, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def create(env, name, roles: dict, config="steps: 3\n") -> dict:
    tmp = Path(env["_tmp"])
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(roles))
    (tmp / f"{name}.cfg").write_text(config)
    res = falcon(env, "exp", "create", "--name", name, "--cluster", "local", "--type",
                 "benchmark", "--role-to-task-spec", str(tmp / f"{name}.yaml"), "--config",
                 str(tmp / f"{name}.cfg"), "-o", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def get(env, exp_id) -> dict:
    res = falcon(env, "exp", "get", str(exp_id), "-o", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def wait_until(fn, timeout=120.0):
    return poll_until(fn, timeout=timeout, every=0.05)


WRITE = 'printf "%s" "$CUSTOM_CONFIG_KEY" > "$FALCON_ARTIFACT_PATH/config-$FALCON_REPLICA_INDEX"'


def test_experiment_succeeds_with_its_artifacts(platform):
    config = "model: qwen/qwen3-32b\n# kept verbatim ✓\n"
    exp = create(platform, "ok", {"main": {"command": WRITE, "replica": 2}}, config=config)
    res = falcon(platform, "exp", "wait", str(exp["id"]), "--interval", "0.3")
    assert res.returncode == 0, res.stdout + res.stderr
    final = get(platform, exp["id"])
    assert final["status"] == "Succeeded" and final["artifact"]["status"] == "Succeeded"
    assert [j["status"] for j in final["jobs"]] == ["Succeeded"]
    job_dir = Path(final["jobs"][0]["artifact_path"].removeprefix("file://"))
    assert (job_dir / "config-0").read_text() == config
    assert (job_dir / "config-1").read_text() == config


def test_failing_task_fails_the_experiment_with_a_reason(platform):
    exp = create(platform, "bad", {"main": {"command": "echo 'boom: bad input' >&2; exit 1"}})
    res = falcon(platform, "exp", "wait", str(exp["id"]), "--interval", "0.3")
    assert res.returncode == 6, res.stdout + res.stderr
    final = get(platform, exp["id"])
    assert final["status"] == "Failed" and final["artifact"]["status"] == "Failed"
    assert "boom: bad input" in final["message"] and "1" in final["message"]
    assert final["reason"]


def test_abort_while_running_stops_the_processes(platform):
    command = 'echo $$ > "$FALCON_ARTIFACT_PATH/pid"; sleep 600'
    exp = create(platform, "long", {"main": {"command": command}})
    wait_until(lambda: get(platform, exp["id"])["status"] == "Running")
    job_dir = Path(get(platform, exp["id"])["jobs"][0]["artifact_path"].removeprefix("file://"))
    pid = int(wait_until(lambda: (job_dir / "pid").exists() and (job_dir / "pid").read_text()))
    assert alive(pid)
    res = falcon(platform, "exp", "abort", str(exp["id"]))
    assert res.returncode == 0, res.stderr
    res = falcon(platform, "exp", "wait", str(exp["id"]), "--interval", "0.3")
    assert res.returncode == 6
    final = get(platform, exp["id"])
    assert final["status"] == "Aborted" and final["aborted_at"]
    assert final["jobs"][0]["status"] == "Aborted"
    assert not alive(pid)


def test_two_roles_one_fails_aborts_the_other(platform):
    exp = create(platform, "multi", {
        "ok": {"command": 'echo $$ > "$FALCON_ARTIFACT_PATH/pid"; sleep 600'},
        "bad": {"command": textwrap.dedent("""\
            while [ ! -e "$FALCON_ARTIFACT_PATH/../ok/pid" ]; do sleep 0.1; done
            echo 'role bad gave up' >&2; exit 2""")},
    })
    res = falcon(platform, "exp", "wait", str(exp["id"]), "--interval", "0.3")
    assert res.returncode == 6
    final = get(platform, exp["id"])
    assert final["status"] == "Failed" and "role bad failed" in final["message"]
    ok_dir = Path(next(j for j in final["jobs"] if j["role"] == "ok")["artifact_path"]
                  .removeprefix("file://"))
    pid = int((ok_dir / "pid").read_text())
    wait_until(lambda: {j["role"]: j["status"] for j in get(platform, exp["id"])["jobs"]}
               == {"ok": "Aborted", "bad": "Failed"})
    assert not alive(pid)
