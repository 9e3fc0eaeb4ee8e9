"""An in-memory double of the API server's AnalysisRecordService, for the analyzer's tests.

`FakeRecordAPI` implements `controllers.analyzer.contract.AnalysisRecordAPI` in memory (the
state machine's transitions, expected_status races, offline idempotency on (artifact, plugin)),
for the controller's and AnalyzerService's unit tests. The end-to-end tests run against the API
server's real AnalysisRecordService instead (test_end_to_end.py, tests/test_analyzer_e2e.py).
"""
from __future__ import annotations

import dataclasses
import itertools
import threading
from datetime import datetime, timedelta, timezone

from controllers.analyzer.contract import (
    ANALYSIS_ID_KEY, CANCELLED, FAILED, PENDING, RUNNING, SKIPPED, SUCCEEDED, TERMINAL,
    AlreadyExists,
    AnalysisView, AwaitingView,
)
from core.errors import Conflict, InvalidTransition, NotFound, TransitionRace, ValidationFailed

ALLOWED = {PENDING: {RUNNING, FAILED, CANCELLED, SKIPPED}, RUNNING: {SUCCEEDED, FAILED, CANCELLED}}
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
        self.artifact_types: dict[int, str] = {}  # exp id -> its artifact's type (online)

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
                      analysis_id="", script_name="", plugin_artifact_types=()):
        self.calls.append("create_record")
        with self.lock:
            artifact_type = next((a.artifact_type for a in self.awaiting
                                  if a.artifact_id == artifact_id), "") or \
                self.artifact_types.get(exp_id, "")
            # Checked when the test told the artifact's type (the real service always knows it).
            if plugin_artifact_types and artifact_type \
                    and artifact_type not in plugin_artifact_types:
                raise ValidationFailed({"plugin_name": [
                    f"plugin {plugin_name!r} reads {', '.join(plugin_artifact_types)} artifacts; "
                    f"this one is {artifact_type}"]})
            if analysis_type == "offline":
                for r in self.records.values():
                    if r.artifact_id == artifact_id and r.plugin_name == plugin_name \
                            and r.analysis_type == "offline":
                        raise AlreadyExists("an offline analysis exists",
                                            metadata={ANALYSIS_ID_KEY: r.analysis_id})
            n = next(self._ids)
            aid = analysis_id or f"an-{n:06d}"
            if aid in self.records:
                raise AlreadyExists("exists", metadata={ANALYSIS_ID_KEY: aid})
            artifact_path = next((a.artifact_path for a in self.awaiting
                                  if a.artifact_id == artifact_id), "") or \
                self.artifact_paths.get(exp_id, "")
            rec = AnalysisView(
                analysis_id=aid, exp_id=exp_id, analysis_type=analysis_type, status=PENDING,
                result_path=f"{result_root.rstrip('/')}/analysis/{exp_id}/{aid}/",
                name=name, plugin_name=plugin_name, command=command,
                script_content=script_content, script_bytes=len(script_content.encode()),
                script_name=script_name,
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
