"""`falcon completion bash|zsh|fish`, and the completion of ids from the server.

The scripts are click's own (`click.shell_completion`): the shell calls `falcon` back with
`_FALCON_COMPLETE=<shell>_complete` set, and click completes commands, options and choices (e.g.
`--status` values). Experiment and analysis ids come from the server: `complete_ids` asks the
list endpoint with a short timeout and returns nothing on any failure, so a slow or unreachable
server, or a missing login, never breaks the shell line (`cli.completers`).
"""
from __future__ import annotations

import rich_click as click

from .completers import COMPLETION_LIMIT, EXTRA_DIGITS, request
from .options import SingleValueCommand, pass_env

__all__ = ["COMPLETION_LIMIT", "EXTRA_DIGITS", "complete_roles", "completion_command"]

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_FALCON_COMPLETE"


def complete_roles(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """The roles of the experiment already on the line (`exp logs 12 --role <TAB>`), from one
    GetExp; [] without an id or on any failure."""
    from .options import ExpIdType

    exp_id = ctx.params.get("exp_id")
    for arg in ctx.args if exp_id is None else ():
        # Completing an option's value, click leaves the positional id unparsed in ctx.args.
        try:
            exp_id = ExpIdType().convert(arg, None, None)
            break
        except click.BadParameter:
            continue
    if not isinstance(exp_id, int):
        return []
    try:
        exp = request(ctx, f"/api/v1/exps/{exp_id}")
        roles = sorted({str(job.get("role")) for job in exp.get("jobs") or []})
    except Exception:  # noqa: BLE001 -- completion fails silently, by design
        return []
    return [role for role in roles if role.startswith(incomplete)]


@click.command("completion", cls=SingleValueCommand)
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
