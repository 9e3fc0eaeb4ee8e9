"""AnalyzerService: the analyzer controller's gRPC server (protos/falcon/v1/analysis.proto).

Every rule of the proto's comments, checked here: a plugin or a command is required; a plugin
must be in the catalog; a script goes with a command (never a plugin); the script is at most 1 MiB of UTF-8, its file name a plain one; resource
override values are Kubernetes quantities above 0 and sensible, each request at most its limit
(the override's or the plugin's: `plugins.rules.resource_problems`), kept in the controller's
memory only (`AnalyzerController.overrides`), never stored; a plugin's command comes from the
catalog. Cancel is idempotent; Delete refuses a
non-terminal record ("cancel it first") and with purge removes `{result_path}` from the store;
GetAnalysisLogs reads the live log.

Auth (docs/decisions.md#dec-analyzer-auth): `TokenInterceptor` accepts only
`authorization: Bearer <FALCON_ANALYZER_TOKEN>` (constant-time comparison); health and
reflection answer without it. Under leader election a follower answers UNAVAILABLE "not the
leader", so the API server retries. Errors of the API server pass through with their code.

Request ids, as rungrpc's (`falcon_site.grpc.interceptors`): `RequestContextInterceptor`, around
every call (refused ones too), serves it under its `x-request-id` (the API server sends the id
of the HTTP request it serves) or a new one, returns that id in the trailing metadata, and
logs one line per call (method, code, milliseconds; reads at DEBUG) with `analysis_id` and
`exp_id`. The call runs inside the analysis' log context, so each line it causes carries them,
and the API server calls it makes carry its request id (`core.grpc.channel.auth_metadata`).
"""
from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from artifacts.store import store_for
from core.observability.context import reset_request_id, set_request_id
from core.errors import FalconError, NotFound
from core.grpc.channel import CHANNEL_OPTIONS, REQUEST_ID_KEY, request_id_from
from core.grpc.errors import (
    ApiCallFailed, abort_with_status, trailing_metadata_for, with_request_id,
)
from core.observability.logs import add_log_ids, log_context
from falcon_proto.falcon.v1 import analysis_pb2, analysis_pb2_grpc
from plugins.rules import (
    lone_script_name_problem,
    plugin_or_command_problem,
    resource_problems,
    script_name_problem,
    script_problem,
    script_with_plugin_problem,
)

from .contract import (
    ANALYSIS_ID_KEY,
    CANCELLED,
    ONLINE,
    PENDING,
    QUEUES,
    TERMINAL,
    AlreadyExists,
    existing_analysis_id,
)
from .controller import RESOURCE_KEYS, AnalyzerController
from .grpc_client import analysis_message

log = logging.getLogger("falcon.controllers.analyzer.server")

SERVICE_NAME = analysis_pb2.DESCRIPTOR.services_by_name["AnalyzerService"].full_name
LOG_DEFAULT_BYTES = 1 << 20
LOG_MAX_BYTES = 4 << 20
UNAUTHENTICATED_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def call_ids(message: Any, exp_of: Callable[[str], int | None] = lambda _id: None
             ) -> dict[str, Any]:
    """The ids a call's request or reply names: `analysis_id` (its own field, or its
    `record`'s) and `exp_id` (its own, its record's, or `exp_of(analysis_id)`).

    Args:
        message: a falcon.v1 request or reply (or anything: unknown fields are skipped).
        exp_of: analysis id -> exp id, for messages without one (`AnalyzerController.exp_of`).
    """
    record = getattr(message, "record", None)
    analysis_id = (getattr(message, "analysis_id", None)
                   or getattr(record, "analysis_id", None) or None)
    exp_id = getattr(message, "exp_id", None) or getattr(record, "exp_id", None) or None
    if exp_id is None and isinstance(analysis_id, str):
        exp_id = exp_of(analysis_id)
    return {key: value for key, value in (("analysis_id", analysis_id), ("exp_id", exp_id))
            if value and isinstance(value, (str, int))}


class RequestContextInterceptor(grpc.ServerInterceptor):
    """Serve every unary call under its request id and the ids of its analysis (see the module
    docstring); health and reflection pass through untouched.

    Args:
        exp_of: analysis id -> exp id, for calls that name only the analysis.
    """

    def __init__(self, exp_of: Callable[[str], int | None] = lambda _id: None):
        self.exp_of = exp_of

    def intercept_service(self, continuation, handler_call_details):
        """Return the method's handler wrapped as described in the class docstring."""
        method = handler_call_details.method or ""
        handler = continuation(handler_call_details)
        if handler is None or method.startswith(UNAUTHENTICATED_PREFIXES) \
                or handler.unary_unary is None:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self._wrap(handler.unary_unary, method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)

    def _wrap(self, behaviour: Callable, method: str) -> Callable:
        def call(request, context):
            started = time.perf_counter()
            request_id = request_id_from(context.invocation_metadata())
            token = set_request_id(request_id)
            # Returned whatever the outcome: errors pass their trailers through with_request_id.
            context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
            reply = None
            try:
                with log_context(**call_ids(request, self.exp_of)):
                    try:
                        reply = behaviour(request, context)
                        return reply
                    finally:  # inside the block: with the ids the call added to it
                        _log_call(method, context, started, call_ids(reply, self.exp_of)
                                  if reply is not None else {})
            finally:
                reset_request_id(token)

        return call


