"""Channel settings shared by the gRPC server and its clients (no Django imports)."""
from __future__ import annotations

# Large enough for a config (< 128 KiB) plus its task specs in every message; list pages stay under
# `core.grpc.paging.PAGE_BYTE_BUDGET`. Server and clients use the same limits.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
)


# The metadata key naming the calling process (a controller: `exp`, `resources`, `analyzer`).
CLIENT_KEY = "x-falcon-client"
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
    with this process's name when one is set (`set_client_name`)."""
    metadata = (("authorization", f"Bearer {token}"),)
    return metadata + (((CLIENT_KEY, _client_name),) if _client_name else ())
