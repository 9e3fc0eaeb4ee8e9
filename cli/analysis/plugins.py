"""`falcon plugins`: the analysis plugin catalog (`list`, `get`)."""
from __future__ import annotations

import rich_click as click

from ..errors import CLIError
from ..listing import list_options
from ..exit_codes import ExitCode
from ..options import FalconSubGroup, output_option, pass_env, server_option
from .group import PLUGINS, api_errors


@click.group("plugins", cls=FalconSubGroup)
def plugins_group() -> None:
    """The analysis plugin catalog: what `falcon analysis create --plugin` can run.

    \b
    Examples:
      falcon plugins list
      falcon plugins get bench-summary
    """


@plugins_group.command("list")
@list_options
@server_option
@pass_env
def plugins_list(env, output: str, no_headers: bool, sort_by: str | None, server: str) -> None:
    """List the catalog's plugins; `-o name` prints `plugin/NAME`.

    \b
    Examples:
      falcon plugins list
      falcon plugins list -o json
    """
    from .. import output as out
    from ..client import open_client
    from ..listing import emit_list

    with open_client(env, server) as client, api_errors():
        answer = client.request("GET", PLUGINS)
    plugins = answer.get("plugins") if isinstance(answer, dict) else None
    if not isinstance(plugins, list):
        raise CLIError(f"the server's answer to GET {PLUGINS} holds no list of plugins",
                       ExitCode.ERROR)
    emit_list(env, plugins, output=output, kind="plugin", id_key="name", no_headers=no_headers,
              sort_by=sort_by, table=out.plugin_list_table)


@plugins_group.command("get")
@click.argument("name")
@output_option
@server_option
@pass_env
def plugins_get(env, name: str, output: str, server: str) -> None:
    """Show one plugin: its command, artifact types, resources and timeout.

    \b
    Examples:
      falcon plugins get bench-summary
      falcon plugins get bench-summary -o yaml
    """
    from urllib.parse import quote

    from .. import output as out
    from ..client import open_client

    with open_client(env, server) as client, api_errors(plugin=name):
        plugin = client.request("GET", f"{PLUGINS}/{quote(name, safe='')}")
    out.emit(env, plugin, output, out.plugin_detail)

