"""`manage.py runcontroller exp|resources|analyzer`: run one controller loop until SIGTERM/SIGINT.

`analyzer` also serves AnalyzerService on `--addr` (default `FALCON_ANALYZER_ADDR`); under
leader election every replica serves it, but a follower answers UNAVAILABLE "not the leader"
and only the leader's loop admits and runs analyses.

By default the loop runs under leader election on a `coordination.k8s.io/v1` Lease
(`controllers.leader`), so several replicas can be deployed and one acts; every write the
controller makes (API status updates, cluster submits and deletes) is fenced by the Lease.
`--no-leader-election` runs the loop alone: the local mode (`runlocal`), where one process of
each kind runs and there is no Kubernetes API to hold a Lease.
"""
from __future__ import annotations

import hashlib
import sys
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from core.observability.commands import LoggedOutputMixin

# Every write method of `controllers.contract.FalconAPI`: each call is fenced by the Lease.
API_WRITES = ("update_exp_status", "update_exp_statuses", "update_job_status",
              "update_job_statuses", "update_artifact_status")
BACKEND_WRITES = ("submit", "delete", "sweep", "release_outcomes")
ANALYSIS_WRITES = ("create_record", "update_record", "delete_record")
ANALYSIS_BACKEND_WRITES = ("start", "stop")
LEASE_NAME_MAX = 253  # a Lease name is a DNS-1123 subdomain


def _is_transient(exc: BaseException) -> bool:
    """API-server outages (UNAVAILABLE, DEADLINE_EXCEEDED) are transient; anything else is a
    bug and stops the process, so its supervisor restarts it."""
    return bool(getattr(exc, "retryable", False))


def _fenced(target, fence, writes):
    if fence is None:
        return target
    from controllers.leader import Fenced

    return Fenced(target, fence, writes)


def build_exp_controller(options, fence=None):
    from artifacts.store import store_for

    from controllers.exp_controller import ExpController
    from controllers.grpc_client import GrpcFalconAPI

    return ExpController(_fenced(GrpcFalconAPI.from_settings(), fence, API_WRITES),
                         has_files=lambda url: store_for(url).has_files(url))


def build_resource_manager(options, fence=None):
    from controllers.cluster_backends.loading import load_backends
    from controllers.grpc_client import GrpcFalconAPI
    from controllers.resource_manager import ResourceManager

    backends = {name: _fenced(backend, fence, BACKEND_WRITES)
                for name, backend in load_backends(options["clusters"]).items()}
    return ResourceManager(_fenced(GrpcFalconAPI.from_settings(), fence, API_WRITES), backends,
                           pending_timeout=settings.FALCON_PENDING_TIMEOUT_SECONDS,
                           progress_deadline=settings.FALCON_PROGRESS_DEADLINE_SECONDS,
                           orphan_grace=settings.FALCON_ORPHAN_GRACE_SECONDS)


def build_analyzer(options, fence=None):
    """The analyzer controller: the catalog (`FALCON_PLUGIN_CATALOG`, read once), the backend
    of `FALCON_ANALYZER_BACKEND` (local under `FALCON_ANALYZER_STATE_DIR`, or one Pod per
    analysis), the record client of the API server; record writes and run starts/stops
    fenced by the Lease."""
    from pathlib import Path

    from controllers.analyzer.backends.local import LocalAnalysisBackend
    from controllers.analyzer.controller import AnalyzerConfig, AnalyzerController
    from controllers.analyzer.grpc_client import GrpcAnalysisRecordAPI
    from plugins.catalog import load_catalog

    catalog = load_catalog(settings.FALCON_PLUGIN_CATALOG)
    if settings.FALCON_ANALYZER_BACKEND == "kubernetes":
        from controllers.analyzer.backends.kubernetes import PodAnalysisBackend

        backend = PodAnalysisBackend.from_settings()
    else:
        backend = LocalAnalysisBackend(Path(settings.FALCON_ANALYZER_STATE_DIR),
                                       plugin_dir=settings.FALCON_PLUGIN_DIR)
    return AnalyzerController(
        _fenced(GrpcAnalysisRecordAPI.from_settings(), fence, ANALYSIS_WRITES),
        _fenced(backend, fence, ANALYSIS_BACKEND_WRITES), catalog,
        AnalyzerConfig.from_settings())


