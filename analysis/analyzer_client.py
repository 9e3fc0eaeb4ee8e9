"""The API server's client of the analyzer controller's AnalyzerService (docs/analyzer.md).

The API server asks the controller for what has a side effect there (create, cancel, delete an
analysis; its live log) or is its own data (the plugin catalog). Calls go to
`settings.FALCON_ANALYZER_TARGET` with `authorization: Bearer <FALCON_ANALYZER_TOKEN>`, each
with a deadline (`CALL_TIMEOUT_SECONDS`) and `wait_for_ready=False`, so a controller that is down
answers at once instead of holding an HTTP request. One channel is kept per endpoint and
rebuilt when the setting changes.

Several replicas of the controller run; only the Lease holder acts, the others answer
UNAVAILABLE "not the leader" (docs/decisions.md#dec-analyzer-leader). The target is a
comma-separated list of endpoints, tried starting with the endpoint that answered last,
`max(2, len(endpoints))` tries in all. A `dns:///` endpoint that resolves to every replica (a
headless Service) is balanced round-robin, so its second try reaches another replica.

A try moves on to the next endpoint when it meets UNAVAILABLE (a follower, or a replica that
is down: nothing was done) or DEADLINE_EXCEEDED after `ATTEMPT_TIMEOUT_SECONDS` (a replica
that accepts the connection but does not answer: frozen, SIGSTOPped, wedged). The whole call
stays within `CALL_TIMEOUT_SECONDS`: each try but the last gets at most the attempt timeout,
the last gets what is left. Moving on after a deadline is safe because every call is
idempotent: CreateAnalysis carries an `analysis_id` chosen here, once per create, so the
frozen replica waking up (or the next one, if the frozen one wrote before it froze) finds the
record and no second analysis is made (docs/decisions.md#dec-sec-analyzer-deadline); cancel is
OK when terminal, delete's NotFound means "gone already" to the HTTP view, the rest are reads.

A failed call raises the domain error the controller sent (`core.grpc.errors`'s reverse
mapping): NotFound, ValidationFailed, Conflict, PermissionDenied, ...; UNAVAILABLE and
DEADLINE_EXCEEDED raise `ServiceUnavailable`, which the HTTP API answers 503 with code
`unavailable`.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import grpc
from django.conf import settings

from core.errors import FalconError
from core.grpc.channel import CHANNEL_OPTIONS, auth_metadata
from core.grpc.errors import ApiCallFailed, ApiUnavailable, Unauthenticated, error_from_rpc_error
from falcon_proto.falcon.v1 import analysis_pb2, analysis_pb2_grpc

from .models import new_analysis_id

# Seconds one call may take over all its tries; the controller answers these from memory or
# one store read (CreateAnalysis: one write).
CALL_TIMEOUT_SECONDS = 10.0
# Seconds one try may take before the next endpoint is tried: a live leader answers in
# milliseconds, so 3 s only costs a frozen replica's time, and leaves the last try 7 s.
ATTEMPT_TIMEOUT_SECONDS = 3.0
# Codes after which nothing was done (UNAVAILABLE) or the call may be repeated elsewhere
# (DEADLINE_EXCEEDED: every AnalyzerService call is idempotent, see above).
MOVE_ON = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
UNAVAILABLE_MESSAGE = ("the analyzer controller is unavailable; try again in a moment (an "
                       "operator can check `manage.py runcontroller analyzer`)")


class ServiceUnavailable(ApiUnavailable):
    """The analyzer controller could not be reached or did not answer in time (HTTP 503,
    code `unavailable`)."""

    http_status = 503


class AnalyzerCallFailed(ApiCallFailed):
    """The analyzer controller refused the API server itself (e.g. its token): HTTP 502."""


# Round-robin over the addresses a target resolves to (gRPC's own load-balancing policy).
ENDPOINT_OPTIONS = (*CHANNEL_OPTIONS, ("grpc.lb_policy_name", "round_robin"))

_lock = threading.Lock()
_channels: dict[str, grpc.Channel] = {}
_setting: str | None = None
_preferred = 0  # index of the endpoint that answered last


def endpoints(setting: str) -> list[str]:
    """The endpoints of a `FALCON_ANALYZER_TARGET` value: comma-separated, blanks dropped.

    Raises:
        ValueError: no endpoint at all (names the setting).
    """
    found = [t.strip() for t in setting.split(",") if t.strip()]
    if not found:
        raise ValueError("FALCON_ANALYZER_TARGET is empty; set host:port of the analyzer "
                         "controller (several, comma-separated, for its replicas).")
    return found


def _stubs() -> list[tuple[int, analysis_pb2_grpc.AnalyzerServiceStub]]:
    """`(index, stub)` per endpoint, in the order to try them: the last good one first."""
    global _setting, _preferred
    setting = settings.FALCON_ANALYZER_TARGET
    with _lock:
        if _setting != setting:
            for channel in _channels.values():
                channel.close()
            _channels.clear()
            _setting, _preferred = setting, 0
        targets = endpoints(setting)
        order = [(_preferred + i) % len(targets) for i in range(max(2, len(targets)))]
        out = []
        for index in order:
            target = targets[index]
            if target not in _channels:
                _channels[target] = grpc.insecure_channel(target, options=ENDPOINT_OPTIONS)
            out.append((index, analysis_pb2_grpc.AnalyzerServiceStub(_channels[target])))
        return out


def close() -> None:
    """Close the process' channels (tests; the next call opens new ones)."""
    global _setting, _preferred
    with _lock:
        for channel in _channels.values():
            channel.close()
        _channels.clear()
        _setting, _preferred = None, 0