def _log_call(method: str, context, started: float, ids: dict[str, Any]) -> None:
    """One line per call: method, status code, milliseconds; reads at DEBUG."""
    code = getattr(context.code(), "name", None) if hasattr(context, "code") else None
    level = (logging.DEBUG if method.rsplit("/", 1)[-1].startswith(("Get", "List"))
             and code in (None, "OK") else logging.INFO)
    log.log(level, "gRPC %s %s %.1f ms", method, code or "OK",
            (time.perf_counter() - started) * 1000, extra=ids)


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuse every call without `authorization: Bearer <token>` (UNAUTHENTICATED), except
    health checking and reflection.

    Args:
        token: `settings.FALCON_ANALYZER_TOKEN`; empty refuses every call.
    """

    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode() if token else b""

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method or ""
        if method.startswith(UNAUTHENTICATED_PREFIXES):
            return continuation(handler_call_details)
        given = dict(handler_call_details.invocation_metadata or ()).get("authorization", "")
        if self._expected and hmac.compare_digest(str(given).encode(), self._expected):
            return continuation(handler_call_details)

        def deny(request, context):
            abort_with_status(context, grpc.StatusCode.UNAUTHENTICATED, "unauthenticated",
                              "AnalyzerService needs 'authorization: Bearer "
                              "<FALCON_ANALYZER_TOKEN>'")

        return grpc.unary_unary_rpc_method_handler(deny)


def _invalid(context, field: str, message: str):
    _invalid_fields(context, {field: message})


def _invalid_fields(context, problems: dict[str, str]):
    """Abort INVALID_ARGUMENT with one message per field (`falcon-error-fields`)."""
    context.set_trailing_metadata(with_request_id((("falcon-error-code", "invalid"), (
        "falcon-error-fields", json.dumps({field: [message] for field, message in
                                           problems.items()}, ensure_ascii=True)))))
    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                  "; ".join(f"{field}: {message}" for field, message in problems.items()))


def _abort_error(context, exc: FalconError):
    """Pass a domain error on with its code (an API server's error keeps its status)."""
    if isinstance(exc, ApiCallFailed):
        context.abort(exc.status_code, exc.message)
    if isinstance(exc, AlreadyExists):
        context.set_trailing_metadata(with_request_id(((ANALYSIS_ID_KEY,
                                                        existing_analysis_id(exc)),)))
        context.abort(grpc.StatusCode.ALREADY_EXISTS, exc.message)
    context.set_trailing_metadata(with_request_id(trailing_metadata_for(exc)))
    context.abort(getattr(grpc.StatusCode, exc.grpc_status, grpc.StatusCode.INTERNAL),
                  exc.message)


def plugin_message(plugin) -> analysis_pb2.Plugin:
    """The `falcon.v1.Plugin` of a catalog entry."""
    return analysis_pb2.Plugin(
        name=plugin.name, description=plugin.description, command=plugin.command,
        artifact_types=list(plugin.artifact_types), timeout_seconds=plugin.timeout_seconds,
        resources=analysis_pb2.ResourceOverride(
            **{key: getattr(plugin.resources, key) for key in RESOURCE_KEYS}))


class AnalyzerServicer(analysis_pb2_grpc.AnalyzerServiceServicer):
    """AnalyzerService over an `AnalyzerController` (shared state guarded by its lock).

    Args:
        controller: the loop's controller (queues, overrides, backend, record API).
        is_leader: whether this replica may act; False answers UNAVAILABLE "not the leader".
    """

    def __init__(self, controller: AnalyzerController,
                 is_leader: Callable[[], bool] = lambda: True):
        self.controller = controller
        self.is_leader = is_leader

    def _guard(self, context):
        if not self.is_leader():
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          "not the leader: this analyzer replica does not act; retry")

    def CreateAnalysis(self, request, context):
        """Validate, create the pending record through the API server, queue it."""
        self._guard(context)
        c = self.controller
        analysis_type = request.analysis_type or ONLINE
        if analysis_type not in QUEUES:
            _invalid(context, "analysis_type", f"must be one of {', '.join(QUEUES)}")
        if problem := plugin_or_command_problem(request.plugin_name, request.command):
            _invalid(context, "plugin_name", problem)
        command = request.command
        if request.plugin_name:
            plugin = c.catalog.get(request.plugin_name)
            if plugin is None:
                _invalid(context, "plugin_name",
                         f"unknown plugin {request.plugin_name!r}; known plugins: "
                         f"{', '.join(sorted(c.catalog)) or 'none'}")
            if command and command != plugin.command:
                _invalid(context, "command", "a plugin's command comes from the catalog; leave "
                         "the command empty, or drop the plugin")
            command = plugin.command
        # The request's rules, stated once (plugins.rules) for this, the API server and the CLI.
        if problem := (script_with_plugin_problem(request.plugin_name, request.script_content)
                       or script_problem(request.script_content)):
            _invalid(context, "script_content", problem)
        if problem := (script_name_problem(request.script_name)
                       or lone_script_name_problem(request.script_name, request.script_content)):
            _invalid(context, "script_name", problem)
        override = {key: getattr(request.resource_override, key) for key in RESOURCE_KEYS
                    if getattr(request.resource_override, key)}
        defaults = ({key: getattr(plugin.resources, key) for key in RESOURCE_KEYS}
                    if request.plugin_name else {})
        if problems := resource_problems(override, defaults):
            _invalid_fields(context, {f"resource_override.{key}": problem
                                      for key, problem in problems.items()})
        try:
            with c.lock:
                try:
                    record = c.api.create_record(
                        exp_id=request.exp_id, analysis_type=analysis_type,
                        plugin_name=request.plugin_name, command=command,
                        script_content=request.script_content,
                        script_name=request.script_name, creator_email=request.creator_email,
                        name=request.name, result_root=c.config.result_root,
                        analysis_id=request.analysis_id,
                        # The API server refuses an artifact the plugin does not read, before
                        # any record exists or anything is queued.
                        plugin_artifact_types=(plugin.artifact_types if request.plugin_name
                                               else ()))
                except AlreadyExists as exc:
                    record = self._retried_create(request, exc)
                if override:
                    c.overrides[record.analysis_id] = override
                with c.about(record.analysis_id, record.exp_id):
                    log.info("analysis %s: created %s (%s), queued", record.analysis_id,
                             analysis_type, request.plugin_name or "a command")
                    if record.status == PENDING:  # a retry may find it running already
                        c.enqueue(record)
        except FalconError as exc:
            _abort_error(context, exc)
        c.wake.set()
        return analysis_pb2.CreateAnalysisResp(analysis_id=record.analysis_id,
                                               record=analysis_message(record))

    def _retried_create(self, request, exc: AlreadyExists):
        """Return the record an earlier attempt of this very create made, or re-raise `exc`.

        The API server chooses `analysis_id` once per create and sends it on every attempt; an
        attempt that met a deadline on a frozen replica is sent to the next one, and the frozen
        one may have written the record before it froze. The same id, experiment and creator
        mean the same request: answer its record (queued again below: `enqueue` ignores a
        record it knows) instead of an error the user did not cause.

        Raises:
            AlreadyExists: no id was sent, or the record with it is another request's.
        """
        if not request.analysis_id or existing_analysis_id(exc) != request.analysis_id:
            raise exc
        record = self.controller.api.get_record(request.analysis_id)
        if (record.exp_id, record.creator_email) != (request.exp_id, request.creator_email):
            raise exc
        log.info("analysis %s: a retried create; answering the record made first",
                 record.analysis_id)
        return record

    def CancelAnalysis(self, request, context):
        """Move a non-terminal analysis to cancelled and stop its run; OK when terminal."""
        self._guard(context)
        c = self.controller
        try:
            with c.lock, c.about(request.analysis_id):
                record = c.api.get_record(request.analysis_id)
                add_log_ids(exp_id=record.exp_id)
                for _ in range(3):  # the record may move under us (admitted, finished)
                    if record.status in TERMINAL:
                        break
                    try:
                        record = c.api.update_record(
                            record.analysis_id, expected_status=record.status,
                            status=CANCELLED, reason="Cancelled",
                            error_message=f"cancelled by {request.requester_email or 'a user'}")
                    except FalconError as exc:
                        if exc.code != "transition_race":
                            raise
                        record = c.api.get_record(request.analysis_id)
                log.info("analysis %s: cancel asked by %s; now %s", record.analysis_id,
                         request.requester_email or "a user", record.status)
                c.queues.remove(record.analysis_id)
                if record.analysis_id in c.active:
                    c.stopping.add(record.analysis_id)
                    if c.backend.stop(record.analysis_id):
                        c.stop_finished({"stopped": 0})
                else:
                    c.overrides.pop(record.analysis_id, None)
        except FalconError as exc:
            _abort_error(context, exc)
        c.wake.set()  # a slot may be free now: admit the next analysis without waiting a tick
        return analysis_pb2.CancelAnalysisResp(record=analysis_message(record))

    def DeleteAnalysis(self, request, context):
        """Delete a terminal analysis' record; with purge its outputs first."""
        self._guard(context)
        c = self.controller
        purged = 0
        try:
            with c.lock, c.about(request.analysis_id):
                record = c.api.get_record(request.analysis_id)
                add_log_ids(exp_id=record.exp_id)
                if record.status not in TERMINAL:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"analysis {record.analysis_id} is {record.status}: cancel "
                                  "it first")
                if c.backend.observe([record.analysis_id])[record.analysis_id].alive:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"the run of analysis {record.analysis_id} is still "
                                  "stopping; retry in a few seconds")
                if request.purge_gcs and record.result_path:
                    purged = store_for(record.result_path).delete_tree(record.result_path)
                c.api.delete_record(record.analysis_id)
                log.info("analysis %s: deleted%s", record.analysis_id,
                         f", {purged} stored files purged" if request.purge_gcs else "")
        except FalconError as exc:
            _abort_error(context, exc)
        return analysis_pb2.DeleteAnalysisResp(purged_files=purged)

    def GetAnalysisLogs(self, request, context):
        """output.log from `offset`, at most `limit_bytes` (0: 1 MiB; at most 4 MiB)."""
        self._guard(context)
        if request.offset < 0:
            _invalid(context, "offset", "must be >= 0")
        if request.limit_bytes < 0 or request.limit_bytes > LOG_MAX_BYTES:
            _invalid(context, "limit_bytes", f"must be between 0 and {LOG_MAX_BYTES} (4 MiB)")
        limit = request.limit_bytes or LOG_DEFAULT_BYTES
        c = self.controller
        try:
            record = c.api.get_record(request.analysis_id)
        except FalconError as exc:
            _abort_error(context, exc)
        add_log_ids(exp_id=record.exp_id)
        content = c.backend.read_log(record.analysis_id, record.result_path, request.offset,
                                     limit) if record.result_path else b""
        alive = c.backend.observe([record.analysis_id])[record.analysis_id].alive
        complete = record.status in TERMINAL and not alive
        note = ""
        if complete and request.offset == 0 and not content:
            note = ("no log was kept: the run never started or was lost with its output"
                    if record.started_at or record.attempts else "the analysis never ran")
        return analysis_pb2.GetAnalysisLogsResp(content=content,
                                                next_offset=request.offset + len(content),
                                                complete=complete and len(content) < limit,
                                                note=note)

    def ListPlugins(self, request, context):
        """The catalog read at start-up, in file order."""
        return analysis_pb2.ListPluginsResp(
            plugins=[plugin_message(p) for p in self.controller.catalog.values()])

    def GetPlugin(self, request, context):
        """One catalog entry; NOT_FOUND for an unknown name."""
        plugin = self.controller.catalog.get(request.name)
        if plugin is None:
            _abort_error(context, NotFound(
                f"no plugin {request.name!r}; known: {', '.join(sorted(self.controller.catalog))}"))
        return plugin_message(plugin)


