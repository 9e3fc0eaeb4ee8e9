"""How large an access token may be, and the header and metadata limits derived from it.

One number decides it, `MAX_TOKEN_BYTES`: the verifier refuses a longer token with a reason
(401 / UNAUTHENTICATED), and every transport in front of it must let a token of that size
through, or a legitimate token with many groups is refused by a layer that cannot say why
(gunicorn's 431, gRPC's RESOURCE_EXHAUSTED). No Django: gunicorn.conf.py, the gRPC server and
the controllers' channels import it.
"""
from __future__ import annotations

# Cloudflare Access tokens are ~1 KB, but each group a user belongs to adds its name to the
# `groups` claim; 16 KiB keeps a few hundred groups while refusing absurd input before parsing.
MAX_TOKEN_BYTES = 16 * 1024

# Room beside the token in the same header line or metadata: the header's name
# (`Cf-Access-Jwt-Assertion: `, 25 bytes), and in `Cookie` the browser's other cookies (Django's
# `csrftoken` and `sessionid`, Cloudflare's `CF_AppSession`, ...). A token just past
# `MAX_TOKEN_BYTES` therefore reaches the verifier and is refused with its reason (401), and
# only a header past this margin is refused by the HTTP server itself (431).
HEADER_MARGIN_BYTES = 4 * 1024

# gunicorn's `limit_request_field_size`: one header line, name and value (gunicorn counts the
# whole line plus CRLF).
MAX_HEADER_FIELD_BYTES = MAX_TOKEN_BYTES + HEADER_MARGIN_BYTES

# gRPC's `grpc.max_metadata_size` (soft) and `grpc.absolute_max_metadata_size` (hard): the whole
# metadata of a call (the token, `x-request-id`, `x-falcon-client`, the 32-byte per-entry
# overhead HPACK counts). grpcio's defaults, 8 KiB soft and 16 KiB hard, refuse a 16 KiB token
# before the verifier sees it; between the two limits a call is refused at random.
MAX_METADATA_BYTES = MAX_TOKEN_BYTES + HEADER_MARGIN_BYTES
