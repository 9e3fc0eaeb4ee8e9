"""The completion of ids from the server (`falcon completion`, `cli.completion`).

`complete_ids` asks the list endpoint with a short timeout and returns nothing on any failure,
so a slow or unreachable server, or a missing login, never breaks the shell line. No click
command or option lives here: `cli.options` calls it from its id types.
"""
from __future__ import annotations

import rich_click as click

COMPLETION_TIMEOUT = 1.0  # seconds: a Tab press must not hang on a slow server
COMPLETION_LIMIT = 50  # newest ids offered
EXTRA_DIGITS = 2  # `12<TAB>` also looks up 120-129 and 1200-1299 by id (111 ids at most)


def request(ctx: click.Context, path: str, params: dict | None = None):
    """GET `path` with the command's server and cached login, `COMPLETION_TIMEOUT` at most.

    Raises:
        Exception: any failure; the callers turn it into no completions.
    """
    from .client import FalconClient
    from .env import Environment
    from .servers import resolve_server
    from .token_cache import CredentialStore, normalize_server, session_token_provider

    env = ctx.find_object(Environment) or Environment()
    server = ctx.params.get("server")
    if not server:
        server_param = next((p for p in ctx.command.params if p.name == "server"), None)
        server = resolve_server(ctx, server_param, None) if server_param else None
    server = normalize_server(server or "")
    provider = session_token_provider(CredentialStore(env.credentials_dir), server,
                                      clock=env.clock)
    with FalconClient(server, token_provider=provider, timeout=COMPLETION_TIMEOUT,
                      transport=env.transport) as client:
        return client.request("GET", path, params=params)


def _rows(page) -> list[dict]:
    items = page.get("results", []) if isinstance(page, dict) else page
    return [item for item in items if isinstance(item, dict)]


def prefix_ids(prefix: str, max_id: int) -> list[int]:
    """The ids that extend `prefix` by at most `EXTRA_DIGITS` digits (`12`: 12, 120-129,
    1200-1299): looked up by primary key, so `exp get 12<TAB>` finds them however old they
    are; [] when `prefix` is not a number without a leading zero."""
    if not (prefix.isascii() and prefix.isdigit()) or prefix.startswith("0"):
        return []
    ids = []
    for extra in range(EXTRA_DIGITS + 1):
        first = int(prefix) * 10**extra
        ids += [i for i in range(first, first + 10**extra) if i <= max_id]
    return ids


def complete_ids(ctx: click.Context, path: str, incomplete: str, *,
                 max_id: int | None = None) -> list:
    """Return `CompletionItem`s for the ids starting with `incomplete`, each with its name as
    help; [] on any failure (no login, no server).

    Offered: the newest `COMPLETION_LIMIT` rows of the list at `path` whose id starts with
    `incomplete`, and for numeric ids (`max_id` given: the largest) also every id of at most `EXTRA_DIGITS` more digits
    than typed (one `?id=` lookup by primary key; the API has no id-prefix filter, and a
    range scan per Tab press is not worth adding). Newest first.
    """
    from click.shell_completion import CompletionItem

    numeric = max_id is not None
    try:
        rows = _rows(request(ctx, path, {"page_size": COMPLETION_LIMIT}))
        wanted = prefix_ids(incomplete, max_id) if numeric else []
        if wanted:
            rows += _rows(request(ctx, path, {"id": ",".join(map(str, wanted)),
                                               "page_size": len(wanted)}))
        found = {str(row["id"]): row for row in rows
                 if str(row.get("id", "")).startswith(incomplete)}
        order = sorted(found, key=lambda i: (-int(i), i)) if numeric else list(found)
        return [CompletionItem(i, help=str(found[i].get("name") or "")) for i in order]
    except Exception:  # noqa: BLE001 -- completion fails silently, by design
        return []
