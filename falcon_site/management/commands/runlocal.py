"""`manage.py runlocal`: the whole platform on its embedded defaults, until Ctrl-C.

Starts, as child processes of this one: the HTTP API (`runserver`), the gRPC API (`rungrpc`),
the exp controller, the resource manager and the analyzer controller (`runcontroller
exp|resources|analyzer`, the latter serving AnalyzerService on FALCON_ANALYZER_ADDR) and the
retention runner (`runretention`), all on the embedded
defaults (SQLite under var/, the local cluster backend, the local artifact directory and the
local token issuer).

1. It first checks that both addresses (`--http`, `--grpc`) can be listened on, and stops with
   an error naming the taken port otherwise: a second runlocal must not start beside the first.
2. It creates the local state the children read (`manage.py prepare`: var/, the secret key, the
   internal token, the signing key), so every child reads the same secrets, and migrates.
3. It starts the HTTP and gRPC APIs, waits until each of these two children listens on its
   port, then starts the controllers, and only then says "Falcon is running".

The children die with it, whatever ends it: SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal
closed) stop them all (SIGTERM, then SIGKILL after a grace period); if it is killed outright
(SIGKILL), Linux sends each child SIGTERM itself (the parent-death signal, `prctl
PR_SET_PDEATHSIG`, set in every child before it runs). A controller that dies is started again
after a capped exponential back-off (1 s, 2 s, ... 30 s), as a Deployment's restart policy
would: controllers are level-triggered and recover from the records and the runs they find. If
the HTTP or gRPC API dies, the others are stopped and the command exits non-zero. Tasks and
analyses already running on the local backends keep running in their own process groups and are
adopted by the next resource manager or analyzer controller.

With `FALCON_LOG_FORMAT=json` every child writes JSON lines (runserver's access lines too:
`falcon_site/management/commands/runserver.py`), and so does this command (`core.observability.commands`).
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from core.observability.commands import LoggedOutputMixin
from core.observability.logs import log_format
from core.processes.ports import bind_problem, local_bind_problem, split_addr
from core.processes.proctree import describe_exit
from falcon_site.startup import prepare_local_state

GRACE_SECONDS = 10.0
# How long the HTTP and gRPC children may take to listen (Django start-up and system checks).
LISTEN_TIMEOUT_SECONDS = 60.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """Return a `preexec_fn` that makes the child receive `sig` when this process dies.

    Uses Linux's parent-death signal (`prctl(PR_SET_PDEATHSIG)`), which the kernel delivers even
    when the parent is killed with SIGKILL and has no chance to stop its children. It survives
    the child's `exec`. If the parent died between `fork` and the `prctl` call, the child sends
    itself `sig` at once. Returns None where `prctl` does not exist (not Linux).

    The parent-death signal follows the *thread* that forked the child: call `Popen` from the
    thread that lives as long as the process (the main thread here).
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec


