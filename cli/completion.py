"""`falcon completion bash|zsh|fish`, and the completion of ids from the server.

The scripts are click's own (`click.shell_completion`): the shell calls `falcon` back with
`_FALCON_COMPLETE=<shell>_complete` set, and click completes commands, options and choices (e.g.
`--status` values). Experiment and analysis ids come from the server: `complete_ids` asks the
list endpoint with a short timeout and returns nothing on any failure, so a slow or unreachable
server, or a missing login, never breaks the shell line.
"""
from __future__ import annotations

import rich_click as click

from .options import pass_env

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_FALCON_COMPLETE"
COMPLETION_TIMEOUT = 1.0  # seconds: a Tab press must not hang on a slow server
COMPLETION_LIMIT = 50  # ids offered, newest first


def complete_ids(ctx: click.Context, path: str, incomplete: str) -> list:
    """Return `CompletionItem`s for the ids (newest first) of the list at `path` that start with
    `incomplete`, each with its name as help; [] on any failure (no login, no server)."""
    from click.shell_completion import CompletionItem

    try:
        from .client import FalconClient
        from .env import Environment
        from .options import resolve_server
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
            page = client.request("GET", path, params={"page_size": COMPLETION_LIMIT})
        items = page.get("results", []) if isinstance(page, dict) else page
        return [CompletionItem(str(item["id"]), help=str(item.get("name") or ""))
                for item in items
                if isinstance(item, dict) and str(item.get("id", "")).startswith(incomplete)]
    except Exception:  # noqa: BLE001 -- completion fails silently, by design
        return []


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@pass_env
def completion_command(env, shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish.

    Completes commands, options, status values and (asking the server, 1 s at most)
    experiment and analysis ids.

    \b
    Examples:
      eval "$(falcon completion bash)"                # in ~/.bashrc
      eval "$(falcon completion zsh)"                 # in ~/.zshrc
      falcon completion fish > ~/.config/fish/completions/falcon.fish
    """
    from click.shell_completion import get_completion_class

    from .main import falcon

    cls = get_completion_class(shell)
    env.print_out(cls(falcon, {}, "falcon", COMPLETE_VAR).source())
