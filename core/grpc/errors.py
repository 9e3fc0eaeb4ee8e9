"""Domain errors <-> gRPC status, mapped ONCE here (decisions.md#dec-errors).

Server side, `abort_with_error` answers a `FalconError` with `grpc.StatusCode[error.grpc_status]`
(NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION, ABORTED for `TransitionRace`, ...) and puts the
error's stable `code` in the trailing metadata, with the field errors of a `ValidationFailed` as
JSON. Client side, `error_from_rpc_error` rebuilds the same `FalconError` subclass from them, so a
controller branches on the exception type exactly as in-process code does.

No Django imports: the controllers' client imports this module.
"""
from __future__ import annotations

import json
from typing import Any

import grpc

from core.errors import (
    AlreadyExists, Conflict, FalconError, NotFound, PermissionDenied, TransitionRace,
    ValidationFailed,
)

ERROR_CODE_KEY = "falcon-error-code"
ERROR_FIELDS_KEY = "falcon-error-fields"
# gRPC carries the status message and metadata in HTTP/2 trailers, which clients cap at 8 KiB by
# default (grpc.max_metadata_size); keep ours well below that so a long validation report never
# turns into a RESOURCE_EXHAUSTED instead of the real error.
MAX_MESSAGE_CHARS = 2000
MAX_FIELDS_JSON_CHARS = 3000

UNAUTHENTICATED_CODE = "unauthenticated"
UNAVAILABLE_CODE = "unavailable"
INTERNAL_CODE = "internal"


class ApiCallFailed(FalconError):
    """A gRPC call failed for a reason that is not a domain error (transport, auth, server bug).

    Attributes:
        status_code: the `grpc.StatusCode` received.
        retryable: whether repeating the call later may succeed (UNAVAILABLE,
            DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED).
    """

    code = "api_call_failed"
    http_status = 502
    grpc_status = "UNKNOWN"
    retryable = False

    def __init__(self, message: str, status_code: grpc.StatusCode = grpc.StatusCode.UNKNOWN):
        super().__init__(message)
        self.status_code = status_code


class Unauthenticated(ApiCallFailed):
    """The server refused the caller's credentials (gRPC UNAUTHENTICATED)."""

    code = UNAUTHENTICATED_CODE
    http_status = 401
    grpc_status = "UNAUTHENTICATED"


class ApiUnavailable(ApiCallFailed):
    """The server or its database could not answer now; retry later."""

    code = UNAVAILABLE_CODE
    http_status = 503
    grpc_status = "UNAVAILABLE"
    retryable = True


def _all_subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


def error_class_for_code(code: str) -> type[FalconError] | None:
    """Return the `FalconError` subclass whose stable `code` is `code`, or None."""
    for cls in _all_subclasses(FalconError):
        if cls.__dict__.get("code") == code:
            return cls
    return None


def status_code_for(error: FalconError) -> grpc.StatusCode:
    """Return the `grpc.StatusCode` named by `error.grpc_status` (INTERNAL if unknown)."""
    return getattr(grpc.StatusCode, error.grpc_status, grpc.StatusCode.INTERNAL)


def trailing_metadata_for(error: FalconError) -> tuple[tuple[str, str], ...]:
    """Return the trailing metadata that lets a client rebuild `error`."""
    metadata = [(ERROR_CODE_KEY, error.code)]
    if isinstance(error, AlreadyExists):
        metadata.extend((key, value) for key, value in error.metadata.items()
                        if key not in (ERROR_CODE_KEY, ERROR_FIELDS_KEY))
    if isinstance(error, ValidationFailed):
        # ensure_ascii: non-`-bin` metadata values must be printable ASCII.
        fields = json.dumps(error.errors, ensure_ascii=True, separators=(",", ":"))
        if len(fields) > MAX_FIELDS_JSON_CHARS:
            kept: dict[str, list[str]] = {}
            for field, messages in error.errors.items():
                trial = json.dumps({**kept, field: messages}, ensure_ascii=True)
                if len(trial) > MAX_FIELDS_JSON_CHARS - 200:
                    break
                kept[field] = messages
            kept["__truncated__"] = [f"{len(error.errors) - len(kept)} more fields"]
            fields = json.dumps(kept, ensure_ascii=True, separators=(",", ":"))
        metadata.append((ERROR_FIELDS_KEY, fields))
    return tuple(metadata)


def with_request_id(metadata: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """`metadata` plus the served request's `x-request-id` (`core.observability.context`), when there is one:
    pass trailing metadata through it, since `set_trailing_metadata` replaces what was set."""
    from core.observability.context import current_request_id

    request_id = current_request_id()
    return metadata + ((("x-request-id", request_id),) if request_id else ())


def abort_with_error(context: grpc.ServicerContext, error: FalconError) -> None:
    """End the call with `error`'s status, message and code; always raises (grpc's abort).

    The trailing metadata also returns the call's `x-request-id`.
    """
    context.set_trailing_metadata(with_request_id(trailing_metadata_for(error)))
    message = error.message
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + " ..."
    context.abort(status_code_for(error), message)


def abort_with_status(context: grpc.ServicerContext, status: grpc.StatusCode, code: str,
                      message: str) -> None:
    """End the call with a transport-level failure (`unauthenticated`, `internal`, ...)."""
    context.set_trailing_metadata(with_request_id(((ERROR_CODE_KEY, code),)))
    context.abort(status, message)


_BY_STATUS: dict[grpc.StatusCode, type[FalconError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.FAILED_PRECONDITION: Conflict,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.ABORTED: TransitionRace,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
}
_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
              grpc.StatusCode.RESOURCE_EXHAUSTED}


def error_from_rpc_error(exc: grpc.RpcError) -> FalconError:
    """Rebuild the domain error a server call ended with.

    Args:
        exc: the `grpc.RpcError` raised by a stub call (also a `grpc.Call`).

    Returns:
        The `FalconError` subclass named by the `falcon-error-code` trailer (with the field
        errors of a `ValidationFailed`); without a known code, one chosen by the status code;
        `ApiUnavailable` for UNAVAILABLE / DEADLINE_EXCEEDED / RESOURCE_EXHAUSTED, and
        `ApiCallFailed` for anything else.
    """
    status = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    message = (exc.details() if hasattr(exc, "details") else None) or str(status)
    trailers: dict[str, Any] = {}
    if hasattr(exc, "trailing_metadata"):
        trailers = {key: value for key, value in (exc.trailing_metadata() or ())}
    code = trailers.get(ERROR_CODE_KEY)
    cls = error_class_for_code(code) if isinstance(code, str) else None
    if cls is None:
        cls = _BY_STATUS.get(status)
        if cls is None and status == grpc.StatusCode.INVALID_ARGUMENT:
            cls = ValidationFailed
    if cls is not None and issubclass(cls, ValidationFailed):
        try:
            errors = json.loads(trailers.get(ERROR_FIELDS_KEY, ""))
        except ValueError:
            errors = None
        if not isinstance(errors, dict):
            errors = {"detail": [message]}
        return cls(errors)
    if cls is not None and issubclass(cls, AlreadyExists):
        return cls(message, metadata={
            key: value for key, value in trailers.items()
            if isinstance(value, str) and key.startswith("falcon-")
            and key not in (ERROR_CODE_KEY, ERROR_FIELDS_KEY)})
    if cls is not None and issubclass(cls, ApiCallFailed):
        return cls(message, status)
    if cls is not None:
        return cls(message)
    if status in _RETRYABLE:
        return ApiUnavailable(message, status)
    return ApiCallFailed(message, status)
