"""The server interceptor around every Falcon RPC: auth, fresh DB connections, error mapping.

grpcio calls `intercept_service` on its polling thread, before the call is handed to a worker
thread; work that blocks (a JWKS fetch, a user lookup, the ORM) or that must run in the worker's
thread (Django's per-thread connections, the principal's context variable) therefore runs in a
wrapper around the method's behaviour, which grpcio runs on the worker.
"""
from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import grpc
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError, close_old_connections

from core.observability.context import reset_actor, reset_request_id, set_actor, set_request_id
from core.database.db import is_unavailable
from core.errors import FalconError
from core.observability.logs import log_context

from accounts.verifier import KeysUnavailable

from accounts.grpc_auth import (
    AuthenticationFailed, authenticate, authorize, reset_principal, set_principal,
)
from core.grpc.errors import (
    INTERNAL_CODE, UNAUTHENTICATED_CODE, UNAVAILABLE_CODE, abort_with_error, abort_with_status,
)

log = logging.getLogger(__name__)
calls = logging.getLogger("falcon.grpc")
# The request field holding the id of what a service's RPCs are about (core.observability.logs.CONTEXT_KEYS).
SERVICE_IDS = {"ExperimentService": ("id", "exp_id"), "JobService": ("id", "job_id"),
               "ArtifactService": ("id", "artifact_id"),
               "AnalysisRecordService": ("analysis_id", "analysis_id"),
               "HistoryService": ("exp_id", "exp_id")}


def call_ids(method: str, request: Any) -> dict[str, Any]:
    """The ids a call's log line carries: the request's id field for its service, if set."""
    service = method.rsplit("/", 2)[-2].rsplit(".", 1)[-1] if method.count("/") >= 2 else ""
    field, key = SERVICE_IDS.get(service, (None, None))
    value = getattr(request, field, None) if field else None
    ids = {key: value} if value else {}
    exp_id = getattr(request, "exp_id", None)
    if exp_id and isinstance(exp_id, int) and key != "exp_id":
        ids["exp_id"] = exp_id
    return ids


def _log_call(method: str, request: Any, context: grpc.ServicerContext, started: float) -> None:
    """One line per call: method, status code, milliseconds; writes at INFO, reads at DEBUG."""
    code = context.code() if hasattr(context, "code") else None
    name = getattr(code, "name", None) or "OK"
    rpc = method.rsplit("/", 1)[-1]
    level = (logging.DEBUG if rpc.startswith(("Get", "List")) and name == "OK"
             else logging.INFO)
    seconds = time.perf_counter() - started
    calls.log(level, "gRPC %s %s %.1f ms", method, name, seconds * 1000,
              extra=call_ids(method, request))
    from core.observability.metrics import observe_grpc

    observe_grpc(method if method in served_methods() else UNKNOWN_METHOD, name, seconds)


# The metrics' label of a method no falcon.v1 service defines.
UNKNOWN_METHOD = "unknown"


@functools.cache
def served_methods() -> frozenset[str]:
    """Every `/falcon.v1.Service/Rpc` the API server registers (`services.SERVICE_NAMES`, read
    from the protos): the closed set of the `method` label of `falcon_grpc_calls_total`;
    anything else counts as `unknown`."""
    from google.protobuf import descriptor_pool

    from .services import SERVICE_NAMES

    pool = descriptor_pool.Default()
    return frozenset(f"/{name}/{rpc.name}" for name in SERVICE_NAMES
                     for rpc in pool.FindServiceByName(name).methods)

# Called without credentials: load balancers and `grpc_health_probe` know no token, and
# reflection only describes the API (grpcurl, debugging).
UNAUTHENTICATED_PREFIXES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


