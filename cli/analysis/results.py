"""`falcon analysis results`: a run's result records, as tables, JSONL or YAML."""
from __future__ import annotations

from typing import Any

import rich_click as click

from ..errors import CLIError
from ..exit_codes import ExitCode
from ..options import analysis_id_argument, pass_env, server_option
from ..visible import visible
from .group import ANALYSES, analysis_group, api_errors


@analysis_group.command("results")
@analysis_id_argument
@click.option("-o", "--output", "output", type=click.Choice(("table", "json", "yaml")),
              default="table", show_default=True,
              help="table for people; json prints the results file's JSONL, one object a line "
                   "(unlike other commands' indented JSON: it is the stored file); yaml the "
                   "records as one YAML list.")
@server_option
@pass_env
def results(env, analysis_id: str, output: str, server: str) -> None:
    """Show an analysis' results.

    The table lays out a known plugin's records as its own tables, any other as key/value
    tables. `-o json` prints one JSON object per line, compact and in the stored key order (as
    the plugins write them).

    \b
    Examples:
      falcon analysis results an-127d556979606b76
      falcon analysis results an-127d556979606b76 -o json
    """
    from ..client import open_client

    path = f"{ANALYSES}/{analysis_id}/results"
    with open_client(env, server) as client:
        try:
            with api_errors():
                answer = client.request("GET", path)
        except CLIError as exc:
            if exc.status != 404:
                raise
            # Which 404: no such analysis, or no results (yet)?
            with api_errors(analysis_id=analysis_id):
                client.request("GET", f"{ANALYSES}/{analysis_id}")
            # The analysis exists: the server's message says why there are no results.
            message = exc.message.rstrip(".")
            raise CLIError(message[:1].lower() + message[1:], ExitCode.NOT_FOUND,
                           status=404) from None
        plugin_name = None
        if output == "table":
            with api_errors(analysis_id=analysis_id):
                plugin_name = client.request("GET", f"{ANALYSES}/{analysis_id}").get(
                    "plugin_name")
    records = answer.get("records") if isinstance(answer, dict) else None
    if not isinstance(records, list):
        raise CLIError(f"the server's answer to GET {path} holds no list of records",
                       ExitCode.ERROR)
    if output == "json":
        import json

        from ..env import can_encode

        text = "".join(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
                       for record in records)
        if not can_encode(env.out, text):
            text = "".join(json.dumps(record, separators=(",", ":")) + "\n"
                           for record in records)
        env.out.write(text)
        env.out.flush()
    elif output == "yaml":
        from .. import output as out

        out.emit(env, records, "yaml", None)
    else:
        from .. import output as out

        out.result_tables(env.console(),
                          render_tables(plugin_name, records, warn=lambda line: env.print_err(
                              visible(line))))
    unparsable = answer.get("unparsable") or []
    if isinstance(unparsable, list) and unparsable:
        env.print_err(visible(unparsable_line(answer.get("file") or "the results file",
                                              unparsable)))
    if answer.get("truncated"):
        env.print_err(visible(f"note: the results of analysis {analysis_id} are truncated: "
                              f"only the first {len(records)} records of "
                              f"{answer.get('file') or 'the results file'} are shown"))


def unparsable_line(file: str, unparsable: list[Any], shown: int = 5) -> str:
    """One stderr line naming the lines of the results file that could not be read.

    `N lines of FILE could not be read: line 3: not UTF-8; line 7: not JSON: ... at column 2`,
    the first `shown` of them (then `…`).
    """
    items = []
    for item in unparsable[:shown]:
        if isinstance(item, dict):
            items.append(f"line {item.get('line')}: {item.get('error')}")
        else:
            items.append(str(item))
    more = "; …" if len(unparsable) > shown else ""
    count = len(unparsable)
    return (f"note: {count} line{'s' if count != 1 else ''} of {file} could not be read: "
            + "; ".join(items) + more)


def render_tables(plugin_name: str | None, records: list[Any],
                  warn=None) -> list[tuple[str, list[str], list[list[Any]]]]:
    """Lay out result records as `(title, columns, rows)` tables.

    A built-in plugin gets the tables of `plugins.render.tables(plugin_name, records)`; a plugin
    it does not know (it answers `[]`), a command run (`plugin_name` None), or records it cannot
    read (a renderer expecting a field that is missing) get `output.generic_tables`.

    Args:
        plugin_name: the analysis' plugin, or None for a command.
        records: the parsed JSONL records.
        warn: called with one line when the plugin's renderer failed on these records.
    """
    from .. import output as out

    tables: list[tuple[str, list[str], list[list[Any]]]] = []
    if plugin_name:
        from plugins import render

        try:
            tables = [(table.title, list(table.columns), [list(row) for row in table.rows])
                      for table in render.tables(plugin_name, records)]
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            if warn is not None:
                warn(f"note: the {plugin_name} records do not have the shape its tables expect "
                     f"({type(exc).__name__}: {exc}); showing them as key/value tables")
            tables = []
    return tables or out.generic_tables(records)

