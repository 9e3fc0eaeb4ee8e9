"""`manage.py runlocal` as a process: it refuses taken ports, says it runs only once both APIs
listen, and its six children never outlive it, whatever signal ends it.

Each test starts the real command on free loopback ports against the test database, as
tests/test_e2e.py does, and reads the children from /proc.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from core.testing import wait_until as poll_until
from core.processes.ports import bind_problem
from tests.test_e2e import alive, database_url, free_port

ROOT = Path(__file__).resolve().parent.parent
RUNNING = "Falcon is running"

pytestmark = pytest.mark.django_db(transaction=True)


def children_of(pid: int) -> list[int]:
    """The pids whose parent is `pid` (from /proc/<pid>/stat)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def wait_for(predicate, timeout: float, what: str) -> None:
    poll_until(predicate, timeout=max(timeout, 60.0), what=what)


class Runlocal:
    """One `runlocal` on free ports; `stop()` kills whatever is left (by pid)."""

    def __init__(self, tmp_path: Path, http: int | None = None, grpc: int | None = None):
        self.http, self.grpc = http or free_port(), grpc or free_port()
        self.log_path = tmp_path / "runlocal.log"
        env = dict(os.environ, DATABASE_URL=database_url(),
                   FALCON_VAR_DIR=str(tmp_path / "var"),
                   FALCON_ARTIFACT_ROOT=(tmp_path / "artifacts").as_uri())
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runlocal",
             "--http", f"127.0.0.1:{self.http}", "--grpc", f"127.0.0.1:{self.grpc}",
             "--analyzer", f"127.0.0.1:{free_port()}", "--interval", "0.3"],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.children: list[int] = []

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_running(self, timeout: float = 60.0) -> list[int]:
        """Wait for the announcement; return the six children's pids."""
        def running() -> bool:
            assert self.proc.poll() is None, self.log()
            return RUNNING in self.log()

        wait_for(running, timeout, "runlocal did not announce it runs")
        self.children = children_of(self.proc.pid)
        return self.children

    def stop(self) -> None:
        for pid in [self.proc.pid, *self.children]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(10)
        self._log.close()


@pytest.fixture
def runlocal(tmp_path):
    started: list[Runlocal] = []

    def start(**kwargs) -> Runlocal:
        started.append(Runlocal(tmp_path, **kwargs))
        return started[-1]

    yield start
    for instance in started:
        instance.stop()


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("taken", ["http", "grpc"])
def test_a_taken_port_stops_runlocal_before_it_starts_anything(runlocal, taken):
    with socket.socket() as holder:  # another process's server on that port
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        instance = runlocal(**{taken: port})
        assert instance.proc.wait(30) != 0
        log = instance.log()
        label = {"http": "HTTP", "grpc": "gRPC"}[taken]
        assert f"the {label} port {port} (127.0.0.1:{port})" in log
        assert "already in use" in log and f"--{taken} HOST:PORT" in log
        assert RUNNING not in log and not (Path(instance.log_path.parent) / "var").exists()


def test_announces_only_once_both_apis_listen(runlocal):
    instance = runlocal()
    children = instance.wait_running()
    assert len(children) == 6, instance.log()
    assert accepts(instance.http) and accepts(instance.grpc)
    instance.proc.send_signal(signal.SIGTERM)
    assert instance.proc.wait(15) == 0, instance.log()
    assert [pid for pid in children if alive(pid)] == []


def test_sighup_stops_every_child(runlocal):
    instance = runlocal()
    children = instance.wait_running()
    assert len(children) == 6, instance.log()
    instance.proc.send_signal(signal.SIGHUP)  # the terminal was closed
    assert instance.proc.wait(15) == 0, instance.log()
    assert [pid for pid in children if alive(pid)] == []
    assert bind_problem(f"127.0.0.1:{instance.http}") is None
    assert bind_problem(f"127.0.0.1:{instance.grpc}") is None


def test_sigkill_of_runlocal_takes_its_children_down(runlocal):
    instance = runlocal()
    children = instance.wait_running()
    assert len(children) == 6, instance.log()
    instance.proc.kill()  # no chance to stop anything itself
    instance.proc.wait(10)
    wait_for(lambda: not any(alive(pid) for pid in children), 15,
             "the children of a killed runlocal did not exit")
    wait_for(lambda: bind_problem(f"127.0.0.1:{instance.grpc}") is None, 5,
             "the gRPC port was not released")
    assert bind_problem(f"127.0.0.1:{instance.http}") is None


def test_a_dead_controller_is_restarted_and_the_apis_keep_serving(runlocal):
    """Like a Deployment's restart policy: a controller that exits is started again (after a
    short back-off) while the APIs go on; runlocal itself keeps running."""
    instance = runlocal()
    instance.wait_running()

    def analyzer_pids() -> list[int]:
        pids = []
        for pid in children_of(instance.proc.pid):
            try:
                if b"analyzer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    pids.append(pid)
            except OSError:  # exited since it was listed
                pass
        return pids

    (first,) = analyzer_pids()
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: (pids := analyzer_pids()) and pids[0] != first and alive(pids[0]), 20,
             "the analyzer controller was not restarted")
    assert instance.proc.poll() is None, instance.log()
    assert accepts(instance.http) and accepts(instance.grpc)
    assert "analyzer ended (terminated by SIGKILL); restarting it" in instance.log()