class FalconServerInterceptor(grpc.ServerInterceptor):
    """Authenticate, use fresh database connections and map domain errors, around each call.

    For every method except health and reflection (which pass through untouched):

    1. `django.db.close_old_connections()`, so the call reads fresh data on a usable connection
       (cluster-behaviours.md#cb-17), and again after the call, so a worker thread keeps no
       stale one;
    2. `accounts.grpc_auth.authenticate` on the metadata: UNAUTHENTICATED (trailer code
       `unauthenticated`) when it fails, PERMISSION_DENIED for a service token operators have
       not allowed; the principal is current during the call;
    3. the servicer; a `FalconError` it raises ends the call with
       `core.grpc.errors.abort_with_error` (the one mapping), a database
       `OperationalError` that retrying can cure (lock wait timeout, deadlock, lost or refused
       connection: `core.database.db.is_unavailable`) with UNAVAILABLE so clients retry, and anything
       else (a query error caused by the input included) with INTERNAL (logged, details not
       leaked).

    Only unary-unary methods are served (every falcon.v1 RPC is); another kind answers
    UNIMPLEMENTED rather than running unauthenticated.
    """

    def intercept_service(self, continuation: Callable, handler_call_details: Any):
        """Return the method's handler, wrapped as described in the class docstring."""
        method = handler_call_details.method or ""
        if method.startswith(UNAUTHENTICATED_PREFIXES):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        if handler.request_streaming or handler.response_streaming:
            return grpc.unary_unary_rpc_method_handler(_refuse_streaming)
        return grpc.unary_unary_rpc_method_handler(
            _wrap(handler.unary_unary, method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _refuse_streaming(request: Any, context: grpc.ServicerContext) -> None:
    context.abort(grpc.StatusCode.UNIMPLEMENTED, "streaming methods are not served")


def _actor_label(principal: Any, context: grpc.ServicerContext) -> str:
    """The principal's label; for a service, with the calling process it names in
    `x-falcon-client` (`internal service (exp)`): which controller acted. A user's label is
    never changed."""
    from core.grpc.channel import CLIENT_KEY

    if principal.kind != "service":
        return principal.name
    client = next((value for key, value in (context.invocation_metadata() or ())
                   if key == CLIENT_KEY), "")
    if isinstance(client, str) and re.fullmatch(r"[a-z][a-z0-9-]{0,62}", client):
        return f"{principal.name} ({client})"
    return principal.name


def _request_id(context: grpc.ServicerContext) -> str:
    """The call's `x-request-id` metadata if valid, else a new id (`core.grpc.channel`)."""
    from core.grpc.channel import request_id_from

    return request_id_from(context.invocation_metadata())


def _wrap(behaviour: Callable, method: str) -> Callable:
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        close_old_connections()
        started = time.perf_counter()
        request_id = _request_id(context)
        id_token = set_request_id(request_id)
        # Returned whatever the outcome (an abort keeps trailing metadata set before it).
        context.set_trailing_metadata((("x-request-id", request_id),))
        try:
            try:
                principal = authenticate(context.invocation_metadata())
            except AuthenticationFailed as exc:
                abort_with_status(context, grpc.StatusCode.UNAUTHENTICATED,
                                  UNAUTHENTICATED_CODE, exc.reason)
            except FalconError as exc:
                # A valid service token operators have not allowed: PERMISSION_DENIED.
                abort_with_error(context, exc)
            except KeysUnavailable as exc:
                # An outage of the identity provider's certs: clients retry, no re-login.
                abort_with_status(context, grpc.StatusCode.UNAVAILABLE, UNAVAILABLE_CODE,
                                  exc.reason)
            except ImproperlyConfigured:
                log.error("auth is misconfigured while authenticating %s", method, exc_info=True)
                abort_with_status(context, grpc.StatusCode.UNAUTHENTICATED,
                                  UNAUTHENTICATED_CODE,
                                  "the server's authentication is misconfigured")
            except OperationalError as exc:
                if not is_unavailable(exc):
                    log.exception("database error while authenticating %s", method)
                    abort_with_status(context, grpc.StatusCode.INTERNAL, INTERNAL_CODE,
                                      "internal error; see the API server's log")
                log.warning("database unavailable while authenticating %s", method,
                            exc_info=True)
                abort_with_status(context, grpc.StatusCode.UNAVAILABLE, UNAVAILABLE_CODE,
                                  "the database is unavailable; retry shortly")
            except Exception:
                # Verification must never surface as UNKNOWN with an exception's text.
                log.exception("unexpected error while authenticating %s", method)
                abort_with_status(context, grpc.StatusCode.UNAUTHENTICATED,
                                  UNAUTHENTICATED_CODE, "the token cannot be verified now; "
                                  "retry shortly")
            try:
                authorize(principal, method)
            except FalconError as exc:
                abort_with_error(context, exc)
            token = set_principal(principal)
            actor_token = set_actor(_actor_label(principal, context))
            try:
                # Every line the call causes carries the ids of what it is about.
                with log_context(**call_ids(method, request)):
                    return behaviour(request, context)
            except FalconError as exc:
                abort_with_error(context, exc)
            except OperationalError as exc:
                if not is_unavailable(exc):
                    # Caused by the query (an input no check bounded): retrying cannot help.
                    log.exception("gRPC %s failed on a database error", method)
                    abort_with_status(context, grpc.StatusCode.INTERNAL, INTERNAL_CODE,
                                      "internal error; see the API server's log")
                log.warning("database unavailable during %s", method, exc_info=True)
                abort_with_status(context, grpc.StatusCode.UNAVAILABLE, UNAVAILABLE_CODE,
                                  "the database is unavailable or busy; retry shortly")
            except Exception:
                log.exception("gRPC %s failed", method)
                abort_with_status(context, grpc.StatusCode.INTERNAL, INTERNAL_CODE,
                                  "internal error; see the API server's log")
            finally:
                reset_actor(actor_token)
                reset_principal(token)
        finally:
            _log_call(method, request, context, started)
            reset_request_id(id_token)
            close_old_connections()

    return call
