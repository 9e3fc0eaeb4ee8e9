"""An in-memory double of the API server's AnalysisRecordService, for the analyzer's tests.

`FakeRecordAPI` implements `controllers.analyzer.contract.AnalysisRecordAPI` in memory (the
state machine's transitions, expected_status races, offline idempotency on (artifact, plugin));
`serve_fake` puts it behind a real gRPC server so a real `runcontroller analyzer` subprocess and
`GrpcAnalysisRecordAPI` can be tested end to end.
"""
from __future__ import annotations

import dataclasses
import itertools
import threading
from concurrent import futures
from datetime import datetime, timedelta, timezone

import grpc

from controllers.analyzer.contract import (
    CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED, TERMINAL, AlreadyExists, AnalysisView,
    AwaitingView,
)
from controllers.analyzer.grpc_client import ANALYSIS_ID_KEY, analysis_message
from core.errors import Conflict, InvalidTransition, NotFound, TransitionRace
from core.grpc.errors import trailing_metadata_for
from falcon_proto.falcon.v1 import analysis_pb2, analysis_pb2_grpc

ALLOWED = {PENDING: {RUNNING, FAILED, CANCELLED}, RUNNING: {SUCCEEDED, FAILED, CANCELLED}}
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class FakeRecordAPI:
    """Analysis records in a dict; `awaiting` is what ListExpsAwaitingAnalysis answers."""

    def __init__(self):
        self.records: dict[str, AnalysisView] = {}
        self.awaiting: list[AwaitingView] = []
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self.calls: list[str] = []
        self.artifact_paths: dict[int, str] = {}  # exp id -> its artifact (online creates)

    def add(self, **fields) -> AnalysisView:
        """Insert a record directly (as the database would hold it)."""
        with self.lock:
            n = next(self._ids)
            fields.setdefault("analysis_id", f"an-{n:06d}")
            fields.setdefault("created_at", T0 + timedelta(seconds=n))
            fields.setdefault("analysis_type", "online")
            fields.setdefault("status", PENDING)
            fields.setdefault("exp_id", 1)
            fields.setdefault("result_path", "")
            rec = AnalysisView(**fields)
            self.records[rec.analysis_id] = rec
            return rec

    def list_awaiting(self, plugins, limit=100):
        self.calls.append("list_awaiting")
        with self.lock:
            return [a for a in self.awaiting if a.plugin_name in plugins and not any(
                r.artifact_id == a.artifact_id and r.plugin_name == a.plugin_name
                and r.analysis_type == "offline" for r in self.records.values())][:limit]

    def create_record(self, *, exp_id, analysis_type, result_root, plugin_name="", command="",
                      script_content="", artifact_id=0, creator_email="", name="",
                      analysis_id=""):
        self.calls.append("create_record")
        with self.lock:
            if analysis_type == "offline":
                for r in self.records.values():
                    if r.artifact_id == artifact_id and r.plugin_name == plugin_name \
                            and r.analysis_type == "offline":
                        raise AlreadyExists("an offline analysis exists", r.analysis_id)
            n = next(self._ids)
            aid = analysis_id or f"an-{n:06d}"
            if aid in self.records:
                raise AlreadyExists("exists", aid)
            artifact_path = next((a.artifact_path for a in self.awaiting
                                  if a.artifact_id == artifact_id), "") or \
                self.artifact_paths.get(exp_id, "")
            rec = AnalysisView(
                analysis_id=aid, exp_id=exp_id, analysis_type=analysis_type, status=PENDING,
                result_path=f"{result_root.rstrip('/')}/analysis/{exp_id}/{aid}/",
                name=name, plugin_name=plugin_name, command=command,
                script_content=script_content, script_bytes=len(script_content.encode()),
                artifact_id=artifact_id, artifact_path=artifact_path,
                creator_email=creator_email, created_at=T0 + timedelta(seconds=n))
            self.records[aid] = rec
            return dataclasses.replace(rec, script_content="")

    def get_record(self, analysis_id, with_script=False):
        with self.lock:
            if analysis_id not in self.records:
                raise NotFound(f"no analysis {analysis_id}")
            rec = self.records[analysis_id]
            return rec if with_script else dataclasses.replace(rec, script_content="")

    def list_records(self, *, statuses=(), exp_id=0, analysis_type=""):
        with self.lock:
            out = [dataclasses.replace(r, script_content="") for r in self.records.values()
                   if (not statuses or r.status in statuses) and (not exp_id or r.exp_id == exp_id)
                   and (not analysis_type or r.analysis_type == analysis_type)]
        return sorted(out, key=lambda r: (r.created_at, r.analysis_id))

    def list_running(self):
        return self.list_records(statuses=(RUNNING,))

    def update_record(self, analysis_id, *, expected_status=None, **fields):
        self.calls.append(f"update_record:{fields.get('status', '')}")
        with self.lock:
            rec = self.get_record(analysis_id, with_script=True)
            if expected_status is not None and rec.status != expected_status:
                raise TransitionRace(f"{analysis_id} is {rec.status}, not {expected_status}")
            new = fields.get("status", rec.status)
            if new != rec.status and new not in ALLOWED.get(rec.status, ()):
                raise InvalidTransition(f"{rec.status} -> {new}")
            rec = dataclasses.replace(rec, **fields)
            self.records[analysis_id] = rec
            return dataclasses.replace(rec, script_content="")

    def delete_record(self, analysis_id):
        with self.lock:
            rec = self.get_record(analysis_id)
            if rec.status not in TERMINAL:
                raise Conflict(f"{analysis_id} is {rec.status}")
            del self.records[analysis_id]


