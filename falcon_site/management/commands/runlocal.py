"""`manage.py runlocal`: the whole platform on its embedded defaults, until Ctrl-C.

Starts, as child processes of this one: the HTTP API (`runserver`), the gRPC API (`rungrpc`),
the exp controller and the resource manager (`runcontroller exp|resources`), all on the embedded
defaults (SQLite under var/, the local cluster backend, the local artifact directory and the
local token issuer). It first creates the local state they read (`manage.py prepare`: var/, the
secret key, the internal token, the signing key), so every child reads the same secrets, and
migrates the database. Ctrl-C or SIGTERM stops them all
(SIGTERM, then SIGKILL after a grace period); if one of them dies, the others are stopped and
the command exits non-zero. Tasks already running on the local backend keep running in their
own process groups and are adopted by the next resource manager.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from falcon_site.startup import prepare_local_state

GRACE_SECONDS = 10.0


class Command(BaseCommand):
    help = "Run the HTTP API, the gRPC API and both controllers on the embedded defaults."
    # Checked in handle(), once the local state the checks look for has been created.
    requires_system_checks: list = []

    def add_arguments(self, parser):
        parser.add_argument("--http", default="127.0.0.1:8000", help="HTTP address host:port.")
        parser.add_argument("--grpc", default=settings.FALCON_GRPC_ADDR,
                            help="gRPC address host:port (default: FALCON_GRPC_ADDR).")
        parser.add_argument("--interval", type=float,
                            default=settings.FALCON_CONTROLLER_INTERVAL_SECONDS,
                            help="Seconds between two controller ticks.")

    def handle(self, *args, **options):
        prepare_local_state()
        self.check()
        call_command("migrate", interactive=False, verbosity=0)
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        env = dict(os.environ, FALCON_GRPC_ADDR=options["grpc"],
                   FALCON_GRPC_TARGET=options["grpc"], PYTHONUNBUFFERED="1")
        interval = str(options["interval"])
        commands = {
            # --insecure: serve the admin's static files with DEBUG off (local mode only).
            "http": [sys.executable, manage, "runserver", "--noreload", "--insecure",
                     options["http"]],
            "grpc": [sys.executable, manage, "rungrpc", "--addr", options["grpc"]],
            # One process of each kind and no Kubernetes API to hold a Lease: no election.
            "exp-controller": [sys.executable, manage, "runcontroller", "exp",
                               "--interval", interval, "--no-leader-election"],
            "resource-manager": [sys.executable, manage, "runcontroller", "resources",
                                 "--interval", interval, "--no-leader-election"],
        }
        stop = threading.Event()

        def on_signal(signum, frame):
            stop.set()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

        children: dict[str, subprocess.Popen] = {}
        failed = None
        try:
            for name, cmd in commands.items():
                if name == "exp-controller" and not self._wait_for_port(options["grpc"], stop):
                    failed = f"the gRPC API did not listen on {options['grpc']} in time"
                    break
                # Own process group: a Ctrl-C reaches this supervisor, which stops the children
                # in order, instead of racing them all at once.
                children[name] = subprocess.Popen(cmd, env=env, start_new_session=True)
            self.stdout.write(
                f"Falcon is running: HTTP http://{options['http']}/api/v1/exps "
                f"(docs /api/docs/, admin /admin/), gRPC {options['grpc']}. Ctrl-C stops it.")
            while not stop.is_set() and not failed:
                for name, proc in children.items():
                    if proc.poll() is not None:
                        failed = f"{name} exited with code {proc.returncode}"
                        stop.set()
                        break
                stop.wait(0.5)
        finally:
            self._stop_all(children)
        if failed:
            raise CommandError(f"{failed}; stopped the other processes")
        self.stdout.write("Falcon stopped. Tasks still running on the local cluster keep "
                          "running; the next runlocal adopts them.")

    @staticmethod
    def _wait_for_port(addr: str, stop: threading.Event, timeout: float = 60.0) -> bool:
        """Wait until `host:port` accepts TCP connections (so controllers start after gRPC)."""
        host, _, port = addr.rpartition(":")
        deadline = time.monotonic() + timeout
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), 1):
                    return True
            except OSError:
                stop.wait(0.2)
        return False

    def _stop_all(self, children: dict[str, subprocess.Popen]) -> None:
        for proc in children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for proc in children.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