REGISTRY = {"exp": build_exp_controller, "resources": build_resource_manager,
            "analyzer": build_analyzer}
# What user code each controller runs, for `core.processes.user_code` (the exp controller runs none).
RUNS_USER_CODE = {"resources": {"tasks": True, "analyses": False},
                  "analyzer": {"tasks": False, "analyses": True}}


def default_lease_name(prefix: str, controller: str, clusters: list[str] | None) -> str:
    """Return `<prefix>-<controller>`, plus the served clusters when a subset is served.

    Resource managers serving different cluster sets must not share a Lease; the same set in
    any order gives the same name. Names too long for a DNS subdomain end in a hash.
    """
    from controllers.cluster_backends.base import dns_part

    name = dns_part(f"{prefix}-{controller}")
    if clusters:
        name = f"{name}-{dns_part('-'.join(sorted(set(clusters))))}"
    if len(name) > LEASE_NAME_MAX:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[:LEASE_NAME_MAX - 9].rstrip('-')}-{digest}"
    return name


def build_elector(options):
    """Return a `LeaseElector` from the command options over `settings.FALCON_LEADER_ELECTION`.

    Raises:
        ValueError: the durations are inconsistent (see `ElectionConfig`).
        kubernetes.config.ConfigException: no kubeconfig / in-cluster service account.
    """
    from kubernetes import client

    from controllers.kubeclient import KubeCaller, KubeConnection, api_client
    from controllers.leader import ElectionConfig, LeaseElector, default_identity

    le = settings.FALCON_LEADER_ELECTION
    cfg = ElectionConfig(
        lease_name=options["lease_name"] or default_lease_name(
            le["lease_name_prefix"], options["name"], options["clusters"]),
        namespace=options["lease_namespace"] or le["namespace"],
        identity=default_identity(),
        lease_duration=options["lease_duration"] or le["lease_duration"],
        renew_deadline=options["renew_deadline"] or le["renew_deadline"],
        retry_period=options["retry_period"] or le["retry_period"])
    # One attempt per call, answered well within the renew deadline: the election loop retries.
    timeout = cfg.renew_deadline / 2
    conn = KubeConnection(kubeconfig=le["kubeconfig"], context=le["context"],
                          in_cluster=le["in_cluster"], retries=0, request_timeout=timeout,
                          connect_timeout=min(5.0, timeout), qps=10, burst=10)
    return LeaseElector(client.CoordinationV1Api(api_client(conn)), cfg,
                        caller=KubeCaller(conn))


