"""Rendering of API objects: rich tables for people, JSON or YAML for scripts.

JSON and YAML are written as plain text to stdout (no colours, no wrapping) so they parse back,
exactly; tables go through `rich`, with the control characters of every text from the server made
visible (`cli/visible.py`), so a name or a task's output cannot drive the terminal. `rich` and
`yaml` are imported here, and this module is imported only inside commands, so `falcon --help`
does not pay for them.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import yaml
from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from core.statuses import ExpStatus, JobStatus

from .visible import visible

# A member equals (and hashes as) its value: a job's or artifact's status gets the colour of the
# experiment status of the same name.
STATUS_STYLES = {
    ExpStatus.CREATED: "cyan", JobStatus.PENDING: "cyan", ExpStatus.RUNNING: "yellow",
    ExpStatus.SUCCEEDED: "green", ExpStatus.FAILED: "red", ExpStatus.ABORTING: "magenta",
    ExpStatus.ABORTED: "magenta",
}


def dump_json(data: Any) -> str:
    """Return `data` as indented JSON (UTF-8 kept as is)."""
    return json.dumps(data, indent=2, ensure_ascii=False)


def dump_yaml(data: Any) -> str:
    """Return `data` as block-style YAML, keys in the server's order."""
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)


def emit(env, data: Any, output: str, table: Callable[[Console, Any], None]) -> None:
    """Write `data` to stdout in the chosen format.

    Args:
        env: the run's `Environment`.
        data: JSON-shaped data (dicts, lists, strings, numbers).
        output: `table`, `json` or `yaml`.
        table: draws `data` on a rich console (used for `table`).
    """
    if output == "json":
        env.print_out(dump_json(data))
    elif output == "yaml":
        env.print_out(dump_yaml(data))
    else:
        table(env.console(), data)


def when(value: Any) -> str:
    """Format an ISO-8601 timestamp from the API as local time; `-` for none."""
    if not value:
        return "-"
    try:
        return datetime.fromisoformat(str(value)).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return str(value)


def status_text(status: Any) -> Text:
    """Return a status as coloured text (colour only shows on a terminal)."""
    status = str(status or "-")
    return Text(visible(status), style=STATUS_STYLES.get(status, ""))


def plain(value: Any, *, multiline: bool = False) -> Text:
    """Return a value as literal text: never read as rich markup, control characters escaped.

    Args:
        value: a value from the server (None and "" show as `-`).
        multiline: keep its newlines and tabs (a job's output, a config).
    """
    if value is None or value == "":
        return Text("-")
    return Text(visible(str(value), multiline=multiline))


def _jobs_summary(exp: dict[str, Any]) -> Text:
    out = Text()
    for index, job in enumerate(exp.get("jobs") or []):
        if index:
            out.append(" ")
        out.append(visible(f"{job.get('role')}:"))
        out.append_text(status_text(job.get("status")))
    return out if out.plain else Text("-")


def exp_list_table(console: Console, exps: list[dict[str, Any]]) -> None:
    """Draw experiments as one table row each (id, name, status, type, cluster, creator, jobs)."""
    if not exps:
        console.print("No experiments match.")
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("ID", "NAME", "STATUS", "TYPE", "CLUSTER", "CREATOR", "CREATED", "JOBS"):
        table.add_column(column, overflow="fold")
    for exp in exps:
        table.add_row(plain(exp.get("id")), plain(exp.get("name")), status_text(exp.get("status")),
                      plain(exp.get("exp_type")), plain(exp.get("cluster_name")),
                      plain(exp.get("creator")), plain(when(exp.get("created_at"))),
                      _jobs_summary(exp))
    console.print(table)


def _fields_table(rows: list[tuple[str, Text]]) -> Table:
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, value)
    return table


def exp_summary(exp: dict[str, Any]) -> Table:
    """Return the experiment's own fields as a two-column table."""
    return _fields_table([
        ("id", plain(exp.get("id"))),
        ("name", plain(exp.get("name"))),
        ("status", status_text(exp.get("status"))),
        ("reason", plain(exp.get("reason"))),
        ("message", plain(exp.get("message"), multiline=True)),
        ("type", plain(exp.get("exp_type"))),
        ("cluster", plain(exp.get("cluster_name"))),
        ("priority", plain(exp.get("priority"))),
        ("creator", plain(exp.get("creator"))),
        ("artifact path", plain(exp.get("artifact_path"))),
        ("created", plain(when(exp.get("created_at")))),
        ("started", plain(when(exp.get("started_at")))),
        ("finished", plain(when(exp.get("finished_at")))),
    ])


def jobs_table(exp: dict[str, Any]) -> Table:
    """Return the experiment's jobs, one row per role."""
    table = Table(title="jobs", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("ID", "ROLE", "STATUS", "REPLICA", "DEVICES", "CLUSTER JOB", "REASON",
                   "MESSAGE"):
        table.add_column(column, overflow="fold")
    for job in exp.get("jobs") or []:
        spec = job.get("task_spec") or {}
        devices = "-"
        if spec.get("device_count"):
            devices = f"{spec.get('device_count')} x {spec.get('device_type') or 'device'}"
            if spec.get("device_topo"):
                devices += f" ({spec['device_topo']})"
        table.add_row(plain(job.get("id")), plain(job.get("role")), status_text(job.get("status")),
                      plain(spec.get("replica")), plain(devices),
                      plain(job.get("cluster_job_name")), plain(job.get("reason")),
                      plain(job.get("message"), multiline=True))
    return table


def artifact_table(exp: dict[str, Any]) -> Table:
    """Return the experiment's artifact as a one-row table."""
    table = Table(title="artifact", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("ID", "TYPE", "STATUS", "PATH", "REASON", "MESSAGE"):
        table.add_column(column, overflow="fold")
    artifact = exp.get("artifact")
    if artifact:
        table.add_row(plain(artifact.get("id")), plain(artifact.get("artifact_type")),
                      status_text(artifact.get("status")), plain(artifact.get("path")),
                      plain(artifact.get("reason")),
                      plain(artifact.get("message"), multiline=True))
    return table


def exp_detail(console: Console, exp: dict[str, Any]) -> None:
    """Draw one experiment: its fields, its jobs, its artifact and its verbatim config."""
    parts: list[Any] = [exp_summary(exp), Text(""), jobs_table(exp), artifact_table(exp)]
    config = exp.get("config")
    if config:
        parts += [Text("config", style="bold"), plain(config, multiline=True)]
    console.print(Group(*parts))


def exp_progress(exp: dict[str, Any], elapsed: float) -> Group:
    """Return the live `exp wait` view: the experiment's status line, its jobs and artifact.

    Args:
        exp: the experiment as the API returns it.
        elapsed: seconds since the wait started.
    """
    head = Text()
    head.append(visible(f"experiment {exp.get('id')} {exp.get('name')}: "))
    head.append_text(status_text(exp.get("status")))
    if exp.get("reason"):
        head.append(visible(f" ({exp['reason']})"))
    head.append(f"  [{duration(elapsed)}]", style="dim")
    return Group(head, jobs_table(exp), artifact_table(exp))


def duration(seconds: float) -> str:
    """Format seconds as `1h02m03s`, `2m03s` or `3s`."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
