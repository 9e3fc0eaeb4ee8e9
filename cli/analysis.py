"""`falcon analysis` and `falcon plugins`: the Data Analyzer's HTTP API (docs/analyzer.md).

Only click is imported at module level; httpx, rich and yaml are imported inside the commands.

The API server keeps the analysis records; what has a side effect on the analyzer controller
(creating, cancelling, deleting, the live log, the plugin catalog) goes through it, and a 503
means the controller is unavailable, while records stay readable.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import rich_click as click

from core.domain.statuses import ANALYSIS_TERMINAL, AnalysisStatus, AnalysisType

from .errors import CLIError, exit_for, run_each
from .listing import emit_objects, get_output_option, list_options
from .exit_codes import ExitCode
from .options import (
    FalconSubGroup,
    ExpIdType,
    analysis_id_argument,
    analysis_ids_argument,
    confirm_delete,
    output_option,
    pass_env,
    server_option,
    yes_option,
)
from .visible import visible

ANALYSES = "/api/v1/analyses"
PLUGINS = "/api/v1/plugins"
STATUSES = tuple(status.value for status in AnalysisStatus)
TYPES = tuple(kind.value for kind in AnalysisType)
DEFAULT_INTERVAL = 2.0  # seconds between polls of `--wait` and `logs --follow`
# Seconds `--wait` and `logs --follow` keep polling a server that stopped answering (a restart).
UNAVAILABLE_GRACE = 60.0
CONTROLLER_UNAVAILABLE = ("the analyzer controller is unavailable; records stay readable "
                          "(falcon analysis list/get)")
RESOURCE_OPTIONS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")


@contextlib.contextmanager
def api_errors(*, analysis_id: str | None = None, plugin: str | None = None) -> Iterator[None]:
    """Reword the server's errors of an analysis or plugins request.

    A 503 becomes `CONTROLLER_UNAVAILABLE` with exit code UNAVAILABLE; a 404 about the analysis
    `analysis_id` (or the plugin `plugin`) becomes `no analysis ID` (`no plugin NAME`) with
    NOT_FOUND. Anything else (400 field errors, 401, 409, ...) passes through as the client made
    it (`cli.client.error_from_response`).

    Args:
        analysis_id: the analysis the request is about, or None.
        plugin: the plugin the request is about, or None.

    Raises:
        CLIError: the reworded error.
    """
    try:
        yield
    except CLIError as exc:
        if exc.status == 503:
            raise CLIError(CONTROLLER_UNAVAILABLE, ExitCode.UNAVAILABLE, status=503) from None
        if exc.status == 404 and analysis_id is not None:
            raise CLIError(f"no analysis {analysis_id} (see `falcon analysis list`)",
                           ExitCode.NOT_FOUND, status=404) from None
        if exc.status == 404 and plugin is not None:
            raise CLIError(f"no plugin {plugin!r} (see `falcon plugins list`)",
                           ExitCode.NOT_FOUND, status=404) from None
        raise


def read_script_file(path: str) -> str:
    """Read the `--script` file as UTF-8 text, byte for byte.

    Args:
        path: the file as the user gave it.

    Returns:
        The script's text, sent as the analysis' `script`.

    Raises:
        CLIError(USAGE): the file is missing, not a regular file, over `SCRIPT_MAX_BYTES`
            (`plugins.rules`, the server's own limit: 1 MiB; the message names its size and
            the limit), unreadable or not UTF-8.
    """
    # Here, not at the top: the rules module loads the Kubernetes quantity parser.
    from plugins.rules import SCRIPT_MAX_BYTES

    from .files import decode_utf8, read_limited

    what = "script file"
    data = read_limited(path, what, SCRIPT_MAX_BYTES, "--script accepts a file of")
    return decode_utf8(data, path, what)


# --- falcon analysis ---------------------------------------------------------------------------

@click.group("analysis", cls=FalconSubGroup)
def analysis_group() -> None:
    """Run plugins or commands over an experiment's artifact, and read their results.

    An analysis runs one plugin (`falcon plugins list`) or your own command (with an optional
    script) over a finished experiment's artifact, and writes its results and its log.

    \b
    Examples:
      falcon analysis create --exp 12 --plugin bench-summary --wait
      falcon analysis list --exp 12
      falcon analysis results an-127d556979606b76 -o json
    """


@analysis_group.command("create")
@click.option("--exp", "exp_id", type=ExpIdType(), required=True, metavar="ID",
              help="The finished experiment whose artifact is analysed.")
@click.option("--plugin", help="Run this catalog plugin (see `falcon plugins list`). "
                               "Exclusive with --command.")
@click.option("--command", help="Run this shell command instead of a plugin. Exclusive with "
                                "--plugin.")
@click.option("--script", "script_file", metavar="FILE",
              help="A UTF-8 file (at most 1 MiB) sent along with --command for it to run; the "
                   "run saves it under its base name in the work folder (run.py for "
                   "dir/run.py), and as $FALCON_SCRIPT.")
@click.option("--name", help="A name for the analysis.")
@click.option("--cpu-request", metavar="Q", help="CPU request, a Kubernetes quantity (500m, 2).")
@click.option("--cpu-limit", metavar="Q", help="CPU limit, a Kubernetes quantity.")
@click.option("--memory-request", metavar="Q",
              help="Memory request, a Kubernetes quantity (512Mi, 2Gi).")
@click.option("--memory-limit", metavar="Q", help="Memory limit, a Kubernetes quantity.")
@click.option("--wait", is_flag=True,
              help="Wait until the analysis ends; exit code 11 when it failed, was cancelled or skipped.")
@click.option("--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="With --wait: give up after this many seconds (exit code 7).")
@output_option
@server_option
@pass_env
def create(env, exp_id: int, plugin: str | None, command: str | None, script_file: str | None,
           name: str | None, cpu_request: str | None, cpu_limit: str | None,
           memory_request: str | None, memory_limit: str | None, wait: bool,
           timeout: float | None, output: str, server: str) -> None:
    """Create an online analysis of an experiment's artifact (POST /api/v1/analyses).

    Give exactly one of --plugin and --command; --script needs --command.

    \b
    Examples:
      falcon analysis create --exp 12 --plugin bench-summary --wait
      falcon analysis create --exp 12 --command 'python run.py' --script run.py --memory-limit 2Gi
    """
    from . import output as out
    from .client import open_client

    if script_file is not None and command is None:
        raise click.UsageError("--script FILE is run by a --command; give --command CMD too "
                               "(a --plugin takes no script)")
    if (plugin is None) == (command is None):
        which = "both were given" if plugin is not None else "neither was given"
        raise click.UsageError(f"give exactly one of --plugin NAME and --command CMD ({which})")
    if command is not None and not command.strip():
        raise click.UsageError("--command is empty; give the shell command to run (or "
                               "--plugin NAME instead)")
    if plugin is not None and not plugin.strip():
        raise click.UsageError("--plugin is empty; name a catalog plugin (falcon plugins "
                               "list)")
    if timeout is not None and not wait:
        raise click.UsageError("--timeout applies to --wait; add --wait or drop --timeout")

    body: dict[str, Any] = {"exp_id": exp_id}
    if plugin is not None:
        body["plugin"] = plugin
    if command is not None:
        body["command"] = command
    if script_file is not None:
        import os

        body["script"] = read_script_file(script_file)
        # The run saves the script under this name too, so `--command 'python run.py'` works.
        body["script_name"] = os.path.basename(script_file)
    if name is not None:
        body["name"] = name
    given = dict(zip(RESOURCE_OPTIONS, (cpu_request, cpu_limit, memory_request, memory_limit)))
    resources = {key: value for key, value in given.items() if value is not None}
    if resources:
        body["resources"] = resources

    with open_client(env, server) as client:
        try:
            with api_errors():
                analysis = client.request("POST", ANALYSES, json=body)
        except CLIError as exc:
            if exc.status == 404:
                raise CLIError(f"no experiment {exp_id} ({exc.message})", ExitCode.NOT_FOUND,
                               status=404) from None
            raise
        if not wait:
            out.emit(env, analysis, output, out.analysis_detail)
            return
        if output == "table":
            env.print_out(visible(f"created analysis {analysis['id']}"
                                  + (f" ({analysis['name']})" if analysis.get("name") else "")))
        wait_for(env, client, analysis["id"], interval=DEFAULT_INTERVAL, timeout=timeout,
                 output=output)


def _progress_line(analysis: dict[str, Any], elapsed: float) -> str:
    from .output import duration, status_word

    line = (f"[{duration(elapsed)}] analysis {analysis.get('id')} "
            f"{status_word(analysis.get('status'))}")
    if analysis.get("status") == AnalysisStatus.PENDING:
        position = analysis.get("queue_position")
        line += f" (queue position {position if position is not None else 'unknown'})"
    return visible(line)


def wait_for(env, client, analysis_id: str, *, interval: float, timeout: float | None,
             output: str) -> dict[str, Any]:
    """Poll GET /api/v1/analyses/{id} until the analysis is succeeded, failed, cancelled or skipped.

    One line is printed per change of status or queue position (`[12s] analysis
    an-127d556979606b76 pending (queue position 3)`), on stdout for `table` and on stderr for
    `json`/`yaml`; then the final analysis is printed in the chosen format.

    Args:
        env: the run's `Environment` (its `sleep` and `monotonic` pace the loop).
        client: a `FalconClient` for the server.
        analysis_id: the analysis' id.
        interval: seconds between polls.
        timeout: seconds before giving up, or None to wait forever.
        output: `table`, `json` or `yaml`.

    Returns:
        The final analysis, when it succeeded.

    Raises:
        CLIError: ANALYSIS_FAILED when it ended failed, cancelled or skipped, TIMEOUT when `timeout`
            elapses, UNAVAILABLE when the server stays unreachable for `UNAVAILABLE_GRACE`
            seconds, INTERRUPTED on Ctrl-C (the analysis goes on), or the request's error.
    """
    from . import output as out

    stream = env.out if output == "table" else env.err
    start = env.monotonic()
    down_since: float | None = None
    last = None
    with api_errors(analysis_id=analysis_id):
        analysis = client.request("GET", f"{ANALYSES}/{analysis_id}")
    try:
        while True:
            seen = (analysis.get("status"), analysis.get("queue_position"))
            if seen != last:
                last = seen
                stream.write(_progress_line(analysis, env.monotonic() - start) + "\n")
                stream.flush()
            if analysis.get("status") in ANALYSIS_TERMINAL:
                break
            now = env.monotonic()
            if timeout is not None and now - start >= timeout:
                raise CLIError(f"gave up waiting for analysis {analysis_id} after "
                               f"{out.duration(now - start)}; it is still "
                               f"{analysis.get('status')}", ExitCode.TIMEOUT)
            delay = interval if timeout is None else min(interval, start + timeout - now)
            env.sleep(max(delay, 0.0))
            try:
                with api_errors(analysis_id=analysis_id):
                    analysis = client.request("GET", f"{ANALYSES}/{analysis_id}")
                down_since = None
            except CLIError as exc:
                if exc.code != ExitCode.UNAVAILABLE:
                    raise
                down_since = env.monotonic() if down_since is None else down_since
                if env.monotonic() - down_since > UNAVAILABLE_GRACE:
                    raise
    except KeyboardInterrupt:
        raise CLIError(f"stopped waiting; analysis {analysis_id} is still "
                       f"{analysis.get('status')} (`falcon analysis get {analysis_id}` shows it, "
                       f"`falcon analysis cancel {analysis_id}` stops it)",
                       ExitCode.INTERRUPTED) from None

    out.emit(env, analysis, output, out.analysis_detail)
    status = analysis.get("status")
    if status != AnalysisStatus.SUCCEEDED:
        detail = ": ".join(str(v) for v in (analysis.get("reason"), analysis.get("error_message"))
                           if v)
        from .output import status_word

        raise CLIError(f"analysis {analysis_id} ended {status_word(status)}"
                       + (f" ({detail})" if detail else ""), ExitCode.ANALYSIS_FAILED)
    return analysis


@analysis_group.command("list")
@click.option("--exp", "exp_id", type=ExpIdType(), metavar="ID",
              help="Only analyses of this experiment.")
@click.option("--status", type=click.Choice(STATUSES, case_sensitive=False),
              help="Only analyses in this status.")
@click.option("--type", "analysis_type", type=click.Choice(TYPES, case_sensitive=False),
              help="Only offline (automatic) or online (asked for) analyses.")
@click.option("--plugin", help="Only analyses of this plugin.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="At most this many rows, newest first. Default: every matching row "
                   "(pages are followed), as kubectl and argo list.")
@list_options
@server_option
@pass_env
def list_(env, exp_id: int | None, status: str | None, analysis_type: str | None,
          plugin: str | None, limit: int | None, output: str, no_headers: bool,
          sort_by: str | None, server: str) -> None:
    """List analyses, newest first; `-o name` prints `analysis/ID`.

    \b
    Examples:
      falcon analysis list --exp 12
      falcon analysis list --status failed --type offline -o json
    """
    from . import output as out
    from .client import open_client
    from .listing import emit_list

    params: list[tuple[str, str]] = []
    for key, value in (("exp", exp_id), ("status", status), ("analysis_type", analysis_type),
                       ("plugin", plugin)):
        if value is not None:
            params.append((key, str(value)))
    with open_client(env, server) as client, api_errors():
        analyses = list(client.paginate(ANALYSES, params=params, limit=limit or 10**9))
    emit_list(env, analyses, output=output, kind="analysis", id_key="id",
              no_headers=no_headers, sort_by=sort_by, table=out.analysis_list_table)


@analysis_group.command("get")
@analysis_ids_argument
@get_output_option
@server_option
@pass_env
def get(env, analysis_ids: tuple[str, ...], output: str, server: str) -> None:
    """Show analyses: every field, the queue position while pending, the error when one
    failed. Several ids are shown in turn; one that fails is reported and the others still
    shown (exit code: the first failure's).

    \b
    Examples:
      falcon analysis get an-127d556979606b76
      falcon analysis get an-127d556979606b76 -o yaml
      falcon analysis get an-127d556979606b76 -o jsonpath='{.status}'
      falcon analysis list -o name --exp 12 | xargs falcon analysis get -o json
    """
    from . import output as out
    from .client import open_client

    found: list[dict[str, Any]] = []

    def get_one(analysis_id: str) -> None:
        with api_errors(analysis_id=analysis_id):
            found.append(client.request("GET", f"{ANALYSES}/{analysis_id}"))

    with open_client(env, server) as client:
        failure = run_each(env, _ids(analysis_ids), get_one)
    emit_objects(env, found, output, out.analysis_detail, several=len(analysis_ids) > 1,
                 kind="analysis")
    exit_for(failure)


def _ids(analysis_ids: tuple[str, ...]) -> list[str]:
    """The ids given, each once; a usage error when there are none."""
    if not analysis_ids:
        raise CLIError("give one or more analysis ids (e.g. an-127d556979606b76 or "
                       "analysis/an-127d556979606b76; see `falcon analysis list`)", ExitCode.USAGE)
    return list(dict.fromkeys(analysis_ids))


@analysis_group.command("logs")
@analysis_id_argument
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing the log as it grows, until the analysis has ended.")
@server_option
@pass_env
def logs(env, analysis_id: str, follow: bool, server: str) -> None:
    """Print an analysis' log (its stdout and stderr) as text.

    Without --follow, prints what there is now; with it, keeps polling until the log is
    complete. The log is text: UTF-8, a byte that is not UTF-8 shown as U+FFFD (the store's
    output.log holds the bytes as written). On a terminal, control characters are shown as
    escapes; a pipe gets the text unescaped. A note (the analysis is pending, the log read from
    the store) goes to stderr.

    \b
    Examples:
      falcon analysis logs an-127d556979606b76
      falcon analysis logs an-127d556979606b76 --follow
    """
    from .client import open_client

    with open_client(env, server) as client:
        follow_log(env, client, analysis_id, follow=follow, interval=DEFAULT_INTERVAL)


def follow_log(env, client, analysis_id: str, *, follow: bool, interval: float) -> None:
    """Print the log of `analysis_id` page by page, from byte offset 0.

    Each page is `GET /api/v1/analyses/{id}/logs?offset=N`, answered with `{"content",
    "next_offset", "complete", "note"}`; the next page starts at `next_offset`. Without `follow`,
    pages are read while they bring content; with it, until `complete` is true, sleeping
    `interval` seconds whenever a page brings nothing new. A `note` (e.g. "the analysis is
    pending (queue position 2); its log starts when it runs") is printed on stderr as soon as it
    comes, once while it stays the same.

    Args:
        env: the run's `Environment`.
        client: a `FalconClient`.
        analysis_id: the analysis.
        follow: keep polling until the log is complete.
        interval: seconds between polls that brought nothing.

    Raises:
        CLIError: NOT_FOUND (no such analysis), UNAVAILABLE (503: the controller is down, or
            the server unreachable for `UNAVAILABLE_GRACE` seconds while following),
            INTERRUPTED (Ctrl-C), ERROR (an answer that is not a log page).
    """
    raw = not _is_terminal(env.out)
    offset = 0
    note = None
    down_since: float | None = None
    path = f"{ANALYSES}/{analysis_id}/logs"
    try:
        while True:
            try:
                with api_errors(analysis_id=analysis_id):
                    page = client.request("GET", path, params={"offset": str(offset)})
                down_since = None
            except CLIError as exc:
                if not follow or offset == 0 or exc.code != ExitCode.UNAVAILABLE:
                    raise
                down_since = env.monotonic() if down_since is None else down_since
                if env.monotonic() - down_since > UNAVAILABLE_GRACE:
                    raise
                env.sleep(interval)
                continue
            content, next_offset = _log_page(page, path)
            if content:
                env.out.write(content if raw else visible(content, multiline=True))
                env.out.flush()
            if page.get("note") and page.get("note") != note:
                note = page.get("note")
                env.print_err(visible(f"note: {note}"))  # at once: a follower may wait long
            complete = bool(page.get("complete"))
            advanced = next_offset > offset
            offset = max(offset, next_offset)
            if complete:
                break
            if not follow:
                if not content or not advanced:
                    break
                continue
            if not content:
                env.sleep(interval)
    except KeyboardInterrupt:
        raise CLIError(f"stopped following the log of analysis {analysis_id} (the analysis goes "
                       "on)", ExitCode.INTERRUPTED) from None


def _log_page(page: Any, path: str) -> tuple[str, int]:
    content = page.get("content") if isinstance(page, dict) else None
    next_offset = page.get("next_offset") if isinstance(page, dict) else None
    if (not isinstance(content, str) or isinstance(next_offset, bool)
            or not isinstance(next_offset, int)):
        raise CLIError(f"the server's answer to GET {path} is not a log page", ExitCode.ERROR)
    return content, next_offset


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


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
    from .client import open_client

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

        from .env import can_encode

        text = "".join(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
                       for record in records)
        if not can_encode(env.out, text):
            text = "".join(json.dumps(record, separators=(",", ":")) + "\n"
                           for record in records)
        env.out.write(text)
        env.out.flush()
    elif output == "yaml":
        from . import output as out

        out.emit(env, records, "yaml", None)
    else:
        from . import output as out

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
    from . import output as out

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


@analysis_group.command("cancel")
@analysis_ids_argument
@output_option
@server_option
@pass_env
def cancel(env, analysis_ids: tuple[str, ...], output: str, server: str) -> None:
    """Cancel analyses; one that has already ended is left as it is. Several ids are cancelled
    and reported in turn (exit code: the first failure's).

    \b
    Examples:
      falcon analysis cancel an-127d556979606b76
      falcon analysis cancel an-127d556979606b76 an-5e0c1f2a33b4d6e7
    """
    from . import output as out
    from .client import open_client

    done: list[dict[str, Any]] = []

    def cancel_one(analysis_id: str) -> None:
        with api_errors(analysis_id=analysis_id):
            analysis = client.request("POST", f"{ANALYSES}/{analysis_id}/cancel")
        done.append(analysis)
        if output == "table":
            env.print_out(visible(f"analysis {analysis.get('id')} is {analysis.get('status')}"))

    with open_client(env, server) as client:
        failure = run_each(env, _ids(analysis_ids), cancel_one)
    if output != "table":
        emit_objects(env, done, output, out.analysis_detail, several=len(analysis_ids) > 1,
                     kind="analysis")
    exit_for(failure)


@analysis_group.command("delete")
@analysis_ids_argument
@click.option("--purge", is_flag=True,
              help="Also remove their results and log from the store.")
@yes_option
@server_option
@pass_env
def delete(env, analysis_ids: tuple[str, ...], purge: bool, yes: bool, server: str) -> None:
    """Delete analyses that have ended (cancel one first if it has not); --purge also removes
    their results and log. Asks first, as `exp delete` does; --yes skips the question (needed
    without a terminal: exit 2 otherwise). Several ids are deleted and reported in turn (exit
    code: the first failure's).

    \b
    Examples:
      falcon analysis delete an-127d556979606b76
      falcon analysis delete an-127d556979606b76 --purge --yes
    """
    from .client import open_client

    ids = _ids(analysis_ids)
    if not yes:
        if len(ids) == 1:
            confirm_delete(env, f"Delete analysis {ids[0]}"
                           + (" and remove its results and log for good?" if purge else "?"),
                           what=f"analysis {ids[0]}")
        else:
            confirm_delete(env, f"Delete these {len(ids)} analyses"
                           + (" and remove their results and logs for good?" if purge
                              else "?"),
                           what=f"{len(ids)} analyses",
                           listing=[f"  analysis/{analysis_id}" for analysis_id in ids])
    params = {"purge": "true"} if purge else None

    def delete_one(analysis_id: str) -> None:
        try:
            with api_errors(analysis_id=analysis_id):
                client.request("DELETE", f"{ANALYSES}/{analysis_id}", params=params)
        except CLIError as exc:
            if exc.status == 409:
                # The server says why and to cancel it first; name the command that does.
                raise CLIError(f"{exc.message.rstrip('.')} (`falcon analysis cancel "
                               f"{analysis_id}`)", ExitCode.CONFLICT, status=409) from None
            raise
        env.print_out(f"deleted analysis {analysis_id}"
                      + (" with its results and log" if purge else ""))

    with open_client(env, server) as client:
        failure = run_each(env, ids, delete_one)
    exit_for(failure)


# --- falcon plugins ----------------------------------------------------------------------------

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
    from . import output as out
    from .client import open_client
    from .listing import emit_list

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

    from . import output as out
    from .client import open_client

    with open_client(env, server) as client, api_errors(plugin=name):
        plugin = client.request("GET", f"{PLUGINS}/{quote(name, safe='')}")
    out.emit(env, plugin, output, out.plugin_detail)


__all__ = ["analysis_group", "follow_log", "plugins_group", "read_script_file",
           "render_tables", "wait_for"]
