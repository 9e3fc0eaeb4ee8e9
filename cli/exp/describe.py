"""`falcon exp describe ID`: an experiment, its jobs and artifact, then its events in order.

Like `kubectl describe`: everything an operator needs to answer "what happened to experiment N,
and why" in one screen. Reads GetExp (`GET /api/v1/exps/{id}`) and the transition history
(`GET /api/v1/exps/{id}/events`). Only click is imported at module level.
"""
from __future__ import annotations

from typing import Any


from ..options import exp_id_argument, output_option, pass_env, server_option
from .group import exp_group

EXPS = "/api/v1/exps"


def event_time(value: Any) -> str:
    """Format an event's ISO-8601 time as local time to the microsecond; `-` for none."""
    from datetime import datetime

    if not value:
        return "-"
    try:
        return datetime.fromisoformat(str(value)).astimezone().strftime("%Y-%m-%d %H:%M:%S.%f")
    except ValueError:
        return str(value)


def _object_name(event: dict[str, Any], roles: dict[str, str]) -> str:
    """`experiment`, `job/<role>`, `artifact` or `analysis/<id>` for one event's row."""
    kind, ident = event.get("entity_type"), str(event.get("entity_id"))
    if kind == "job":
        return f"job/{roles.get(ident, ident)}"
    if kind == "analysis":
        return f"analysis/{ident}"
    return str(kind)


def events_table(exp: dict[str, Any], events: list[dict[str, Any]]):
    """Return the events, oldest first (time, object, from -> to, why, who), one line each
    (`cli.table.RowLines`: the reason and message are elided to the width)."""
    from ..output import plain, status_text
    from ..table import Column, RowLines

    roles = {str(job.get("id")): str(job.get("role")) for job in exp.get("jobs") or []}
    columns = [Column("TIME"), Column("OBJECT"), Column("FROM"), Column("TO"),
               Column("REASON", elide=True), Column("ACTOR", elide=True),
               Column("MESSAGE", elide=True)]
    rows = [[plain(event_time(event.get("at"))), plain(_object_name(event, roles)),
             status_text(event.get("from_status")), status_text(event.get("to_status")),
             plain(event.get("reason")), plain(event.get("actor")), plain(event.get("message"))]
            for event in events]
    return RowLines("events", columns, rows,
                    caption=None if events else "no status change yet")


def describe_view(console, data: dict[str, Any]) -> None:
    """Draw an experiment with its jobs, artifact and events (`data` = GetExp plus `events`)."""
    from rich.console import Group
    from rich.text import Text

    from ..output import artifact_table, exp_summary, jobs_table

    console.print(Group(exp_summary(data), Text(""), jobs_table(data), artifact_table(data),
                        events_table(data, data.get("events") or [])), crop=False)


@exp_group.command("describe")
@exp_id_argument
@output_option
@server_option
@pass_env
def describe(env, exp_id: int, output: str, server: str) -> None:
    """Show an experiment, its jobs and artifact, then every status change in order.

    Each event names the object (experiment, job/<role>, artifact, analysis/<id>), the status
    left and entered, the reason, who asked (a user, or a controller's identity) and the
    message. With -o json|yaml: the GetExp object with an `events` list.

    \b
    Examples:
      falcon exp describe 12
      falcon exp describe 12 -o json
    """
    from .. import output as out
    from ..client import open_client

    from ..errors import CLIError
    from ..exit_codes import ExitCode

    with open_client(env, server) as client:
        try:
            exp = client.request("GET", f"{EXPS}/{exp_id}")
        except CLIError as exc:
            if exc.code != ExitCode.NOT_FOUND:
                raise
            # A deleted experiment keeps its history: show it, or the 404 when there is none.
            history = client.request("GET", f"{EXPS}/{exp_id}/events")
            env.print_err(f"experiment {exp_id} was deleted; its status changes are kept:")
            out.emit(env, {"id": exp_id, "deleted": True, "events": history.get("events", [])},
                     output, lambda console, data: console.print(
                         events_table(data, data["events"]), crop=False))
            return
        history = client.request("GET", f"{EXPS}/{exp_id}/events")
    out.emit(env, {**exp, "events": history.get("events", [])}, output, describe_view)
