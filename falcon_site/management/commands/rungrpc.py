"""`manage.py rungrpc`: serve the internal gRPC API (docs/architecture.md, Processes).

Serves ExperimentService, JobService and ArtifactService (falcon.v1) with gRPC health checking
and reflection until SIGINT or SIGTERM, then reports NOT_SERVING, lets calls in flight finish for
`--grace` seconds and exits 0 (Kubernetes sends SIGTERM on pod shutdown). The port is bound
exclusively: when another process listens on it, the command exits 1 naming the address.
Under `FALCON_LOG_FORMAT=json` everything it writes is a JSON line (`core.observability.commands`).
"""
from __future__ import annotations

import logging
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from core.observability.commands import LoggedOutputMixin
from core.observability.logs import log_format

log = logging.getLogger("falcon.grpc")


class Command(LoggedOutputMixin, BaseCommand):
    """Run the gRPC API server in the foreground."""

    help = "Serve the internal gRPC API (falcon.v1) with health checking and reflection."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--addr", default=None,
                            help="host:port to listen on (default: $FALCON_GRPC_ADDR or "
                                 "127.0.0.1:50051; use 0.0.0.0:50051 in a container).")
        parser.add_argument("--workers", type=int, default=16,
                            help="calls served at once (threads; default 16).")
        parser.add_argument("--grace", type=float, default=10.0,
                            help="seconds calls in flight get to finish on shutdown.")

    def handle(self, *args, addr: str | None, workers: int, grace: float, **options) -> None:
        """Build, start and run the server until SIGINT/SIGTERM.

        Raises:
            CommandError: the address cannot be bound (for example another server listens on
                it: the port is bound exclusively) or `--workers` is below 1.
        """
        from django.core.exceptions import ImproperlyConfigured

        from core.processes.ports import local_bind_problem
        from core.processes.user_code import require_isolated_user_code
        from falcon_site.grpc.server import AddressUnavailable, build_server

        addr = addr or settings.FALCON_GRPC_ADDR
        # CreateExp here queues tasks: refuse before listening if they would run as the server.
        try:
            require_isolated_user_code(tasks=True, analyses=False, warn=self.stderr.write)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None

        refusal, warning = local_bind_problem(addr, mode=settings.FALCON_AUTH_MODE,
                                              opt_in=settings.FALCON_LOCAL_ALLOW_NONLOOPBACK)
        if refusal:
            raise CommandError(f"--addr: {refusal}")
        if warning:
            log.warning("%s", warning)
            if log_format() == "text":  # under json the record above is the line
                self.stderr.write(warning)
        if workers < 1:
            raise CommandError("--workers must be at least 1")
        if not settings.FALCON_INTERNAL_TOKEN:
            log.warning("FALCON_INTERNAL_TOKEN is not set: only user JWTs are accepted, and "
                        "controllers cannot authenticate.")
        try:
            server = build_server(addr, max_workers=workers)
        except AddressUnavailable as exc:
            # Exit non-zero with the address and what to do (the port is bound exclusively).
            raise CommandError(str(exc)) from None

        _serve_metrics()
        stop = threading.Event()

        def on_signal(signum, _frame) -> None:
            log.info("received %s; stopping", signal.Signals(signum).name)
            stop.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            server.start()
            host = addr.rsplit(":", 1)[0]
            log.info("gRPC API listening on %s:%d", host, server.port)
            if log_format() == "text":  # under json the record above is the line
                self.stdout.write(f"gRPC API listening on {host}:{server.port}")
                self.stdout.flush()
            while not stop.wait(1.0):
                pass
            server.stop(grace)
            log.info("gRPC API stopped")
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _serve_metrics() -> None:
    """Serve the gRPC server's Prometheus metrics (`core.observability.metrics`) on `FALCON_METRICS_PORT`.

    Unset or 0: off. `FALCON_METRICS_ADDR`, by default loopback in the local mode and all
    addresses in the others, as the controllers do; in the local mode a non-loopback address
    is refused like the API's own (`core.processes.ports.metrics_host`).

    Raises:
        CommandError: the local mode's loopback rule refuses the address.
    """
    import os

    port = int(os.environ.get("FALCON_METRICS_PORT") or 0)
    if not port:
        return
    from prometheus_client import start_http_server

    from core.processes.ports import configured_metrics_host

    try:
        addr, warning = configured_metrics_host(port)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if warning:
        log.warning("%s", warning)
    start_http_server(port, addr=addr)
    log.info("metrics on http://%s:%s/metrics", addr, port)
