"""`falcon exp get`, `list` and `list --watch`."""
from __future__ import annotations

import rich_click as click

from ..errors import CLIError, exit_for, run_each
from ..exit_codes import ExitCode
from ..listing import emit_objects, get_output_option, list_options
from ..options import FiniteFloat, exp_ids_argument, pass_env, server_option
from .group import DEFAULT_INTERVAL, EXPS, PAGE_SIZE, STATUSES, exp_group, require_ids

# `--limit` unset lists every row; this bound only stops a server bug from paging forever.
MAX_ROWS = 10**9
from .inputs import selector_option


@exp_group.command("get")
@exp_ids_argument
@get_output_option
@server_option
@pass_env
def get(env, exp_ids: tuple[int, ...], output: str, server: str) -> None:
    """Show experiments (GetExp) with their jobs, artifact and config.

    Several ids (or `exp/ID`, as `-o name` prints) are shown one after the other; an id that
    fails is reported and the others are still shown (exit code: the first failure's).

    `-o wide` prints their rows of `exp list -o wide` instead (with the header).

    \b
    Examples:
      falcon exp get 12
      falcon exp get 12 -o wide
      falcon exp get 12 13 -o yaml
      falcon exp get 12 -o jsonpath='{.status}'
    """
    from .. import output as out
    from ..client import open_client

    require_ids(exp_ids)
    exps: list[dict] = []
    with open_client(env, server) as client:
        failure = run_each(env, exp_ids,
                           lambda exp_id: exps.append(client.request("GET", f"{EXPS}/{exp_id}")))
    if output == "wide":
        if exps:
            out.exp_list_table(env.console(), exps, now=_now(env), wide=True)
    else:
        emit_objects(env, exps, output, out.exp_detail, several=len(exp_ids) > 1, kind="exp")
    exit_for(failure)


@exp_group.command("list")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(STATUSES, case_sensitive=False),
              help="Only these statuses (repeatable).")
@click.option("--type", "exp_type", help="Only this experiment type.")
@click.option("--cluster", "cluster_name", help="Only this cluster.")
@click.option("--creator", help="Only experiments of this creator (email or user id).")
@click.option("--search", help="Only names starting with this text (case-insensitive).")
@selector_option
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="At most this many rows, newest first. Default: every matching row "
                   "(pages are followed), as kubectl and argo list.")
@click.option("--watch", "-w", is_flag=True,
              help="Print the table, then one line per experiment that changes (as kubectl "
                   "get -w), until Ctrl-C.")
@click.option("--interval", type=FiniteFloat(min=0.1), default=DEFAULT_INTERVAL,
              show_default=True, help="Seconds between two polls of --watch.")
@list_options
@server_option
@pass_env
def list_(env, statuses: tuple[str, ...], exp_type: str | None, cluster_name: str | None,
          creator: str | None, search: str | None, selectors: tuple[str, ...],
          limit: int | None, watch: bool, interval: float, output: str, no_headers: bool,
          sort_by: str | None, server: str) -> None:
    """List experiments (ListExps), newest first, with their age, run time and jobs.

    Like `kubectl get`: one line per experiment, ID and NAME never cut; `-o wide` adds the
    creator and labels; `-o name` prints `exp/ID`.

    \b
    Examples:
      falcon exp list
      falcon exp list --status Running --label team=infra
      falcon exp list --watch
      falcon exp list --limit 500 -o json
    """
    from .. import output as out
    from ..client import open_client
    from ..listing import emit_list

    if watch and output not in ("table", "wide"):
        raise CLIError("--watch prints table lines; drop -o/--output, or poll `falcon exp list "
                       f"-o {output}` yourself", ExitCode.USAGE)
    params: list[tuple[str, str]] = [("status", s) for s in statuses]
    for key, value in (("exp_type", exp_type), ("cluster_name", cluster_name),
                       ("creator", creator), ("search", search)):
        if value:
            params.append((key, value))
    params += [("label", selector) for selector in selectors]
    params.append(("page_size", str(min(limit or PAGE_SIZE, PAGE_SIZE))))
    rows_limit = limit if limit is not None else MAX_ROWS
    with open_client(env, server) as client:
        if watch:
            watch_list(env, client, params=params, limit=rows_limit, interval=interval,
                       wide=output == "wide", headers=not no_headers,
                       sort_by=sort_by)
            return
        exps = list(client.paginate(EXPS, params=params, limit=rows_limit))
    emit_list(env, exps, output=output, kind="exp", id_key="id", no_headers=no_headers,
              sort_by=sort_by,
              table=lambda console, rows, wide, headers, fit: out.exp_list_table(
                  console, rows, now=_now(env), wide=wide, headers=headers, fit=fit))


