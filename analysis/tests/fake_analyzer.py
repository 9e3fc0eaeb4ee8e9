"""A real AnalyzerService for tests: a small grpc servicer on 127.0.0.1, recording its calls.

It stands in for the analyzer controller: CreateAnalysis writes the record through the same
service the controller reaches over AnalysisRecordService, CancelAnalysis and DeleteAnalysis
change it the same way, GetAnalysisLogs answers a fixed log, and the catalog has two plugins.
Domain errors are answered with `core.grpc.errors.abort_with_error`, as a real server does.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
from django.conf import settings
from django.db import close_old_connections

from core.errors import (AlreadyExists, FalconError, InvalidTransition, NotFound,
                         ValidationFailed)
from core.grpc.errors import abort_with_error
from falcon_proto.falcon.v1 import analysis_pb2 as pb, analysis_pb2_grpc

LOG = b"line one\nline two\n"
CATALOG = [
    pb.Plugin(name="summary", description="Summary statistics", command="summary.py",
              artifact_types=["profiling"], timeout_seconds=600,
              resources=pb.ResourceOverride(cpu_request="500m", memory_limit="1Gi")),
    pb.Plugin(name="trace", description="Trace viewer", command="trace.py",
              artifact_types=["profiling", "benchmark"], timeout_seconds=300),
]


class FakeAnalyzer(analysis_pb2_grpc.AnalyzerServiceServicer):
    """Records `(method, request, metadata)` in `calls`; answers as the controller would."""

    def __init__(self, hold: threading.Event | None = None):
        self.calls: list[tuple[str, object, dict]] = []
        self.lock = threading.Lock()
        # A frozen replica: each call waits for `hold` (set by the test) before it is served,
        # and `served` counts the calls served after that.
        self.hold = hold
        self.served = threading.Semaphore(0)
        # Field errors CreateAnalysis answers (INVALID_ARGUMENT, named as the controller names
        # them), or None to create.
        self.refuse_create: dict[str, list[str]] | None = None

    def _record(self, method, request, context):
        with self.lock:
            self.calls.append((method, request, dict(context.invocation_metadata())))

    def _run(self, method, request, context, fn):
        self._record(method, request, context)
        if self.hold is not None:
            self.hold.wait()
        close_old_connections()
        try:
            return fn()
        except FalconError as exc:
            abort_with_error(context, exc)
        finally:
            close_old_connections()
            self.served.release()

    def CreateAnalysis(self, request, context):
        from analysis.services import analysis_record_create

        def create():
            if self.refuse_create:
                raise ValidationFailed(self.refuse_create)
            try:
                record = analysis_record_create(
                    name=request.name, exp_id=request.exp_id,
                    analysis_type=request.analysis_type, plugin_name=request.plugin_name,
                    command=request.command, script_content=request.script_content,
                    script_name=request.script_name, creator_email=request.creator_email,
                    result_root=settings.FALCON_ANALYSIS_ROOT, analysis_id=request.analysis_id)
            except AlreadyExists:
                # A retry of this very create (the controller's `_retried_create`).
                if not request.analysis_id:
                    raise
                return pb.CreateAnalysisResp(analysis_id=request.analysis_id)
            return pb.CreateAnalysisResp(analysis_id=record.analysis_id)
        return self._run("CreateAnalysis", request, context, create)

    def CancelAnalysis(self, request, context):
        from analysis.services import analysis_record_update

        def cancel():
            try:
                analysis_record_update(request.analysis_id,
                                       {"status": "cancelled", "reason": "Cancelled"})
            except InvalidTransition:
                pass
            return pb.CancelAnalysisResp()
        return self._run("CancelAnalysis", request, context, cancel)

    def DeleteAnalysis(self, request, context):
        from analysis.selectors import analysis_get
        from analysis.services import analysis_record_delete
        from artifacts.store import store_for

        def delete():
            record = analysis_get(analysis_id=request.analysis_id)
            analysis_record_delete(request.analysis_id)
            purged = (store_for(record.result_path).delete_tree(record.result_path)
                      if request.purge_gcs else 0)
            return pb.DeleteAnalysisResp(purged_files=purged)
        return self._run("DeleteAnalysis", request, context, delete)

    def GetAnalysisLogs(self, request, context):
        def logs():
            chunk = LOG[request.offset: request.offset + (request.limit_bytes or len(LOG))]
            return pb.GetAnalysisLogsResp(content=chunk, next_offset=request.offset + len(chunk),
                                          complete=False, note="live")
        return self._run("GetAnalysisLogs", request, context, logs)

    def ListPlugins(self, request, context):
        return self._run("ListPlugins", request, context,
                         lambda: pb.ListPluginsResp(plugins=CATALOG))

    def GetPlugin(self, request, context):
        def get():
            for plugin in CATALOG:
                if plugin.name == request.name:
                    return plugin
            raise NotFound(f"No plugin {request.name!r} in the catalog.")
        return self._run("GetPlugin", request, context, get)


@contextlib.contextmanager
def running_fake_analyzer(hold: threading.Event | None = None,
                          ) -> Iterator[tuple[FakeAnalyzer, str]]:
    """Start a `FakeAnalyzer` on 127.0.0.1 (a free port); yield it and its target.

    Args:
        hold: makes it a frozen replica: it accepts connections and calls, and serves each
            call only once `hold` is set.
    """
    fake = FakeAnalyzer(hold)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    analysis_pb2_grpc.add_AnalyzerServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield fake, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=0)


def closed_port() -> str:
    """A 127.0.0.1 target nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"
