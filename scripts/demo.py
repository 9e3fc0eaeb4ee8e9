"""`make demo`: the whole platform on its embedded defaults, one example experiment to the end.

Starts `manage.py runlocal` (HTTP API, gRPC API, exp controller, resource manager, analyzer
controller on SQLite, the local cluster backend, the local artifact directory and the local token
issuer), then acts as a new user would with the `falcon` CLI: logs in, creates the example
experiment from `examples/local/`, waits for it, prints it with its jobs and artifact, lists the
artifact's files, waits for the offline analysis the analyzer starts by itself for a Succeeded
benchmark (the `bench-summary` plugin), prints its results table, and stops the platform. Exits 0
only when the experiment and its analysis succeeded.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from core.domain.statuses import ANALYSIS_TERMINAL, AnalysisStatus, AnalysisType, ExpStatus

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
FALCON = [str(VENV_BIN / "falcon")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"demo: the platform exited with code {proc.returncode} while starting")
        try:
            with urllib.request.urlopen(url, timeout=2) as res:
                if res.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"demo: {url} did not answer within {timeout:.0f} s")


def falcon(*args: str, env: dict, capture: bool = False) -> subprocess.CompletedProcess:
    print(f"\n$ falcon {' '.join(args)}", flush=True)
    return subprocess.run(FALCON + list(args), env=env, cwd=ROOT, text=True,
                          capture_output=capture)


def show_offline_analysis(exp_id: int, env: dict, timeout: float = 120.0) -> bool:
    """Wait for the offline analysis of experiment `exp_id` to end; print it and its results.

    Returns True when an offline analysis of the experiment succeeded within `timeout` seconds.
    """
    print(f"\ndemo: waiting for the analyzer to analyse experiment {exp_id} offline", flush=True)
    deadline = time.monotonic() + timeout
    record = None
    while time.monotonic() < deadline:
        listed = falcon("analysis", "list", "--exp", str(exp_id), "--type",
                        AnalysisType.OFFLINE, "-o", "json", env=env, capture=True)
        rows = json.loads(listed.stdout or "[]") if listed.returncode == 0 else []
        done = [r for r in rows if r["status"] in ANALYSIS_TERMINAL]
        if done:
            record = done[0]
            break
        time.sleep(1)
    if record is None:
        print(f"demo: no offline analysis of experiment {exp_id} ended within {timeout:.0f} s")
        return False
    if falcon("analysis", "get", record["id"], env=env).returncode:
        return False
    if record["status"] != AnalysisStatus.SUCCEEDED:
        falcon("analysis", "logs", record["id"], env=env)
        print(f"demo: analysis {record['id']} ended {record['status']}")
        return False
    if falcon("analysis", "results", record["id"], env=env).returncode:
        return False
    print(f"\ndemo: analysis {record['id']} ({record['plugin_name']}) succeeded; its files are "
          f"under {record['result_path']}")
    return True


def main() -> int:
    http, grpc_port, analyzer_port = free_port(), free_port(), free_port()
    server = f"http://127.0.0.1:{http}"
    log_dir = ROOT / "var" / "demo"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FALCON_SERVER=server, FALCON_CONFIG_DIR=str(log_dir / "cli"),
               FALCON_ANALYSIS_POLL_SECONDS="1",
               FALCON_ANALYZER_ADDR=f"127.0.0.1:{analyzer_port}",
               FALCON_ANALYZER_TARGET=f"127.0.0.1:{analyzer_port}",
               PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    log_path = log_dir / "runlocal.log"
    print(f"demo: starting the platform (HTTP {server}, gRPC 127.0.0.1:{grpc_port}); "
          f"its log: {log_path}", flush=True)
    with open(log_path, "w") as log:
        platform = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runlocal", "--http", f"127.0.0.1:{http}",
             "--grpc", f"127.0.0.1:{grpc_port}", "--interval", "0.5"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(f"{server}/readyz", platform)
        if falcon("auth", "login", "--email", "demo@falcon.local", env=env).returncode:
            return 1
        name = time.strftime("matmul-demo-%Y%m%d-%H%M%S")
        created = falcon("exp", "create", "--name", name, "--cluster", "local", "--type",
                         "benchmark", "--role-to-task-spec", "examples/local/tasks.yaml",
                         "--config", "examples/local/config.yaml", "-o", "json", env=env,
                         capture=True)
        if created.returncode:
            print(created.stdout, created.stderr, sep="\n")
            return created.returncode
        exp = json.loads(created.stdout)
        print(f"created experiment {exp['id']} ({exp['name']})")
        waited = falcon("exp", "wait", str(exp["id"]), env=env)
        falcon("exp", "get", str(exp["id"]), env=env)
        final = json.loads(falcon("exp", "get", str(exp["id"]), "-o", "json", env=env,
                                  capture=True).stdout)
        path = urlparse(final["artifact"]["path"])
        if path.scheme == "file" and Path(path.path).is_dir():
            print(f"\nartifact files under {final['artifact']['path']}:")
            for item in sorted(Path(path.path).rglob("*")):
                if item.is_file():
                    print(f"  {item.relative_to(path.path)}  {item.stat().st_size} bytes")
        succeeded = final["status"] == ExpStatus.SUCCEEDED
        print(f"\ndemo: experiment {exp['id']} ended {final['status']}"
              + ("" if succeeded else f" ({final['reason']}: {final['message']})"))
        if waited.returncode or not succeeded:
            return 1
        return 0 if show_offline_analysis(exp["id"], env) else 1
    finally:
        print("demo: stopping the platform", flush=True)
        try:
            os.killpg(platform.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            platform.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(platform.pid, signal.SIGKILL)
            platform.wait()


if __name__ == "__main__":
    sys.exit(main())