def _now(env):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(env.clock(), timezone.utc)


def _row_key(exp: dict) -> tuple:
    """What makes a row worth printing again: its status, reason, labels and jobs' states."""
    return (exp.get("status"), exp.get("reason"),
            tuple(sorted((exp.get("labels") or {}).items())),
            tuple((job.get("role"), job.get("status")) for job in exp.get("jobs") or []))


DELETED = "Deleted"  # the STATUS a watch prints for an experiment deleted while watched


def _gone_rows(client, rows: list[dict], seen: dict) -> tuple[list[dict], list[dict]]:
    """The rows to print for experiments listed before and missing now: a deleted one (GetExp
    answers 404) as it was last listed with status `Deleted`, as `kubectl get -w` prints a
    deleted object; one that still exists but no longer matches the filters (or fell beyond
    `--limit`) with its current state, when that changed. Also returns the rows that could
    not be looked up (server unavailable): asked about again at the next poll."""
    out, unresolved = [], []
    for row in rows:
        try:
            now = client.request("GET", f"{EXPS}/{row.get('id')}")
        except CLIError as exc:
            if exc.code == ExitCode.UNAVAILABLE:
                unresolved.append(row)
                continue
            if exc.code != ExitCode.NOT_FOUND:
                raise
            out.append({**row, "status": DELETED, "reason": None})
            continue
        if _row_key(now) != seen.get(row.get("id")):
            out.append(now)
    return out, unresolved


def watch_list(env, client, *, params: list[tuple[str, str]], limit: int, interval: float,
               wide: bool = False, headers: bool = True,
               sort_by: str | None = None) -> None:
    """Print the list, then poll ListExps every `interval` seconds and print one line for each
    experiment that is new or changed, until Ctrl-C (exit 0), as `kubectl get -w` does; an
    experiment deleted meanwhile gets a last line with status `Deleted` (`_gone_rows`).

    Every change is printed once, on a terminal and into a pipe alike, padded to the first
    table's column widths; on a terminal a long cell of an elidable column is cut to them,
    into a pipe none is (a longer cell moves the ones after it), as the first table's. A server that stops answering is polled again (one stderr line says so)
    rather than ending the watch.

    Args:
        env: the run's `Environment` (its `sleep` and `clock` pace the loop and the ages).
        client: a `FalconClient`.
        params: the ListExps query.
        limit: the most rows read per poll.
        interval: seconds between polls.
        wide: as `exp_list_table`'s.
        headers: print the first table's header line.
        sort_by: the first table's `--sort-by`.
    """
    from .. import output as out
    from ..listing import sort_rows
    from ..env import is_terminal
    from ..table import line, print_line

    console = env.table_console()
    fit = is_terminal(env.out)
    seen: dict = {}
    last: dict = {}  # id -> the row as last listed
    widths = None
    unavailable = False
    try:
        while True:
            try:
                exps = list(client.paginate(EXPS, params=params, limit=limit))
            except CLIError as exc:
                if exc.code != ExitCode.UNAVAILABLE:
                    raise
                if not unavailable:
                    env.print_err(f"server unavailable, retrying every {interval:g}s: {exc}")
                unavailable = True
            else:
                unavailable, unresolved = False, []
                if not widths:  # the first table (or the first rows after "No experiments")
                    if not exps and widths is None:
                        env.print_err(out.EMPTY["exp"])
                    if exps or widths is None:
                        widths = out.exp_list_table(console, sort_rows(exps, sort_by),
                                                    now=_now(env), wide=wide, headers=headers,
                                                    fit=fit)
                    changed = []
                else:
                    # Oldest change first, as the events happened; then the rows that left
                    # the list: deleted, or no longer matching.
                    changed = [e for e in reversed(exps) if seen.get(e.get("id")) != _row_key(e)]
                    listed = {e.get("id") for e in exps}
                    gone, unresolved = _gone_rows(
                        client, [last[i] for i in seen if i not in listed], seen)
                    changed += gone
                if changed:
                    columns, rows = out.exp_list_rows(changed, now=_now(env), wide=wide)
                    for row in rows:
                        print_line(console, line(row, widths, columns, cut=fit and not wide))
                previous = seen
                seen = {e.get("id"): _row_key(e) for e in exps}
                last = {e.get("id"): e for e in exps}
                for row in unresolved:  # kept until it can be looked up
                    seen[row.get("id")], last[row.get("id")] = previous[row.get("id")], row
            env.sleep(interval)
    except KeyboardInterrupt:
        return  # stopping a watch is its normal end
