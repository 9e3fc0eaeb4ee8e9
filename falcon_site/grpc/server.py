"""The gRPC API server: falcon.v1 services, health checking and reflection on one port.

Plain grpcio servicers over the service layer, not django-socio-grpc (decisions.md#dec-grpc):
socio-grpc derives `.proto` files and RPCs from DRF serializers and model viewsets
(List/Retrieve/Create/Update/Destroy on one model), while Falcon's API has fixed names
(`CreateExp`, `UpdateExpStatus`, `AbortExp`, ... with their own request and response messages).
Bending it to those names needs a `@grpc_action` per RPC and hand-written messages anyway, and
its serializers would become a second place for validation beside `experiments.specs`.
Hand-written protos plus thin servicers keep one contract (protos/falcon/v1/) and one
validation path (the services), exactly as the HTTP views do.

Each call runs on a worker of a `ThreadPoolExecutor`; `FalconServerInterceptor` authenticates it,
gives it fresh database connections (`close_old_connections()` before and after) and maps domain
errors to status codes. Health (`grpc.health.v1.Health`) and reflection answer without a token.
"""
from __future__ import annotations

import logging
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from core.grpc.channel import CHANNEL_OPTIONS
from core.processes.ports import bind_problem
from falcon_proto.falcon.v1 import (
    analysis_pb2_grpc, artifact_pb2_grpc, experiment_pb2_grpc, history_pb2_grpc, job_pb2_grpc,
    schedule_pb2_grpc,
)
from .interceptors import FalconServerInterceptor
from .services import SERVICE_NAMES

log = logging.getLogger(__name__)

# The server binds its port exclusively. grpcio sets SO_REUSEPORT on listening sockets by
# default, so a second server on the same port would start without error and the kernel would
# split new connections between the two: a second `runlocal` would then serve half the calls of
# the first one's controllers from its own database, and its own experiments would stay
# Created. With the option off, the second bind fails and `rungrpc` exits saying so.
SERVER_OPTIONS = (*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0))


class AddressUnavailable(RuntimeError):
    """The server cannot listen on its address (in use by another process, not local, ...)."""


@dataclass
class FalconGrpcServer:
    """A built, not yet started, gRPC server.

    Attributes:
        server: the `grpc.Server`.
        port: the bound TCP port (the real one when the address asked for port 0).
        health: the health servicer; every service is SERVING once started.
    """

    server: grpc.Server
    port: int
    health: health.HealthServicer

    def start(self) -> None:
        """Start serving and report SERVING for the server ("") and every falcon.v1 service."""
        self.server.start()
        for name in ("", *SERVICE_NAMES):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace: float = 5.0) -> None:
        """Report NOT_SERVING, then stop, letting calls in flight finish for `grace` seconds."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()


def build_server(addr: str, *, max_workers: int = 16) -> FalconGrpcServer:
    """Build the API server listening on `addr` (insecure: an in-cluster, internal API).

    Args:
        addr: `host:port`; port 0 picks a free port (tests).
        max_workers: threads serving calls at once; each holds at most one database connection.

    Raises:
        AddressUnavailable: the address cannot be bound (another server listens on it, the
            host is not an address of this machine, ...); the message names the address and
            what to do.
    """
    from analysis.grpc.record_servicer import AnalysisRecordServicer
    from schedules.grpc.schedule_servicer import ScheduleServicer
    from experiments.grpc.artifact_servicer import ArtifactServicer
    from experiments.grpc.experiment_servicer import ExperimentServicer
    from experiments.grpc.history_servicer import HistoryServicer
    from experiments.grpc.job_servicer import JobServicer

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="falcon-grpc"),
        interceptors=[FalconServerInterceptor()],
        options=SERVER_OPTIONS,
    )
    experiment_pb2_grpc.add_ExperimentServiceServicer_to_server(ExperimentServicer(), server)
    job_pb2_grpc.add_JobServiceServicer_to_server(JobServicer(), server)
    artifact_pb2_grpc.add_ArtifactServiceServicer_to_server(ArtifactServicer(), server)
    analysis_pb2_grpc.add_AnalysisRecordServiceServicer_to_server(AnalysisRecordServicer(),
                                                                  server)
    history_pb2_grpc.add_HistoryServiceServicer_to_server(HistoryServicer(), server)
    schedule_pb2_grpc.add_ScheduleServiceServicer_to_server(ScheduleServicer(), server)

    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", *SERVICE_NAMES):
        health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)

    try:
        port = server.add_insecure_port(addr)
    except RuntimeError:
        port = 0
    if port == 0:  # older grpcio returns 0 instead of raising
        raise AddressUnavailable(
            f"cannot listen on {addr}: {bind_problem(addr) or 'the address cannot be bound'}. "
            "Is another rungrpc or runlocal serving it? Stop that process, or choose another "
            "address (rungrpc --addr, runlocal --grpc, or FALCON_GRPC_ADDR).")
    return FalconGrpcServer(server=server, port=port, health=health_servicer)
