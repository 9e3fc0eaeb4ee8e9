"""`make demo`: the whole platform on its embedded defaults, one example experiment to the end.

Starts `manage.py runlocal` (HTTP API, gRPC API, exp controller, resource manager on SQLite, the
local cluster backend, the local artifact directory and the local token issuer), then acts as a
new user would with the `falcon` CLI: logs in, creates the example experiment from
`examples/local/`, waits for it, prints it with its jobs and artifact, lists the artifact's files,
and stops the platform. Exits 0 only when the experiment Succeeded.
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

from core.statuses import ExpStatus

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


def main() -> int:
    http, grpc_port = free_port(), free_port()
    server = f"http://127.0.0.1:{http}"
    log_dir = ROOT / "var" / "demo"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FALCON_SERVER=server, FALCON_CONFIG_DIR=str(log_dir / "cli"),
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
        return 0 if waited.returncode == 0 and succeeded else 1
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
