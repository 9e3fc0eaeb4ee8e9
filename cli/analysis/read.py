"""`falcon analysis list`, `get` and `logs` (with `--follow`)."""
from __future__ import annotations

from typing import Any

import rich_click as click

from ..env import is_terminal
from ..errors import CLIError, exit_for, run_each
from ..listing import emit_objects, get_output_option, list_options
from ..exit_codes import ExitCode
from ..options import (ExpIdType, analysis_id_argument, analysis_ids_argument, pass_env,
                       server_option)
from ..visible import visible
from ..outages import OutageGrace
from .group import (
    ANALYSES, DEFAULT_INTERVAL, STATUSES, TYPES, analysis_group,
    analysis_ids_of, api_errors, no_label_option,
)


@analysis_group.command("list")
@click.option("--exp", "exp_id", type=ExpIdType(), metavar="ID",
              help="Only analyses of this experiment (ID or exp/ID).")
@click.option("--status", type=click.Choice(STATUSES, case_sensitive=False),
              help="Only analyses in this status.")
@click.option("--type", "analysis_type", type=click.Choice(TYPES, case_sensitive=False),
              help="Only offline (automatic) or online (asked for) analyses.")
@click.option("--plugin", help="Only analyses of this plugin.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="At most this many rows, newest first. Default: every matching row "
                   "(pages are followed), as kubectl and argo list.")
@no_label_option("list")
@list_options
@server_option
@pass_env
def list_(env, exp_id: int | None, status: str | None, analysis_type: str | None,
          plugin: str | None, limit: int | None, output: str, no_headers: bool,
          sort_by: str | None, server: str) -> None:
    """List analyses, newest first; `-o name` prints `analysis/ID`.

    Analyses have no labels (labels are on experiments), so -l/--label is refused (exit 2); the
    analyses of labelled experiments are listed by experiment, `--exp` taking the `exp/ID` of
    `falcon exp list -o name` (last example).

    \b
    Examples:
      falcon analysis list --exp 12
      falcon analysis list --status failed --type offline -o json
      falcon exp list -l team=x -o name | xargs -n1 falcon analysis list --exp
    """
    from .. import output as out
    from ..client import open_client
    from ..listing import emit_list

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

    `-o wide` prints their rows of `analysis list -o wide` instead (with the header).

    \b
    Examples:
      falcon analysis get an-127d556979606b76
      falcon analysis get an-127d556979606b76 -o wide
      falcon analysis get an-127d556979606b76 -o yaml
      falcon analysis get an-127d556979606b76 -o jsonpath='{.status}'
      falcon analysis list -o name --exp 12 | xargs falcon analysis get -o json
    """
    from .. import output as out
    from ..client import open_client

    found: list[dict[str, Any]] = []

    def get_one(analysis_id: str) -> None:
        with api_errors(analysis_id=analysis_id):
            found.append(client.request("GET", f"{ANALYSES}/{analysis_id}"))

    with open_client(env, server) as client:
        failure = run_each(env, analysis_ids_of(analysis_ids), get_one)
    if output == "wide":
        if found:
            out.analysis_list_table(env.console(), found, wide=True)
    else:
        emit_objects(env, found, output, out.analysis_detail, several=len(analysis_ids) > 1,
                     kind="analysis")
    exit_for(failure)


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
    from ..client import open_client

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
    raw = not is_terminal(env.out)
    offset = 0
    note = None
    grace = OutageGrace(env.monotonic)
    path = f"{ANALYSES}/{analysis_id}/logs"
    try:
        while True:
            try:
                with api_errors(analysis_id=analysis_id):
                    page = client.request("GET", path, params={"offset": str(offset)})
                grace.answered()
            except CLIError as exc:
                if not follow or offset == 0 or not grace.tolerates(exc):
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

