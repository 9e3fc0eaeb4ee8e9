"""`falcon exp describe ID...`: an experiment, its jobs and artifact, then its events in order.

Like `kubectl describe`: everything an operator needs to answer "what happened to experiment N,
and why" in one screen. Reads GetExp (`GET /api/v1/exps/{id}`) and the transition history
(`GET /api/v1/exps/{id}/events`). Only click is imported at module level.
"""
from __future__ import annotations

from typing import Any


from ..listing import object_output_option
from ..options import exp_ids_argument, pass_env, server_option
from .group import EXPS, exp_group, require_ids


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


def events_table(exp: dict[str, Any], events: list[dict[str, Any]], *, title: str = "events"):
    """Return the events, oldest first (time, object, from -> to, why, who), one line each
    (`cli.table.RowLines`: the reason and message are elided to the width), under `title`."""
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
    return RowLines(title, columns, rows,
                    caption=None if events else "no status change yet")


def describe_view(console, data: dict[str, Any]) -> None:
    """Draw an experiment with its jobs, artifact and events (`data` = GetExp plus `events`);
    a deleted one (`deleted: true`, `describe_one`) as its kept events under its id."""
    from rich.console import Group
    from rich.text import Text

    from ..output import artifact_table, exp_summary, jobs_table

    if data.get("deleted"):
        # Its own title: among several experiments, a bare events table would name none.
        console.print(events_table(data, data.get("events") or [],
                                   title=f"experiment {data.get('id')} (deleted): events"),
                      crop=False)
        return
    console.print(Group(exp_summary(data), Text(""), jobs_table(data), artifact_table(data),
                        events_table(data, data.get("events") or [])), crop=False)


def describe_one(env, client, exp_id: int) -> dict[str, Any]:
    """Read one experiment for `describe`: GetExp with its transition history as `events`.

    A deleted experiment keeps its history: it is returned as `{"id", "deleted": true,
    "events"}` and a note on stderr says so.

    Raises:
        CLIError: NOT_FOUND when the experiment never existed (no history either), or any
            other error of the requests.
    """
    from ..errors import CLIError
    from ..exit_codes import ExitCode

    try:
        exp = client.request("GET", f"{EXPS}/{exp_id}")
    except CLIError as exc:
        if exc.code != ExitCode.NOT_FOUND:
            raise
        history = client.request("GET", f"{EXPS}/{exp_id}/events")  # 404 when none either
        env.print_err(f"experiment {exp_id} was deleted; its status changes are kept")
        return {"id": exp_id, "deleted": True, "events": history.get("events", [])}
    history = client.request("GET", f"{EXPS}/{exp_id}/events")
    return {**exp, "events": history.get("events", [])}


@exp_group.command("describe")
@exp_ids_argument
@object_output_option
@server_option
@pass_env
def describe(env, exp_ids: tuple[int, ...], output: str, server: str) -> None:
    """Show experiments, their jobs and artifact, then every status change in order.

    Each event names the object (experiment, job/<role>, artifact, analysis/<id>), the status
    left and entered, the reason, who asked (a user, or a controller's identity) and the
    message. A deleted experiment shows the status changes kept of it. With -o json|yaml: the
    GetExp object with an `events` list.

    Several ids (or `exp/ID`, as `-o name` prints) are described one after the other, as `exp
    get` shows them; an id that fails is reported and the others are still shown (exit code:
    the first failure's). With -o json|yaml several ids print a list, one id its object.

    \b
    Examples:
      falcon exp describe 12
      falcon exp describe 12 13 exp/14
      falcon exp describe 12 -o json
      falcon exp list -o name -l team=infra | xargs falcon exp describe -o yaml
    """
    from ..client import open_client
    from ..errors import exit_for, run_each
    from ..listing import emit_objects

    require_ids(exp_ids)
    described: list[dict[str, Any]] = []
    with open_client(env, server) as client:
        failure = run_each(env, exp_ids,
                           lambda exp_id: described.append(describe_one(env, client, exp_id)))
    emit_objects(env, described, output, describe_view, several=len(exp_ids) > 1, kind="exp")
    exit_for(failure)
