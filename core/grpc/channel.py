"""Channel settings shared by the gRPC server and its clients (no Django imports)."""
from __future__ import annotations

# Large enough for a config (< 128 KiB) plus its task specs in every message; list pages stay under
# `core.grpc.paging.PAGE_BYTE_BUDGET`. Server and clients use the same limits.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
)


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Return the call metadata that authenticates with `token` (internal token or user JWT)."""
    return (("authorization", f"Bearer {token}"),)
