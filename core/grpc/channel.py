"""Channel settings shared by the gRPC servers and their clients (no Django imports)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.observability.context import current_request_id, new_request_id
from core.limits.tokens import MAX_METADATA_BYTES

# Large enough for a config (< 128 KiB) plus its task specs in every message; list pages stay under
# `core.grpc.paging.PAGE_BYTE_BUDGET`. Server and clients use the same limits. The metadata limits
# let the verifier's largest token through (`core.limits.tokens`): a server refuses metadata over its
# limit, and a client refuses trailers over its own.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_metadata_size", MAX_METADATA_BYTES),
    ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
)


# The metadata key naming the calling process (a controller: `exp`, `resources`, `analyzer`).
CLIENT_KEY = "x-falcon-client"
# The metadata key of a call's request id: sent by clients, returned in the trailing metadata.
REQUEST_ID_KEY = "x-request-id"
_client_name = ""


def set_client_name(name: str) -> None:
    """Name this process in every call's metadata (`CLIENT_KEY`); `runcontroller` sets it.

    The API server adds it to a service principal's label in the transition history
    (`internal service (exp)`), so the history says which controller acted.
    """
    global _client_name
    _client_name = name


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Return the call metadata that authenticates with `token` (internal token or user JWT),
    with this process's name when one is set (`set_client_name`), and the id of the request
    being served when there is one (`core.observability.context`): a call made while serving a request (the
    API server calling AnalyzerService for an HTTP request, the analyzer controller calling the
    API server for an AnalyzerService call) is served, and logged, under the same id."""
    metadata = (("authorization", f"Bearer {token}"),)
    if _client_name:
        metadata += ((CLIENT_KEY, _client_name),)
    request_id = current_request_id()
    return metadata + (((REQUEST_ID_KEY, request_id),) if request_id else ())


def request_id_from(metadata: Iterable[Any] | None) -> str:
    """The request id of an incoming call: its `x-request-id` metadata when it is a valid one
    (`core.observability.context.REQUEST_ID`), else a new one.

    Args:
        metadata: the call's invocation metadata, `(key, value)` pairs (grpcio's
            `context.invocation_metadata()`), or None.
    """
    incoming = next((value for key, value in (metadata or ()) if key == REQUEST_ID_KEY), None)
    return new_request_id(incoming if isinstance(incoming, str) else None)