def _listening_inodes(port: int) -> set[str]:
    """Return the socket inodes listening on TCP `port` (IPv4 and IPv6), from /proc/net."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN; the inode is the 10th field.
            if len(fields) > 9 and fields[3] == "0A" and \
                    int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def listens(pid: int, port: int, host: str = "127.0.0.1") -> bool:
    """Whether process `pid` holds a socket listening on TCP `port` (Linux /proc).

    Without /proc (not Linux) it says whether `host:port` accepts connections at all.
    """
    if not os.path.exists("/proc/net/tcp"):
        try:
            with socket.create_connection((host if host != "0.0.0.0" else "127.0.0.1", port),
                                          1):
                return True
        except OSError:
            return False
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


# A dead controller is started again after 1, 2, 4, ... seconds, at most 30 (the kubelet's
# CrashLoopBackOff, shorter); the HTTP and gRPC servers stop everything when they die.
RESTART_BACKOFF_SECONDS = 1.0
RESTART_BACKOFF_MAX_SECONDS = 30.0


class Command(LoggedOutputMixin, BaseCommand):
    help = "Run the HTTP API, the gRPC API and the controllers on the embedded defaults."
    # Checked in handle(), once the local state the checks look for has been created.
    requires_system_checks: list = []

    def add_arguments(self, parser):
        parser.add_argument("--http", default="127.0.0.1:8000", help="HTTP address host:port.")
        parser.add_argument("--grpc", default=settings.FALCON_GRPC_ADDR,
                            help="gRPC address host:port (default: FALCON_GRPC_ADDR).")
        parser.add_argument("--analyzer", default=settings.FALCON_ANALYZER_ADDR,
                            help="AnalyzerService address host:port of the analyzer controller "
                            "(default: FALCON_ANALYZER_ADDR).")
        parser.add_argument("--interval", type=float, default=None,
                            help="Seconds between two controller ticks, ignoring the loops' "
                                 "schedules (tests, benchmarks); default: the schedules edited "
                                 "in the admin, else FALCON_CONTROLLER_INTERVAL_SECONDS.")

    def handle(self, *args, **options):
        http, grpc = options["http"], options["grpc"]
        from django.core.exceptions import ImproperlyConfigured

        from core.processes.user_code import require_isolated_user_code

        # Its children would refuse one by one; refusing here starts nothing at all.
        try:
            require_isolated_user_code(tasks=True, analyses=True, warn=self.stderr.write)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        self._check_addresses(http, grpc, options["analyzer"])
        prepare_local_state()
        self.check()
        call_command("migrate", interactive=False, verbosity=0)
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        analyzer = options["analyzer"]
        problem = bind_problem(analyzer)
        if problem:
            raise CommandError(f"cannot start: the analyzer address {analyzer} cannot be listened "
                               f"on: {problem}. Is another runlocal running? Stop it, or choose "
                               "another address with --analyzer HOST:PORT. Nothing was started.")
        env = dict(os.environ, FALCON_GRPC_ADDR=grpc, FALCON_GRPC_TARGET=grpc,
                   FALCON_ANALYZER_ADDR=analyzer, FALCON_ANALYZER_TARGET=analyzer,
                   PYTHONUNBUFFERED="1")
        # An explicit --interval pins every loop's interval (the schedules are not followed).
        pinned = [] if options["interval"] is None else ["--no-schedule"]
        interval = str(options["interval"] or settings.FALCON_CONTROLLER_INTERVAL_SECONDS)
        servers = {
            # --insecure: serve the admin's static files with DEBUG off (local mode only).
            "http": [sys.executable, manage, "runserver", "--noreload", "--insecure", http],
            "grpc": [sys.executable, manage, "rungrpc", "--addr", grpc],
        }
        controllers = {
            # One process of each kind and no Kubernetes API to hold a Lease: no election.
            "exp-controller": [sys.executable, manage, "runcontroller", "exp",
                               "--interval", interval, "--no-leader-election", *pinned],
            "resource-manager": [sys.executable, manage, "runcontroller", "resources",
                                 "--interval", interval, "--no-leader-election", *pinned],
            # AnalyzerService on FALCON_ANALYZER_ADDR; runs adopted again after a restart.
            "analyzer": [sys.executable, manage, "runcontroller", "analyzer", "--addr", analyzer,
                         "--interval", interval, "--no-leader-election", *pinned],
            # prune_artifacts on the `retention` schedule, by the policy in its arguments
            # (none by default: nothing is pruned until an operator sets one).
            "retention": [sys.executable, manage, "runretention"],
        }
        stop = threading.Event()

        def on_signal(signum, frame):
            stop.set()

        for sig in STOP_SIGNALS:
            signal.signal(sig, on_signal)

        children: dict[str, subprocess.Popen] = {}
        preexec = die_with_parent()
        failed = None
        try:
            for name, cmd in servers.items():
                children[name] = self._spawn(cmd, env, preexec)
            failed = self._wait_until_listening(
                {name: children[name] for name in servers}, {"http": http, "grpc": grpc}, stop)
            if not failed and not stop.is_set():
                for name, cmd in controllers.items():
                    children[name] = self._spawn(cmd, env, preexec)
                self.stdout.write(
                    f"Falcon is running: HTTP http://{http}/api/v1/exps "
                    f"(docs /api/docs/, admin /admin/), gRPC {grpc}. Ctrl-C stops it.")
            restarts: dict[str, int] = {}
            due: dict[str, float] = {}
            while not stop.is_set() and not failed:
                for name, proc in list(children.items()):
                    if proc.poll() is None:
                        continue
                    if name in servers:
                        failed = f"{name} ended: {describe_exit(proc.returncode)}"
                        stop.set()
                        break
                    # A controller is restarted, as a Deployment's kubelet would (restartPolicy
                    # Always, with a capped exponential back-off): its work is level-triggered
                    # and recovers from the records and the runs it finds.
                    if name not in due:
                        restarts[name] = restarts.get(name, 0) + 1
                        wait = min(RESTART_BACKOFF_SECONDS * 2 ** (restarts[name] - 1),
                                   RESTART_BACKOFF_MAX_SECONDS)
                        due[name] = time.monotonic() + wait
                        self.stderr.write(f"{name} ended ({describe_exit(proc.returncode)}); "
                                          f"restarting it in {wait:.0f} s")
                    elif time.monotonic() >= due[name]:
                        del due[name]
                        children[name] = self._spawn(controllers[name], env, preexec)
                stop.wait(0.5)
        finally:
            self._stop_all(children)
        if failed:
            raise CommandError(f"{failed}; stopped the other processes")
        try:  # after SIGHUP the terminal may be gone: saying so must not fail the exit
            self.stdout.write("Falcon stopped. Tasks still running on the local cluster keep "
                              "running; the next runlocal adopts them.")
        except OSError:
            pass

    @staticmethod
    def _check_addresses(http: str, grpc: str, analyzer: str) -> None:
        """Refuse to start when the HTTP or gRPC address cannot be listened on (another
        runlocal?), or when any of the three is beyond loopback without the opt-in.

        Raises:
            CommandError: naming the taken port, its option and what to do.
        """
        try:
            http_port, grpc_port = split_addr(http)[1], split_addr(grpc)[1]
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if 0 in (http_port, grpc_port):
            raise CommandError("runlocal needs fixed ports: port 0 would pick one the other "
                               "processes cannot know; give --http and --grpc a port.")
        if http_port == grpc_port:
            raise CommandError(f"--http {http} and --grpc {grpc} use the same port {http_port}; "
                               "give them different ports.")
        for option, addr in (("--http", http), ("--grpc", grpc), ("--analyzer", analyzer)):
            refusal, warning = local_bind_problem(
                addr, mode=settings.FALCON_AUTH_MODE,
                opt_in=settings.FALCON_LOCAL_ALLOW_NONLOOPBACK)
            if refusal:
                raise CommandError(f"{option}: {refusal}")
            if warning:
                if log_format() == "json":
                    logging.getLogger("falcon.commands.runlocal").warning("%s", warning)
                else:
                    sys.stderr.write(warning + "\n")
        for label, option, addr, port in (("HTTP", "--http", http, http_port),
                                          ("gRPC", "--grpc", grpc, grpc_port)):
            problem = bind_problem(addr)
            if problem:
                raise CommandError(
                    f"cannot start: the {label} port {port} ({addr}) cannot be listened on: "
                    f"{problem}. Is another runlocal (or server) running? Stop it, or choose "
                    f"another address with {option} HOST:PORT. Nothing was started.")

    @staticmethod
    def _spawn(cmd: list[str], env: dict[str, str],
               preexec: Callable[[], None] | None) -> subprocess.Popen:
        # Own session: a Ctrl-C reaches this supervisor only, which stops the children in order
        # instead of racing them all at once. The parent-death signal stops them if this
        # process is killed without a chance to do it.
        return subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=preexec)

    @staticmethod
    def _wait_until_listening(procs: dict[str, subprocess.Popen], addrs: dict[str, str],
                              stop: threading.Event,
                              timeout: float = LISTEN_TIMEOUT_SECONDS) -> str | None:
        """Wait until each child of `procs` listens on its address; return why not, or None.

        A child counts as listening when it holds the listening socket of its port itself
        (/proc), not merely when the port answers: another process that took the port since
        the check must not pass for ours.
        """
        waiting = dict(procs)
        deadline = time.monotonic() + timeout
        while waiting and not stop.is_set():
            for name, proc in list(waiting.items()):
                if proc.poll() is not None:
                    return (f"{name} ended ({describe_exit(proc.returncode)}) before listening "
                            f"on {addrs[name]}")
                if listens(proc.pid, split_addr(addrs[name])[1], split_addr(addrs[name])[0]):
                    del waiting[name]
            if waiting and time.monotonic() > deadline:
                return (f"{', '.join(waiting)} did not listen on "
                        f"{', '.join(addrs[name] for name in waiting)} within {timeout:g} s")
            stop.wait(0.1)
        return None

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