class Command(LoggedOutputMixin, BaseCommand):
    help = ("Run a Falcon controller loop: exp (expController) or resources (resource "
            "manager), under leader election unless --no-leader-election.")

    def add_arguments(self, parser):
        parser.add_argument("name", choices=sorted(REGISTRY))
        parser.add_argument("--interval", type=float,
                            default=settings.FALCON_CONTROLLER_INTERVAL_SECONDS,
                            help="Seconds between two ticks.")
        parser.add_argument("--once", action="store_true", help="Run one tick and exit.")
        parser.add_argument("--cluster", dest="clusters", action="append", default=None,
                            help="resources: serve this cluster (repeatable; default all).")
        parser.add_argument("--addr", default="",
                            help="analyzer: AnalyzerService address host:port (default "
                            "FALCON_ANALYZER_ADDR).")
        parser.add_argument("--no-leader-election", action="store_true",
                            help="Run without a Lease (local mode: one replica, no cluster).")
        parser.add_argument("--lease-name", default="",
                            help="Lease name (default <prefix>-<controller>[-<clusters>]).")
        parser.add_argument("--lease-namespace", default="",
                            help="Lease namespace (default FALCON_LEASE_NAMESPACE, "
                            "POD_NAMESPACE or 'default').")
        parser.add_argument("--lease-duration", type=float, default=None,
                            help="Seconds a follower waits for a silent leader.")
        parser.add_argument("--renew-deadline", type=float, default=None,
                            help="Seconds a leader tries to renew before it stops acting.")
        parser.add_argument("--retry-period", type=float, default=None,
                            help="Seconds between two acquire or renew attempts.")
        parser.add_argument("--no-schedule", action="store_true",
                            help="Keep --interval instead of following the loop's schedule "
                                 "(edited in the admin, read over gRPC every second).")
        parser.add_argument("--metrics-port", type=int, default=None,
                            help="Serve Prometheus /metrics on this port (default "
                                 "FALCON_METRICS_PORT; 0 or unset: off).")

    def handle(self, *args, **options):
        from controllers.leader import run_elected
        from controllers.runner import install_stop_handlers, run_loop, tune_gc

        name = options["name"]
        if name in RUNS_USER_CODE:
            from django.core.exceptions import ImproperlyConfigured

            from core.processes.user_code import require_isolated_user_code

            # Before the Lease, the listener or any run: a refused setup starts nothing.
            try:
                require_isolated_user_code(**RUNS_USER_CODE[name], warn=self.stderr.write)
            except ImproperlyConfigured as exc:
                raise CommandError(f"controller {name}: {exc}") from None
        from core.grpc.channel import set_client_name

        set_client_name(name)  # the history names this controller as the actor
        elector = None
        try:
            if not options["no_leader_election"]:
                elector = build_elector(options)
            controller = REGISTRY[name](options, fence=elector.fence if elector else None)
        except Exception as exc:
            raise CommandError(f"cannot start controller {name}: {exc}") from exc
        _start_metrics(controller, elector, options.get("metrics_port"))
        follower = None
        if not options.get("no_schedule"):
            from controllers.schedule import follower_from_settings

            follower = follower_from_settings(controller, options["interval"])
        server = None
        if name == "analyzer":
            from controllers.analyzer.server import build_analyzer_server

            from core.processes.ports import local_bind_problem

            addr = options["addr"] or settings.FALCON_ANALYZER_ADDR
            # Like the APIs: in the local mode, loopback only unless the operator opts in.
            refusal, warning = local_bind_problem(
                addr, mode=settings.FALCON_AUTH_MODE,
                opt_in=settings.FALCON_LOCAL_ALLOW_NONLOOPBACK)
            if refusal:
                raise CommandError(f"--addr: {refusal}")
            if warning:
                self.stderr.write(warning)
            try:
                server = build_analyzer_server(
                    addr, controller,
                    settings.FALCON_ANALYZER_TOKEN,
                    is_leader=elector.is_leader if elector else (lambda: True))
            except (ValueError, RuntimeError) as exc:
                raise CommandError(f"cannot start controller {name}: {exc}") from exc
            server.start()
            self.status(f"controller analyzer: AnalyzerService on port {server.port}")
        stop = threading.Event()
        install_stop_handlers(stop)
        tune_gc()
        max_ticks = 1 if options["once"] else None

        def work(halt: threading.Event) -> int:
            # A new leadership term starts from the records, not from a past term's memory.
            reset = getattr(controller, "reset", None)
            if reset is not None:
                reset()
            return run_loop(controller, interval=options["interval"], stop=halt,
                            is_transient=_is_transient, max_ticks=max_ticks,
                            wake=getattr(controller, "wake", None),
                            schedule=follower.before_tick if follower else None)

        if elector is None:
            self.status(f"controller {controller.name}: running every "
                        f"{options['interval']} s (no leader election)")
            try:
                work(stop)
            finally:
                if server is not None:
                    server.stop()
        else:
            cfg = elector.config
            self.status(f"controller {controller.name}: {cfg.identity} runs every "
                        f"{options['interval']} s while holding Lease "
                        f"{cfg.namespace}/{cfg.lease_name}")
            try:
                run_elected(work, elector, stop=stop)
            finally:
                if server is not None:
                    server.stop()
        self.status(f"controller {controller.name}: stopped")


def _start_metrics(controller, elector, port: int | None) -> None:
    """Instrument `controller` and serve /metrics on `port` (else FALCON_METRICS_PORT; 0: off).

    `controllers.metrics` holds the metrics; see docs/operations.md.
    """
    import os

    from controllers import metrics

    port = port if port is not None else int(os.environ.get("FALCON_METRICS_PORT") or 0)
    if not port:
        return
    from core.processes.ports import configured_metrics_host

    # The local mode listens on loopback only, like the APIs.
    try:
        host, warning = configured_metrics_host(port)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if warning:
        sys.stderr.write(warning + "\n")
    metrics.instrument(controller, is_leader=elector.is_leader if elector else None)
    metrics.serve(port, host)