class FakeRecordServicer(analysis_pb2_grpc.AnalysisRecordServiceServicer):
    """AnalysisRecordService over a `FakeRecordAPI` (no auth)."""

    def __init__(self, api: FakeRecordAPI):
        self.api = api

    def _run(self, context, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AlreadyExists as exc:
            context.set_trailing_metadata(((ANALYSIS_ID_KEY, exc.analysis_id),))
            context.abort(grpc.StatusCode.ALREADY_EXISTS, exc.message)
        except (NotFound, Conflict) as exc:
            context.set_trailing_metadata(trailing_metadata_for(exc))
            context.abort(getattr(grpc.StatusCode, exc.grpc_status), exc.message)

    def ListExpsAwaitingAnalysis(self, request, context):
        plugins = {p.plugin_name: tuple(p.artifact_types) for p in request.plugins}
        items = self._run(context, self.api.list_awaiting, plugins, request.limit or 100)
        return analysis_pb2.ListExpsAwaitingAnalysisResp(items=[analysis_pb2.ExpAwaiting(
            exp_id=a.exp_id, exp_name=a.exp_name, exp_type=a.exp_type,
            creator_email=a.creator_email, artifact_id=a.artifact_id,
            artifact_path=a.artifact_path, artifact_type=a.artifact_type,
            plugin_name=a.plugin_name) for a in items])

    def CreateAnalysisRecord(self, request, context):
        rec = self._run(context, self.api.create_record, exp_id=request.exp_id,
                        analysis_type=request.analysis_type, result_root=request.result_root,
                        plugin_name=request.plugin_name, command=request.command,
                        script_content=request.script_content, artifact_id=request.artifact_id,
                        creator_email=request.creator_email, name=request.name,
                        analysis_id=request.analysis_id)
        return analysis_pb2.AnalysisRecordResp(record=analysis_message(rec), changed=True)

    def GetAnalysisRecord(self, request, context):
        return analysis_message(self._run(context, self.api.get_record, request.analysis_id,
                                          request.with_script))

    def _page(self, records, request):
        size = request.page_size or 100
        start = int(request.page_token or 0)
        return analysis_pb2.ListAnalysisRecordsResp(
            records=[analysis_message(r) for r in records[start:start + size]],
            next_page_token=str(start + size) if start + size < len(records) else "")

    def ListAnalysisRecords(self, request, context):
        return self._page(self.api.list_records(statuses=tuple(request.statuses),
                                                exp_id=request.exp_id,
                                                analysis_type=request.analysis_type), request)

    def ListRunningAnalyses(self, request, context):
        return self._page(self.api.list_running(), request)

    def UpdateAnalysisRecord(self, request, context):
        fields = {path: getattr(request.record, path) for path in request.update_mask.paths}
        expected = request.expected_status if request.HasField("expected_status") else None
        rec = self._run(context, self.api.update_record, request.analysis_id,
                        expected_status=expected, **fields)
        return analysis_pb2.AnalysisRecordResp(record=analysis_message(rec), changed=True)

    def DeleteAnalysisRecord(self, request, context):
        self._run(context, self.api.delete_record, request.analysis_id)
        return analysis_pb2.DeleteAnalysisRecordResp()


def serve_fake(api: FakeRecordAPI) -> tuple[grpc.Server, int]:
    """Start a gRPC server of AnalysisRecordService over `api` on 127.0.0.1; (server, port)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    analysis_pb2_grpc.add_AnalysisRecordServiceServicer_to_server(FakeRecordServicer(api), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port
