"""Domain errors with stable codes, mapped once to HTTP and once to gRPC.

Services raise these; `core.http.drf.exception_handler` maps them to HTTP status codes and the
gRPC layer maps them to `grpc.StatusCode`s. Clients branch on `code`, never on the text
(decisions.md#dec-errors).
"""
from __future__ import annotations


class FalconError(Exception):
    """Base of every domain error.

    Attributes:
        code: stable machine-readable code (`not_found`, `conflict`, ...).
        http_status: the HTTP status code the REST API answers with.
        grpc_status: the name of the `grpc.StatusCode` the gRPC API answers with.
    """

    code = "error"
    http_status = 500
    grpc_status = "INTERNAL"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class NotFound(FalconError):
    """The entity with the given id does not exist."""

    code = "not_found"
    http_status = 404
    grpc_status = "NOT_FOUND"


class Conflict(FalconError):
    """The request is valid but the entity's current state does not allow it."""

    code = "conflict"
    http_status = 409
    grpc_status = "FAILED_PRECONDITION"


class InvalidTransition(Conflict):
    """A state machine refuses the requested transition (docs/architecture.md, State machines)."""

    code = "invalid_transition"


class TransitionRace(Conflict):
    """Another writer changed the row between the caller's read and its guarded update."""

    code = "transition_race"
    grpc_status = "ABORTED"


class AlreadyExists(Conflict):
    """The entity to create exists already (a retried create, or a unique key taken).

    HTTP 409; gRPC ALREADY_EXISTS. `metadata` names the existing entity for clients, sent as
    trailing metadata over gRPC (e.g. `{"falcon-analysis-id": "an-0f3c..."}`: the analyzer
    design's duplicate offline analysis).

    Args:
        message: what exists and what to do instead.
        metadata: `{key: value}`, keys lower-case and starting with `falcon-`, values ASCII.
    """

    code = "already_exists"
    grpc_status = "ALREADY_EXISTS"

    def __init__(self, message: str, *, metadata: dict[str, str] | None = None):
        super().__init__(message)
        self.metadata = dict(metadata or {})


class PermissionDenied(FalconError):
    """The authenticated principal may not do this."""

    code = "permission_denied"
    http_status = 403
    grpc_status = "PERMISSION_DENIED"


class ValidationFailed(FalconError):
    """Input is malformed; `errors` maps each field path to what is wrong and how to fix it.

    Args:
        errors: `{"role_to_task_spec.main.replica": ["must be an integer >= 1, got 0"]}`.
    """

    code = "invalid"
    http_status = 400
    grpc_status = "INVALID_ARGUMENT"

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__(
            "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items())
        )


class PayloadTooLarge(ValidationFailed):
    """A field is larger than its limit (for example the config over 128 KiB)."""

    code = "too_large"
    http_status = 413
    grpc_status = "INVALID_ARGUMENT"
