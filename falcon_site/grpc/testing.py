"""An in-process API server for tests: real sockets, real interceptor, the test database.

Test modules import the fixtures they use (`from falcon_site.grpc.testing import grpc_server`):
the root conftest belongs to every app, and these fixtures to the gRPC tests only.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc
import pytest

from core.grpc.channel import CHANNEL_OPTIONS
from .server import FalconGrpcServer, build_server


@contextlib.contextmanager
def running_server(max_workers: int = 4) -> Iterator[FalconGrpcServer]:
    """Run `build_server('127.0.0.1:0')` for the duration of the block; yield it started.

    The server's threads use their own database connections, so callers need
    `@pytest.mark.django_db(transaction=True)` for the rows they create to be visible.
    """
    server = build_server("127.0.0.1:0", max_workers=max_workers)
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=0)


def channel_to(server: FalconGrpcServer) -> grpc.Channel:
    """Return an insecure channel to `server` with the production message limits."""
    return grpc.insecure_channel(f"127.0.0.1:{server.port}", options=CHANNEL_OPTIONS)


# -- pytest fixtures: import them into a test module to use them -------------------------------

INTERNAL_TOKEN = "test-internal-token-0123456789abcdef0123456789"


@pytest.fixture
def grpc_server(transactional_db, settings) -> Iterator[FalconGrpcServer]:
    """A started in-process server whose internal token is `INTERNAL_TOKEN`."""
    settings.FALCON_INTERNAL_TOKEN = INTERNAL_TOKEN
    with running_server() as server:
        yield server


@pytest.fixture
def grpc_channel(grpc_server) -> Iterator[grpc.Channel]:
    """A channel to `grpc_server` (no credentials: pass `auth_metadata(...)` per call)."""
    channel = channel_to(grpc_server)
    yield channel
    channel.close()


@pytest.fixture
def stubs(grpc_channel):
    """The falcon.v1 stubs on `grpc_channel`, and `md`: the internal token's metadata."""
    from core.grpc.channel import auth_metadata
    from falcon_proto.falcon.v1 import artifact_pb2_grpc, experiment_pb2_grpc, job_pb2_grpc

    class Stubs:
        exps = experiment_pb2_grpc.ExperimentServiceStub(grpc_channel)
        jobs = job_pb2_grpc.JobServiceStub(grpc_channel)
        artifacts = artifact_pb2_grpc.ArtifactServiceStub(grpc_channel)
        md = auth_metadata(INTERNAL_TOKEN)

    return Stubs


@pytest.fixture
def falcon_api(grpc_server):
    """A `controllers.grpc_client.GrpcFalconAPI` to `grpc_server` with the internal token."""
    from controllers.grpc_client import GrpcFalconAPI

    client = GrpcFalconAPI(f"127.0.0.1:{grpc_server.port}", INTERNAL_TOKEN, timeout=10)
    yield client
    client.close()
