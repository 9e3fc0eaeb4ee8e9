"""`manage.py runcontroller exp|resources`: run one controller loop until SIGTERM/SIGINT."""
from __future__ import annotations

import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def _is_transient(exc: BaseException) -> bool:
    """API-server outages (UNAVAILABLE, DEADLINE_EXCEEDED) are transient; anything else is a
    bug and stops the process, so its supervisor restarts it."""
    return bool(getattr(exc, "retryable", False))


def build_exp_controller(options):
    from artifacts.store import store_for

    from controllers.exp_controller import ExpController
    from controllers.grpc_client import GrpcFalconAPI

    return ExpController(GrpcFalconAPI.from_settings(),
                         has_files=lambda url: store_for(url).has_files(url))


def build_resource_manager(options):
    from controllers.clusters import load_backends
    from controllers.grpc_client import GrpcFalconAPI
    from controllers.resource_manager import ResourceManager

    return ResourceManager(GrpcFalconAPI.from_settings(), load_backends(options["clusters"]),
                           pending_timeout=settings.FALCON_PENDING_TIMEOUT_SECONDS)


REGISTRY = {"exp": build_exp_controller, "resources": build_resource_manager}


class Command(BaseCommand):
    help = "Run a Falcon controller loop: exp (expController) or resources (resource manager)."

    def add_arguments(self, parser):
        parser.add_argument("name", choices=sorted(REGISTRY))
        parser.add_argument("--interval", type=float,
                            default=settings.FALCON_CONTROLLER_INTERVAL_SECONDS,
                            help="Seconds between two ticks.")
        parser.add_argument("--once", action="store_true", help="Run one tick and exit.")
        parser.add_argument("--cluster", dest="clusters", action="append", default=None,
                            help="resources: serve this cluster (repeatable; default all).")

    def handle(self, *args, **options):
        from controllers.runner import install_stop_handlers, run_loop

        try:
            controller = REGISTRY[options["name"]](options)
        except Exception as exc:
            raise CommandError(f"cannot start controller {options['name']}: {exc}") from exc
        stop = threading.Event()
        install_stop_handlers(stop)
        self.stderr.write(f"controller {controller.name}: running every "
                          f"{options['interval']} s")
        run_loop(controller, interval=options["interval"], stop=stop,
                 is_transient=_is_transient, max_ticks=1 if options["once"] else None)
        self.stderr.write(f"controller {controller.name}: stopped")
