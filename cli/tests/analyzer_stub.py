"""A small real HTTP server answering the Data Analyzer's HTTP API as docs/analyzer.md states it
(`/api/v1/analyses`, `/api/v1/plugins`), for the `falcon analysis` and `falcon plugins` tests.

It keeps its state in memory: the experiments that exist (and whether they have finished), the
analyses, each analysis' log bytes and stored result lines, and whether the analyzer controller
is up (when it is not, what needs it answers 503 and records stay readable). Tests change that
state directly, e.g. from the CLI's injected `sleep`.

Analysis ids are string keys in the server's format (`an-` and 16 hex digits, a DNS-1123 label):
`analysis_id(n)` is the id of the n-th analysis the stub stores. They are deterministic but not
in creation order, so nothing can lean on their order: lists are ordered by `created_at`, as the
server orders them.
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TERMINAL = {"succeeded", "failed", "cancelled", "skipped"}
PAGE_SIZE = 2  # small, so that lists of a few analyses already span pages
RESOURCE_KEYS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")
T0 = datetime(2025, 4, 15, 12, 0, 0, tzinfo=timezone.utc)


def analysis_id(n: int) -> str:
    """The id the stub gives its n-th analysis (from 1), e.g. `an-6b86b273ff34fce1`."""
    return "an-" + hashlib.sha256(str(n).encode()).hexdigest()[:16]


PLUGINS = [
    {"name": "trace-summary", "description": "Top operations by time from trace-event JSON",
     "command": 'trace-summary --input "$FALCON_INPUT_DIR" --output "$FALCON_RESULT_FILE"',
     "artifact_types": ["profiling"],
     "resources": {"cpu_request": "500m", "cpu_limit": "2", "memory_request": "512Mi",
                   "memory_limit": "2Gi"}, "timeout_seconds": 1800},
    {"name": "bench-summary", "description": "Count, mean, p50, p99 per benchmark metric",
     "command": 'bench-summary --input "$FALCON_INPUT_DIR" --output "$FALCON_RESULT_FILE"',
     "artifact_types": ["benchmark"],
     "resources": {"cpu_request": "250m", "cpu_limit": "1", "memory_request": "256Mi",
                   "memory_limit": "1Gi"}, "timeout_seconds": 600},
]


@dataclass
class AnalyzerState:
    """What the stub server knows; every field may be changed by a test."""

    finished_exps: set[int] = field(default_factory=lambda: {1, 2})
    running_exps: set[int] = field(default_factory=lambda: {3})
    analyses: dict[str, dict[str, Any]] = field(default_factory=dict)  # by analysis id
    logs: dict[str, bytes] = field(default_factory=dict)
    log_complete: set[str] = field(default_factory=set)
    log_notes: dict[str, str] = field(default_factory=dict)
    log_page_bytes: int = 1 << 20  # the most bytes one logs page answers
    results: dict[str, list[str]] = field(default_factory=dict)  # stored JSONL lines
    created_bodies: dict[str, dict[str, Any]] = field(default_factory=dict)  # what POST got
    truncated: set[str] = field(default_factory=set)
    controller_up: bool = True
    requests: list[tuple[str, str, Any]] = field(default_factory=list)  # method, path+query, body
    count: int = 0  # analyses stored so far
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **fields: Any) -> dict[str, Any]:
        """Store a new analysis (defaults: pending, online, plugin trace-summary) and return it.

        Its id is `analysis_id(n)` for the n-th one stored, unless `id` is given.
        """
        self.count += 1
        created = T0 + timedelta(minutes=self.count)
        analysis = {
            "id": analysis_id(self.count), "name": "", "exp_id": 1, "analysis_type": "online",
            "plugin_name": "trace-summary", "status": "pending", "reason": "",
            "error_message": "", "command": "", "has_script": False, "script_bytes": 0,
            "artifact_id": 10, "result_path": "", "creator": "alice@example.com",
            "attempts": 0, "cluster_object_name": "", "queue_position": 1,
            "created_at": created.isoformat(), "updated_at": created.isoformat(),
            "started_at": None, "finished_at": None,
        }
        analysis.update(fields)
        if analysis["status"] != "pending":
            analysis["queue_position"] = None
        self.analyses[analysis["id"]] = analysis
        return analysis

    def move(self, analysis_id: str, status: str, **fields: Any) -> None:
        """Move an analysis to `status` the way the controller would (times, queue position)."""
        analysis = self.analyses[analysis_id]
        created = datetime.fromisoformat(analysis["created_at"])
        analysis["status"] = status
        if status != "pending":
            analysis["queue_position"] = None
        if status == "running":
            analysis["started_at"] = (created + timedelta(seconds=5)).isoformat()
            analysis["attempts"] += 1
        if status in TERMINAL:
            analysis["started_at"] = analysis["started_at"] or (
                created + timedelta(seconds=5)).isoformat()
            analysis["finished_at"] = (created + timedelta(seconds=65)).isoformat()
        analysis.update(fields)


class _Handler(BaseHTTPRequestHandler):
    state: AnalyzerState  # set on the subclass made per server

    def log_message(self, format, *args):  # noqa: A002 - quiet test output
        pass

    # -- plumbing ---------------------------------------------------------------------------
    def _send(self, status: int, body: Any = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, detail: Any, code: str) -> None:
        body = {"detail": detail, "code": code} if isinstance(detail, str) else {**detail,
                                                                                  "code": code}
        self._send(status, body)

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        body = None
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            body = json.loads(self.rfile.read(length))
        state = self.state
        with state.lock:
            state.requests.append((method, self.path, body))
            if not (self.headers.get("Authorization") or "").startswith("Bearer "):
                return self._error(401, "Authentication credentials were not provided.",
                                   "not_authenticated")
            segments = [s for s in parts.path.split("/") if s]
            if segments[:2] != ["api", "v1"]:
                return self._error(404, "No API endpoint here.", "not_found")
            route = segments[2:]
            try:
                return self._route(method, route, query, body)
            except _Answer as answer:
                return self._send(answer.status, answer.body)

    def do_GET(self):  # noqa: N802
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_DELETE(self):  # noqa: N802
        self._handle("DELETE")

    # -- the API ----------------------------------------------------------------------------
    def _need_controller(self) -> None:
        if not self.state.controller_up:
            raise _Answer(503, {"detail": "The analyzer controller is unavailable.",
                                "code": "unavailable"})

    def _analysis(self, text: str) -> dict[str, Any]:
        analysis = self.state.analyses.get(text)
        if analysis is None:
            raise _Answer(404, {"detail": "No such analysis.", "code": "not_found"})
        return analysis

    def _route(self, method: str, route: list[str], query: dict[str, str], body: Any) -> None:
        state = self.state
        if route == ["analyses"] and method == "POST":
            return self._create(body)
        if route == ["analyses"] and method == "GET":
            return self._list(query)
        if len(route) == 2 and route[0] == "analyses" and method == "GET":
            return self._send(200, self._analysis(route[1]))
        if len(route) == 2 and route[0] == "analyses" and method == "DELETE":
            analysis = self._analysis(route[1])
            self._need_controller()
            if analysis["status"] not in TERMINAL:
                raise _Answer(409, {"detail": f"Analysis {analysis['id']} is "
                                              f"{analysis['status']}; only succeeded, failed, "
                                              "cancelled or skipped analyses can be deleted. "
                                              "Cancel it "
                                              "first.", "code": "conflict"})
            del state.analyses[analysis["id"]]
            if query.get("purge") == "true":
                state.logs.pop(analysis["id"], None)
                state.results.pop(analysis["id"], None)
            return self._send(204)
        if route[:1] == ["analyses"] and route[2:] == ["cancel"] and method == "POST":
            analysis = self._analysis(route[1])
            self._need_controller()
            if analysis["status"] not in TERMINAL:
                state.move(analysis["id"], "cancelled", reason="Cancelled")
            return self._send(200, analysis)
        if route[:1] == ["analyses"] and route[2:] == ["logs"] and method == "GET":
            analysis = self._analysis(route[1])
            self._need_controller()
            data = state.logs.get(analysis["id"], b"")
            offset = int(query.get("offset", "0"))
            limit = min(int(query.get("limit", state.log_page_bytes)), state.log_page_bytes)
            chunk = data[offset:offset + limit]
            while chunk:  # never cut a UTF-8 character in two
                try:
                    text = chunk.decode("utf-8")
                    break
                except UnicodeDecodeError:
                    chunk = chunk[:-1]
            else:
                text = ""
            end = offset + len(chunk)
            complete = analysis["id"] in state.log_complete and end >= len(data)
            return self._send(200, {"content": text, "next_offset": end, "complete": complete,
                                    "note": state.log_notes.get(analysis["id"])})
        if route[:1] == ["analyses"] and route[2:] == ["results"] and method == "GET":
            analysis = self._analysis(route[1])
            lines = state.results.get(analysis["id"])
            if lines is None:
                yet = "" if analysis["status"] in TERMINAL else " yet"
                raise _Answer(404, {"detail": f"Analysis {analysis['id']} has no results{yet}: "
                                              f"{analysis.get('result_path') or ''}result.jsonl "
                                              f"does not exist; it is {analysis['status']}.",
                                    "code": "not_found"})
            name = f"{analysis.get('result_path') or ''}{analysis['plugin_name'] or 'result'}.jsonl"
            records, unparsable = [], []
            for number, line in enumerate(lines, start=1):
                try:
                    value = json.loads(line)
                except ValueError as exc:
                    unparsable.append({"line": number, "error": f"not JSON: {exc.msg} at "
                                                                f"column {exc.colno}"})
                    continue
                if isinstance(value, dict):
                    records.append(value)
                else:
                    unparsable.append({"line": number, "error": "not a JSON object"})
            return self._send(200, {"file": name, "records": records,
                                    "truncated": analysis["id"] in state.truncated,
                                    "unparsable": unparsable})
        if route == ["plugins"] and method == "GET":
            self._need_controller()
            return self._send(200, {"plugins": PLUGINS})
        if len(route) == 2 and route[0] == "plugins" and method == "GET":
            self._need_controller()
            for plugin in PLUGINS:
                if plugin["name"] == route[1]:
                    return self._send(200, plugin)
            raise _Answer(404, {"detail": "No such plugin.", "code": "not_found"})
        raise _Answer(404, {"detail": "No API endpoint here.", "code": "not_found"})

    def _create(self, body: Any) -> None:
        state = self.state
        errors: dict[str, list[str]] = {}
        allowed = {"exp_id", "plugin", "command", "script", "script_name", "name", "resources"}
        for key in set(body) - allowed:
            errors[key] = ["Unknown field."]
        if not isinstance(body.get("exp_id"), int):
            errors["exp_id"] = ["A valid integer is required."]
        if ("plugin" in body) == ("command" in body):
            errors["non_field_errors"] = ["Give exactly one of plugin and command."]
        if "plugin" in body and body["plugin"] not in {p["name"] for p in PLUGINS}:
            errors["plugin"] = [f"No plugin named {body['plugin']!r}."]
        for key, value in (body.get("resources") or {}).items():
            if key not in RESOURCE_KEYS:
                errors[f"resources.{key}"] = ["Unknown field."]
            elif not value[:1].isdigit():
                errors.setdefault("resources", {})[key] = [  # type: ignore[index]
                    f"Not a Kubernetes quantity: {value!r}."]
        if errors:
            raise _Answer(400, {**errors, "code": "invalid"})
        exp_id = body["exp_id"]
        if exp_id not in state.finished_exps | state.running_exps:
            raise _Answer(404, {"detail": f"Experiment {exp_id} does not exist.",
                                "code": "not_found"})
        if exp_id in state.running_exps:
            raise _Answer(409, {"detail": f"Experiment {exp_id} has not finished.",
                                "code": "conflict"})
        self._need_controller()
        script = body.get("script")
        pending = sum(1 for a in state.analyses.values() if a["status"] == "pending")
        analysis = state.add(exp_id=exp_id, plugin_name=body.get("plugin"),
                             command=body.get("command") or "", name=body.get("name") or "",
                             has_script=script is not None,
                             script_bytes=len(script.encode()) if script is not None else 0,
                             queue_position=pending + 1)
        state.created_bodies[analysis["id"]] = body
        self._send(201, analysis)

    def _list(self, query: dict[str, str]) -> None:
        known = {"exp", "status", "analysis_type", "plugin", "cursor"}
        unknown = set(query) - known
        if unknown:
            raise _Answer(400, {"detail": f"Unknown parameters: {sorted(unknown)}.",
                                "code": "invalid"})
        # Newest first, as the server orders them: by (created_at, id), never by id alone.
        rows = sorted(self.state.analyses.values(), key=lambda a: (a["created_at"], a["id"]),
                      reverse=True)
        for key, column in (("exp", "exp_id"), ("status", "status"),
                            ("analysis_type", "analysis_type"), ("plugin", "plugin_name")):
            if key in query:
                rows = [a for a in rows if str(a[column]) == query[key]]
        start = int(query.get("cursor", "0"))
        page = rows[start:start + PAGE_SIZE]
        next_link = None
        if start + PAGE_SIZE < len(rows):
            rest = "&".join(f"{k}={v}" for k, v in query.items() if k != "cursor")
            next_link = (f"http://elsewhere.example/api/v1/analyses?cursor={start + PAGE_SIZE}"
                         + (f"&{rest}" if rest else ""))
        self._send(200, {"next": next_link, "previous": None,
                         "results": page})


class _Answer(Exception):
    def __init__(self, status: int, body: Any):
        super().__init__(status)
        self.status = status
        self.body = body


class AnalyzerStub:
    """The stub server on 127.0.0.1 (a free port), serving from a thread until `close()`."""

    def __init__(self) -> None:
        self.state = AnalyzerState()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