@dataclass
class AnalyzerServer:
    """A built gRPC server of AnalyzerService: `port` is the bound port (real for port 0)."""

    server: grpc.Server
    port: int
    health: health.HealthServicer

    def start(self) -> None:
        """Serve, and report SERVING."""
        self.server.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace: float = 2.0) -> None:
        """Report NOT_SERVING, then stop (calls in flight get `grace` seconds)."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()


def build_analyzer_server(addr: str, controller: AnalyzerController, token: str, *,
                          is_leader: Callable[[], bool] = lambda: True,
                          max_workers: int = 8) -> AnalyzerServer:
    """Build (not start) AnalyzerService on `addr` (`host:port`; port 0 picks one).

    Raises:
        ValueError: `token` is empty (set FALCON_ANALYZER_TOKEN).
        RuntimeError: the address cannot be bound.
    """
    if not token:
        raise ValueError("FALCON_ANALYZER_TOKEN is empty: AnalyzerService would refuse every "
                         "call; set it (at least 32 characters, `openssl rand -hex 32`)")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix="analyzer-grpc"),
                         # First: refused calls get a request id and a log line too.
                         interceptors=[RequestContextInterceptor(controller.exp_of),
                                       TokenInterceptor(token)],
                         options=(*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)))
    analysis_pb2_grpc.add_AnalyzerServiceServicer_to_server(
        AnalyzerServicer(controller, is_leader), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME,
                                         reflection.SERVICE_NAME), server)
    try:
        port = server.add_insecure_port(addr)
    except RuntimeError:
        port = 0
    if port == 0:
        raise RuntimeError(f"cannot listen on {addr} (FALCON_ANALYZER_ADDR / --addr): is "
                           "another analyzer running? Choose another address.")
    return AnalyzerServer(server=server, port=port, health=health_servicer)
