"""`falcon exp get`, `list` and `list --watch`."""
from __future__ import annotations

import rich_click as click

from ..errors import CLIError
from ..exit_codes import ExitCode
from ..options import exp_id_argument, output_option, pass_env, server_option
from .group import DEFAULT_INTERVAL, EXPS, PAGE_SIZE, STATUSES, exp_group
from .inputs import SelectorArg


@exp_group.command("get")
@exp_id_argument
@output_option
@server_option
@pass_env
def get(env, exp_id: int, output: str, server: str) -> None:
    """Show one experiment (GetExp) with its jobs, artifact and config.

    \b
    Examples:
      falcon exp get 12
      falcon exp get 12 -o yaml
    """
    from .. import output as out
    from ..client import open_client

    with open_client(env, server) as client:
        exp = client.request("GET", f"{EXPS}/{exp_id}")
    out.emit(env, exp, output, out.exp_detail)


@exp_group.command("list")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(STATUSES, case_sensitive=False),
              help="Only these statuses (repeatable).")
@click.option("--type", "exp_type", help="Only this experiment type.")
@click.option("--cluster", "cluster_name", help="Only this cluster.")
@click.option("--creator", help="Only experiments of this creator (email or user id).")
@click.option("--search", help="Only names starting with this text (case-insensitive).")
@click.option("--label", "selectors", multiple=True, type=SelectorArg(),
              help="Only experiments with this label: key=value, or key for any value "
                   "(repeatable; all must match).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many rows, newest first (pages are followed).")
@click.option("--watch", "-w", is_flag=True,
              help="Redraw the list as it changes, until Ctrl-C (table output).")
@click.option("--interval", type=click.FloatRange(min=0.5), default=DEFAULT_INTERVAL,
              show_default=True, help="Seconds between two polls of --watch.")
@output_option
@server_option
@pass_env
def list_(env, statuses: tuple[str, ...], exp_type: str | None, cluster_name: str | None,
          creator: str | None, search: str | None, selectors: tuple[str, ...], limit: int,
          watch: bool, interval: float, output: str, server: str) -> None:
    """List experiments (ListExps), newest first, with their age, run time and labels.

    \b
    Examples:
      falcon exp list
      falcon exp list --status Running --label team=infra
      falcon exp list --watch
      falcon exp list --limit 500 -o json
    """
    from .. import output as out
    from ..client import open_client

    if watch and output != "table":
        raise CLIError("--watch draws a table; drop -o/--output, or poll `falcon exp list -o "
                       f"{output}` yourself", ExitCode.USAGE)
    params: list[tuple[str, str]] = [("status", s) for s in statuses]
    for key, value in (("exp_type", exp_type), ("cluster_name", cluster_name),
                       ("creator", creator), ("search", search)):
        if value:
            params.append((key, value))
    params += [("label", selector) for selector in selectors]
    params.append(("page_size", str(min(limit, PAGE_SIZE))))
    with open_client(env, server) as client:
        if watch:
            watch_list(env, client, params=params, limit=limit, interval=interval)
            return
        exps = list(client.paginate(EXPS, params=params, limit=limit))
    out.emit(env, exps, output, lambda console, rows: out.exp_list_table(
        console, rows, now=_now(env)))


def _now(env):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(env.clock(), timezone.utc)


def watch_list(env, client, *, params: list[tuple[str, str]], limit: int,
               interval: float) -> None:
    """Poll ListExps every `interval` seconds and redraw the table until Ctrl-C (exit 0).

    On a terminal the table is redrawn in place (`rich.live.Live`); otherwise it is printed
    again each time a row's status, reason or labels change (or rows come and go), so a log
    of the output reads as a history. A server that stops answering is polled again (the
    table says so) rather than ending the watch.

    Args:
        env: the run's `Environment` (its `sleep` and `clock` pace the loop and the ages).
        client: a `FalconClient`.
        params: the ListExps query.
        limit: the most rows shown.
        interval: seconds between polls.
    """
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from .. import output as out

    console = env.console()
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    last = None
    try:
        if live is not None:
            live.start()
        while True:
            note = None
            try:
                exps = list(client.paginate(EXPS, params=params, limit=limit))
            except CLIError as exc:
                if exc.code != ExitCode.UNAVAILABLE:
                    raise
                note = Text(f"server unavailable, retrying every {interval:g}s: {exc}",
                            style="yellow")
            if note is None:
                view = Group(out.exp_list_view(exps, now=_now(env)),
                             Text(f"every {interval:g}s; Ctrl-C to stop", style="dim"))
                key = tuple((e.get("id"), e.get("status"), e.get("reason"),
                             tuple(sorted((e.get("labels") or {}).items()))) for e in exps)
            else:
                view, key = note, ("unavailable",)
            if live is not None:
                live.update(view, refresh=True)
            elif key != last:
                console.print(view)
            last = key
            env.sleep(interval)
    except KeyboardInterrupt:
        return  # stopping a watch is its normal end
    finally:
        if live is not None:
            live.stop()
