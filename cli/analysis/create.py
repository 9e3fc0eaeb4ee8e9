"""`falcon analysis create` (with `--wait`) and what it reads: the script file."""
from __future__ import annotations

from typing import Any

import rich_click as click

from core.domain.statuses import ANALYSIS_TERMINAL, AnalysisStatus

from ..errors import CLIError
from ..exit_codes import ExitCode
from ..options import ExpIdType, FiniteFloat, output_option, pass_env, server_option
from ..visible import visible
from ..outages import OutageGrace
from .group import (
    ANALYSES, DEFAULT_INTERVAL, RESOURCE_OPTIONS, analysis_group, api_errors,
)


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

    from ..files import decode_utf8, read_limited

    what = "script file"
    data = read_limited(path, what, SCRIPT_MAX_BYTES, "--script accepts a file of")
    return decode_utf8(data, path, what)



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
@click.option("--timeout", type=FiniteFloat(min=0), default=None, metavar="SECONDS",
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
    from .. import output as out
    from ..client import open_client

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
    from ..output import duration, status_word

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
    from .. import output as out

    stream = env.out if output == "table" else env.err
    start = env.monotonic()
    grace = OutageGrace(env.monotonic)
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
                grace.answered()
            except CLIError as exc:
                if not grace.tolerates(exc):
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
        from ..output import status_word

        raise CLIError(f"analysis {analysis_id} ended {status_word(status)}"
                       + (f" ({detail})" if detail else ""), ExitCode.ANALYSIS_FAILED)
    return analysis

