"""`falcon config`: named contexts, as kubectl's `config use-context` / `get-contexts`.

The file and the choice of a command's server are `cli.servers`; this module holds the commands.
"""
from __future__ import annotations

import json
from typing import Any

import rich_click as click

from .errors import CLIError
from .exit_codes import ExitCode
from .options import FalconSubGroup, output_option, pass_env
from .servers import FORMAT_VERSION, check_name, load, save
from .visible import visible

@click.group("config", cls=FalconSubGroup)
def config_group() -> None:
    """Named contexts: which Falcon server commands talk to (as kubectl config).

    The server of a command: its --server, else `falcon --server`, else env FALCON_SERVER, else
    the current context's, else http://127.0.0.1:8000. Kept in `<config dir>/config.json`
    (0600; the folder 0700).

    \b
    Examples:
      falcon config set-context prod --server https://falcon.example.com
      falcon config use-context prod
      falcon config get-contexts
      falcon config current-context
      falcon config rename-context prod production
      falcon config delete-context staging
    """


def _require(data: dict[str, Any], name: str) -> None:
    """Refuse (exit 3) a context name that is not defined, naming the defined ones."""
    if name not in data["contexts"]:
        known = ", ".join(sorted(data["contexts"])) or "none yet"
        raise CLIError(f"no context named {name!r} (defined: {known}); create it with "
                       f"`falcon config set-context {name} --server URL`", ExitCode.NOT_FOUND)


def complete_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """The defined context names starting with `incomplete` (read from the file, no request);
    nothing when the file cannot be read."""
    from .env import Environment

    env = ctx.find_object(Environment) or Environment()
    try:
        names = load(env.credentials_dir)["contexts"]
    except CLIError:
        return []
    return sorted(name for name in names if name.startswith(incomplete))


@config_group.command("set-context")
@click.argument("name")
@click.option("--server", required=True, metavar="URL", help="The context's Falcon API server.")
@pass_env
def set_context(env, name: str, server: str) -> None:
    """Create or change the context NAME (it does not become current).

    \b
    Examples:
      falcon config set-context prod --server https://falcon.example.com
      falcon config set-context local --server http://127.0.0.1:8000
    """
    from .token_cache import normalize_server

    check_name(name)
    data = load(env.credentials_dir)
    data["contexts"][name] = {"server": normalize_server(server)}
    data["version"] = FORMAT_VERSION
    save(env.credentials_dir, data)
    env.print_out(f"context {name} set to {normalize_server(server)}")


@config_group.command("use-context")
@click.argument("name", shell_complete=complete_names)
@pass_env
def use_context(env, name: str) -> None:
    """Make NAME the current context.

    \b
    Examples:
      falcon config use-context prod
    """
    data = load(env.credentials_dir)
    _require(data, name)
    data["current-context"] = name
    save(env.credentials_dir, data)
    env.print_out(f"switched to context {name} ({data['contexts'][name]['server']})")
    overriding = env.environ.get("FALCON_SERVER", "").strip()
    if overriding:  # else the switch looks done while every command still goes elsewhere
        env.print_err(f"warning: FALCON_SERVER={visible(overriding)} is set and overrides the context: "
                      "commands talk to it until it is unset (`unset FALCON_SERVER`)")


@config_group.command("delete-context")
@click.argument("name", shell_complete=complete_names)
@pass_env
def delete_context(env, name: str) -> None:
    """Delete the context NAME (its server's cached token stays, keyed by server; `auth
    logout` forgets it). Deleting the current context leaves none current.

    \b
    Examples:
      falcon config delete-context staging
    """
    data = load(env.credentials_dir)
    _require(data, name)
    del data["contexts"][name]
    was_current = data.get("current-context") == name
    if was_current:
        data["current-context"] = None
    save(env.credentials_dir, data)
    env.print_out(f"deleted context {name}")
    if was_current:
        env.print_err("warning: it was the current context; none is current now (`falcon config "
                      "use-context NAME` chooses one)")


@config_group.command("rename-context")
@click.argument("old", metavar="OLD", shell_complete=complete_names)
@click.argument("new", metavar="NEW")
@pass_env
def rename_context(env, old: str, new: str) -> None:
    """Rename the context OLD to NEW (still current if it was). NEW must not exist yet.

    \b
    Examples:
      falcon config rename-context prod production
    """
    check_name(new)
    data = load(env.credentials_dir)
    _require(data, old)
    if new in data["contexts"] and new != old:
        raise CLIError(f"a context named {new!r} exists already; delete it first (`falcon "
                       f"config delete-context {new}`) or choose another name",
                       ExitCode.CONFLICT)
    data["contexts"] = {new if name == old else name: context
                        for name, context in data["contexts"].items()}
    if data.get("current-context") == old:
        data["current-context"] = new
    save(env.credentials_dir, data)
    env.print_out(f"context {old} renamed to {new}")


@config_group.command("get-contexts")
@output_option
@pass_env
def get_contexts(env, output: str) -> None:
    """List the contexts; `*` marks the current one.

    \b
    Examples:
      falcon config get-contexts
      falcon config get-contexts -o json
    """
    data = load(env.credentials_dir)
    current = data.get("current-context")
    rows = [{"name": name, "server": c["server"], "current": name == current}
            for name, c in sorted(data["contexts"].items())]
    if output == "json":
        env.print_out(json.dumps(rows, indent=2))
    elif output == "yaml":
        import yaml

        env.print_out(yaml.safe_dump(rows, sort_keys=False).rstrip("\n") if rows else "[]")
    else:
        width = max([len("NAME")] + [len(r["name"]) for r in rows])
        lines = [f"CURRENT   {'NAME':<{width}}   SERVER"]
        lines += [f"{'*' if r['current'] else ' ':<9} {r['name']:<{width}}   {r['server']}"
                  for r in rows]
        env.print_out("\n".join(lines))


@config_group.command("current-context")
@pass_env
def current_context(env) -> None:
    """Print the current context's name (exit 3 when none is set).

    \b
    Examples:
      falcon config current-context
    """
    name = load(env.credentials_dir).get("current-context")
    if not name:
        raise CLIError("no current context is set; run `falcon config use-context NAME`",
                       ExitCode.NOT_FOUND)
    env.print_out(name)