def _call(method: str, request: Any) -> Any:
    """Call AnalyzerService `method`; map a failure to a domain error.

    Raises:
        ServiceUnavailable: the controller is down, unreachable or too slow.
        AnalyzerCallFailed: the controller refused the API server's credentials, or failed in
            a way that is no domain error.
        FalconError: the domain error the controller answered (NotFound, ValidationFailed,
            Conflict, PermissionDenied, AlreadyExists, ...).
    """
    global _preferred
    error: Exception | None = None
    stubs = _stubs()
    deadline = time.monotonic() + CALL_TIMEOUT_SECONDS
    for attempt, (index, stub) in enumerate(stubs):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        last = attempt == len(stubs) - 1
        try:
            reply = getattr(stub, method)(
                request, timeout=left if last else min(ATTEMPT_TIMEOUT_SECONDS, left),
                wait_for_ready=False, metadata=auth_metadata(settings.FALCON_ANALYZER_TOKEN))
        except grpc.RpcError as exc:
            error = error_from_rpc_error(exc)
            if exc.code() in MOVE_ON:
                continue  # a follower, a replica that is down, or one that does not answer
            break
        with _lock:
            _preferred = index
        return reply
    if isinstance(error, ApiUnavailable) or getattr(error, "status_code", None) in (
            grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        raise ServiceUnavailable(f"{UNAVAILABLE_MESSAGE} ({method}: {error.message}).",
                                 grpc.StatusCode.UNAVAILABLE)
    if isinstance(error, Unauthenticated):
        raise AnalyzerCallFailed(f"the analyzer controller refused the API server's token "
                                 f"({error.message}); check FALCON_ANALYZER_TOKEN on both.",
                                 error.status_code)
    if isinstance(error, ApiCallFailed):
        raise AnalyzerCallFailed(f"the analyzer controller failed: {error.message}",
                                 error.status_code)
    assert isinstance(error, FalconError)
    raise error


def create_analysis(*, exp_id: int, creator_email: str, analysis_type: str = "online",
                    plugin_name: str = "", command: str = "", script_content: str = "",
                    name: str = "", resources: dict[str, str] | None = None,
                    script_name: str = "",
                    analysis_id: str = "") -> analysis_pb2.CreateAnalysisResp:
    """CreateAnalysis: validate, persist a pending record and queue it (the controller).

    Every try of this one create sends the same `analysis_id`, so a try that met a deadline
    and was sent to another replica cannot make a second analysis.

    Args:
        analysis_id: the new analysis' id; "" makes a fresh one (`an-` and 16 hex digits).
        script_name: the script's file name in the run's work folder (e.g. `run.py`); "" for
            `script` only.
        resources: `{"cpu_request"?, "cpu_limit"?, "memory_request"?, "memory_limit"?}`,
            Kubernetes quantities; kept in the controller's memory only.

    Raises:
        as `_call`.
    """
    request = analysis_pb2.CreateAnalysisReq(
        name=name, exp_id=exp_id, analysis_type=analysis_type, plugin_name=plugin_name,
        command=command, script_content=script_content, script_name=script_name,
        creator_email=creator_email, analysis_id=analysis_id or new_analysis_id(),
        resource_override=analysis_pb2.ResourceOverride(**(resources or {})))
    return _call("CreateAnalysis", request)


def cancel_analysis(*, analysis_id: str, requester_email: str) -> analysis_pb2.CancelAnalysisResp:
    """CancelAnalysis: move to cancelled and stop the run; OK when already terminal.

    Raises:
        as `_call`.
    """
    return _call("CancelAnalysis", analysis_pb2.CancelAnalysisReq(
        analysis_id=analysis_id, requester_email=requester_email))


def delete_analysis(*, analysis_id: str, purge: bool) -> analysis_pb2.DeleteAnalysisResp:
    """DeleteAnalysis: delete a terminal analysis' record; with `purge` its outputs too.

    Raises:
        as `_call`.
    """
    return _call("DeleteAnalysis", analysis_pb2.DeleteAnalysisReq(
        analysis_id=analysis_id, purge_gcs=purge))


def get_analysis_logs(*, analysis_id: str, offset: int = 0,
                      limit_bytes: int = 0) -> analysis_pb2.GetAnalysisLogsResp:
    """GetAnalysisLogs: `output.log` from byte `offset`, at most `limit_bytes` (0: 1 MiB).

    Raises:
        as `_call`.
    """
    return _call("GetAnalysisLogs", analysis_pb2.GetAnalysisLogsReq(
        analysis_id=analysis_id, offset=offset, limit_bytes=limit_bytes))


def list_plugins() -> analysis_pb2.ListPluginsResp:
    """ListPlugins: the controller's catalog.

    Raises:
        as `_call`.
    """
    return _call("ListPlugins", analysis_pb2.ListPluginsReq())


def get_plugin(*, name: str) -> analysis_pb2.Plugin:
    """GetPlugin: one catalog entry.

    Raises:
        NotFound: no plugin has this name.
        as `_call` otherwise.
    """
    return _call("GetPlugin", analysis_pb2.GetPluginReq(name=name))
