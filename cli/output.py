"""Rendering of API objects: rich tables for people, JSON or YAML for scripts.

JSON and YAML are written as plain text to stdout (no colours, no wrapping) so they parse back,
exactly; tables go through `rich` (the one-line lists through `cli/table.py`), with the control
characters of every text from the server made visible (`cli/visible.py`), so a name or a task's
output cannot drive the terminal. `rich` and `yaml` are imported by the functions that draw or
dump with them: `falcon exp list` into a pipe imports neither (docs/decisions.md#dec-cli-startup).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from core.domain.statuses import AnalysisStatus, ExpStatus, JobStatus

from .table import Cell
from .visible import visible

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.text import Text

    from .table import FieldLines

# A member equals (and hashes as) its value: a job's or artifact's status gets the colour of the
# experiment status of the same name.
STATUS_STYLES = {
    ExpStatus.CREATED: "cyan", JobStatus.PENDING: "cyan", ExpStatus.RUNNING: "yellow",
    ExpStatus.SUCCEEDED: "green", ExpStatus.FAILED: "red", ExpStatus.ABORTING: "magenta",
    ExpStatus.ABORTED: "magenta",
    AnalysisStatus.PENDING: "cyan", AnalysisStatus.RUNNING: "yellow",
    AnalysisStatus.SUCCEEDED: "green", AnalysisStatus.FAILED: "red",
    AnalysisStatus.CANCELLED: "magenta", AnalysisStatus.SKIPPED: "dim",
}


def dump_json(data: Any, *, ascii_only: bool = False) -> str:
    """Return `data` as indented JSON (UTF-8 kept as is, or `\\uXXXX` escapes if
    `ascii_only`)."""
    return json.dumps(data, indent=2, ensure_ascii=ascii_only)


# Plain scalars some YAML reader types even though PyYAML (YAML 1.1) reads them as strings: the
# YAML 1.2 core schema's numbers (`0o10`, `1e3`; yq, Go's yaml.v3, ruamel) and YAML 1.1's
# one-letter booleans, which PyYAML leaves out and Go's yaml.v2 (kubectl) reads as true/false.
_ONE_LETTER_BOOLS = frozenset("yYnN")


@cache
def _portable_dumper() -> type:
    """Return a SafeDumper that quotes every string a YAML 1.1 or 1.2 reader would read as
    another type, so the output means the same to every reader (imports yaml)."""
    import yaml

    class PortableDumper(yaml.SafeDumper):
        pass

    PortableDumper.add_representer(str, _represent_str)
    return PortableDumper


def _represent_str(dumper: Any, text: str) -> Any:
    from core.limits.boundedyaml import BOOL_RE, FLOAT_RE, INT_RE, NULL_RE

    node = dumper.represent_scalar("tag:yaml.org,2002:str", text)
    if "\n" in text:  # a command or a config reads as a `|` block (PyYAML quotes it instead
        node.style = "|"  # when a block cannot hold it exactly, e.g. trailing spaces)
    elif text in _ONE_LETTER_BOOLS or any(rule.match(text)
                                        for rule in (NULL_RE, BOOL_RE, INT_RE, FLOAT_RE)):
        node.style = "'"
    return node



def dump_yaml(data: Any, *, ascii_only: bool = False) -> str:
    """Return `data` as block-style YAML, keys in the server's order; a string any YAML 1.1 or
    1.2 reader would type (`0o10`, `1e3`, `y`, `on`, `010`) is quoted; a multi-line string is a
    `|` block. `ascii_only` writes other characters as `\\uXXXX` escapes in quoted strings."""
    import yaml

    return yaml.dump(data, Dumper=_portable_dumper(), sort_keys=False,
                     allow_unicode=not ascii_only, default_flow_style=False)


def emit(env, data: Any, output: str, table: Callable[[Console, Any], None]) -> None:
    """Write `data` to stdout in the chosen format.

    Args:
        env: the run's `Environment`.
        data: JSON-shaped data (dicts, lists, strings, numbers).
        output: `table`, `json` or `yaml`.
        table: draws `data` on a rich console (used for `table`).
    """
    from .env import can_encode

    if output in ("json", "yaml"):
        dump = dump_json if output == "json" else dump_yaml
        text = dump(data)
        if not can_encode(env.out, text):
            # A stdout that cannot write the text (Latin-9, ASCII) gets the same data with
            # escapes, which every JSON and YAML reader reads back exactly.
            text = dump(data, ascii_only=True)
        env.print_out(text)
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


def status_word(status: Any) -> str:
    """Return a status as people read it: the seeds' capitalised state names (`Running`); the
    analyzer's lower-case states are capitalised the same way (JSON and YAML keep the API's
    spelling, `--status` takes either)."""
    status = str(status or "-")
    return status[:1].upper() + status[1:]


def status_cell(status: Any) -> Cell:
    """Return a status as a coloured table cell (colour only shows on a terminal)."""
    return Cell(visible(status_word(status)), STATUS_STYLES.get(str(status or "-"), ""))


def status_text(status: Any) -> Text:
    """Return a status as coloured rich text (colour only shows on a terminal)."""
    return status_cell(status).to_rich()


def plain_cell(value: Any) -> Cell:
    """Return a value as a one-line table cell: control characters escaped; `-` for None and
    ""."""
    if value is None or value == "":
        return Cell("-")
    return Cell(visible(str(value)))


def plain(value: Any, *, multiline: bool = False) -> Text:
    """Return a value as literal rich text: never read as rich markup, control characters
    escaped.

    Args:
        value: a value from the server (None and "" show as `-`).
        multiline: keep its newlines and tabs (a job's output, a config).
    """
    from rich.text import Text

    if value is None or value == "":
        return Text("-")
    return Text(visible(str(value), multiline=multiline))


def _jobs_summary(exp: dict[str, Any]) -> Cell:
    out = Cell()
    for index, job in enumerate(exp.get("jobs") or []):
        if index:
            out.append(" ")
        out.append(visible(f"{job.get('role')}:"))
        out.append_text(status_cell(job.get("status")))
    return out if out.plain else Cell("-")


def labels_text(labels: Any) -> str:
    """Return labels as `key=value` pairs, comma separated, keys sorted; `-` for none."""
    if not labels:
        return "-"
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def age(value: Any, now: datetime) -> str:
    """Return how long ago an ISO-8601 timestamp was, as `duration` text; `-` for none."""
    moment = _parse_time(value)
    return "-" if moment is None else duration((now - moment).total_seconds())


# What a list command with no rows says, on stderr (as kubectl's "No resources found"), so its
# stdout stays empty for `| wc -l` and `| xargs`; keyed by the `-o name` kind.
EMPTY = {"exp": "No experiments match.", "analysis": "No analyses match.",
         "plugin": "No plugins in the catalog."}


def exp_list_rows(exps: list[dict[str, Any]], *, now: datetime, wide: bool):
    """Return the columns and the one-line cells of `exp list`."""
    from .table import Column

    columns = [Column("ID"), Column("NAME"), Column("STATUS"), Column("TYPE", elide=True),
               Column("CLUSTER", elide=True), Column("AGE"), Column("DURATION"),
               Column("JOBS", elide=True)]
    if wide:
        columns[5:5] = [Column("CREATOR")]
        columns[-1:-1] = [Column("LABELS", elide=True)]
    rows = []
    for exp in exps:
        status = status_cell(exp.get("status"))
        if exp.get("status") in (ExpStatus.FAILED, ExpStatus.ABORTED) and exp.get("reason"):
            status.append(visible(f" ({exp['reason']})"))  # as kubectl's STATUS: OOMKilled
        cells = [plain_cell(exp.get("id")), plain_cell(exp.get("name")), status,
                 plain_cell(exp.get("exp_type")), plain_cell(exp.get("cluster_name")),
                 plain_cell(age(exp.get("created_at"), now)), plain_cell(run_time(exp, now)),
                 _jobs_summary(exp)]
        if wide:
            cells[5:5] = [plain_cell(exp.get("creator"))]
            cells[-1:-1] = [plain_cell(labels_text(exp.get("labels")))]
        rows.append(cells)
    return columns, rows


def exp_list_table(console: Console, exps: list[dict[str, Any]], *,
                   now: datetime | None = None, wide: bool = False, headers: bool = True,
                   fit: bool = True) -> list[int]:
    """Draw experiments one line each (`cli/table.py`): id, name, status, type, cluster, age,
    duration (`run_time`) and the jobs' states; wide also the creator and labels. The columns
    are these whatever the console's width (kubectl's fixed columns).

    Args:
        console: where to draw (a rich `Console` or a `cli.table.PlainConsole`).
        exps: list rows as the API returns them.
        now: the current time (aware) the age and a running duration are measured to; None
            means the wall clock.
        wide: every column (`-o wide`, which never elides).
        headers: print the header line.
        fit: elide long cells of the elidable columns to the console's width (a terminal);
            False writes every cell whole (a pipe, as kubectl never truncates into one).

    Returns:
        The column widths used (`exp list --watch` prints later rows with them).
    """
    from datetime import timezone

    from .table import print_table

    if not exps:  # the caller says so on stderr (`EMPTY`), as kubectl's "No resources found"
        return []
    columns, rows = exp_list_rows(exps, now=now or datetime.now(timezone.utc), wide=wide)
    return print_table(console, columns, rows, headers=headers, fit=fit and not wide)


# Fields whose values are never elided in `get`/`describe` (they run past the edge instead),
# so they can be copied whole, as a list's key columns.
WHOLE_FIELDS = ("id", "name", "creator", "cloned from", "artifact path", "experiment",
                "artifact", "result path", "cluster object")


def _fields_table(rows: list[tuple[str, Text]]):
    from .table import FieldLines

    return FieldLines(rows, whole=WHOLE_FIELDS)


def exp_summary(exp: dict[str, Any]) -> FieldLines:
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
        ("labels", plain(labels_text(exp.get("labels")))),
        ("cloned from", plain(exp.get("cloned_from"))),
        ("artifact path", plain(exp.get("artifact_path"))),
        ("created", plain(when(exp.get("created_at")))),
        ("started", plain(when(exp.get("started_at")))),
        ("finished", plain(when(exp.get("finished_at")))),
        ("duration", plain(run_time(exp))),
    ])


def jobs_table(exp: dict[str, Any]):
    """Return the experiment's jobs, one line per role (`cli.table.RowLines`)."""
    from .table import Column, RowLines

    columns = [Column("ID"), Column("ROLE"), Column("STATUS"), Column("REPLICA"),
               Column("DEVICES", elide=True), Column("CLUSTER JOB"),
               Column("REASON", elide=True), Column("MESSAGE", elide=True)]
    rows = []
    for job in exp.get("jobs") or []:
        spec = job.get("task_spec") or {}
        devices = "-"
        if spec.get("device_count"):
            devices = f"{spec.get('device_count')} x {spec.get('device_type') or 'device'}"
            if spec.get("device_topo"):
                devices += f" ({spec['device_topo']})"
        rows.append([plain(job.get("id")), plain(job.get("role")),
                     status_text(job.get("status")), plain(spec.get("replica")),
                     plain(devices), plain(job.get("cluster_job_name")),
                     plain(job.get("reason")), plain(job.get("message"))])
    return RowLines("jobs", columns, rows)


def artifact_table(exp: dict[str, Any]):
    """Return the experiment's artifact as a one-line table (`cli.table.RowLines`)."""
    from .table import Column, RowLines

    columns = [Column("ID"), Column("TYPE", elide=True), Column("STATUS"), Column("PATH"),
               Column("FILES", elide=True), Column("REASON", elide=True),
               Column("MESSAGE", elide=True)]
    rows = []
    artifact = exp.get("artifact")
    if artifact:
        # The manifest (recorded when it Succeeded) and retention: "3 (1024 B)", "pruned".
        files = ("-" if artifact.get("file_count") is None else
                 f"{artifact['file_count']} ({artifact.get('total_bytes')} B)")
        if artifact.get("prune_state"):
            files += f", {str(artifact['prune_state']).lower()}"
        rows.append([plain(artifact.get("id")), plain(artifact.get("artifact_type")),
                     status_text(artifact.get("status")), plain(artifact.get("path")),
                     plain(files), plain(artifact.get("reason")),
                     plain(artifact.get("message"))])
    return RowLines("artifact", columns, rows)


def exp_detail(console: Console, exp: dict[str, Any]) -> None:
    """Draw one experiment: its fields, its jobs, its artifact and its verbatim config."""
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = [exp_summary(exp), Text(""), jobs_table(exp), artifact_table(exp)]
    config = exp.get("config")
    if config:
        parts += [Text("config", style="bold"), plain(config, multiline=True)]
    console.print(Group(*parts), crop=False)


def exp_progress(exp: dict[str, Any], elapsed: float) -> Group:
    """Return the live `exp wait` view: the experiment's status line, its jobs and artifact.

    Args:
        exp: the experiment as the API returns it.
        elapsed: seconds since the wait started.
    """
    from rich.console import Group
    from rich.text import Text

    head = Text()
    head.append(visible(f"experiment {exp.get('id')} {exp.get('name')}: "))
    head.append_text(status_text(exp.get("status")))
    if exp.get("reason"):
        head.append(visible(f" ({exp['reason']})"))
    head.append(f"  [{duration(elapsed)}]", style="dim")
    return Group(head, jobs_table(exp), artifact_table(exp))


def duration(seconds: float) -> str:
    """Format seconds, rounded to the nearest second, as `1h02m03s`, `2m03s` or `3s`."""
    seconds = max(0, int(seconds + 0.5))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


# --- analyses and plugins ------------------------------------------------------------------------

def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.astimezone()


def run_time(analysis: dict[str, Any], now: datetime | None = None) -> str:
    """Return how long a run ran: `finished_at - started_at`, or up to `now` while running.

    The one duration of an analysis or an experiment: `analysis list`, `analysis get`,
    `exp list` and `exp get` all show it.

    Args:
        analysis: the analysis or experiment as the API returns it (ISO-8601 `started_at`,
            `finished_at`).
        now: the current time (aware); None means the wall clock.

    Returns:
        A `duration` string, or `-` when it never started.
    """
    from datetime import timezone

    started = _parse_time(analysis.get("started_at"))
    if started is None:
        return "-"
    finished = _parse_time(analysis.get("finished_at"))
    end = finished or now or datetime.now(timezone.utc)
    return duration((end - started).total_seconds())


def analysis_list_table(console: Console, analyses: list[dict[str, Any]], *,
                        wide: bool = False, headers: bool = True, fit: bool = True) -> None:
    """Draw analyses one line each (`cli/table.py`): id, name, experiment, type, plugin,
    status, attempts, created, duration; `fit` as `exp_list_table`'s."""
    from .table import Column, print_table

    if not analyses:  # the caller says so on stderr (`EMPTY`)
        return
    columns = [Column("ID"), Column("NAME"), Column("EXP"), Column("TYPE"),
               Column("PLUGIN", elide=not wide), Column("STATUS"), Column("ATTEMPTS"),
               Column("CREATED"), Column("DURATION")]
    rows = [[plain_cell(item.get("id")), plain_cell(item.get("name")),
             plain_cell(item.get("exp_id")), plain_cell(item.get("analysis_type")),
             plain_cell(item.get("plugin_name") or "(command)"),
             status_cell(item.get("status")), plain_cell(item.get("attempts")),
             plain_cell(when(item.get("created_at"))), plain_cell(run_time(item))]
            for item in analyses]
    print_table(console, columns, rows, headers=headers, fit=fit and not wide)


def analysis_summary(analysis: dict[str, Any]) -> FieldLines:
    """Return every field of an analysis as a two-column table; the queue position only while
    pending; the error message only when there is one, labelled `error` when the analysis
    failed and `message` otherwise (a cancellation is no error)."""
    script = "-"
    if analysis.get("has_script"):
        script = f"yes ({analysis.get('script_bytes')} bytes)"
    rows: list[tuple[str, Text]] = [
        ("id", plain(analysis.get("id"))),
        ("name", plain(analysis.get("name"))),
        ("experiment", plain(analysis.get("exp_id"))),
        ("type", plain(analysis.get("analysis_type"))),
        ("plugin", plain(analysis.get("plugin_name"))),
        ("command", plain(analysis.get("command"), multiline=True)),
        ("script", plain(script)),
        ("status", status_text(analysis.get("status"))),
    ]
    if analysis.get("status") == AnalysisStatus.PENDING:
        position = analysis.get("queue_position")
        rows.append(("queue position", plain(position if position is not None else "unknown")))
    rows += [("reason", plain(analysis.get("reason")))]
    if analysis.get("error_message"):
        # Why it failed is an error; why it was cancelled (or anything else) a message.
        label = "error" if analysis.get("status") == AnalysisStatus.FAILED else "message"
        rows.append((label, plain(analysis.get("error_message"), multiline=True)))
    rows += [
        ("attempts", plain(analysis.get("attempts"))),
        ("artifact", plain(analysis.get("artifact_id"))),
        ("result path", plain(analysis.get("result_path"))),
        ("cluster object", plain(analysis.get("cluster_object_name"))),
        ("creator", plain(analysis.get("creator"))),
        ("created", plain(when(analysis.get("created_at")))),
        ("updated", plain(when(analysis.get("updated_at")))),
        ("started", plain(when(analysis.get("started_at")))),
        ("finished", plain(when(analysis.get("finished_at")))),
        ("duration", plain(run_time(analysis))),
    ]
    return _fields_table(rows)


def analysis_detail(console: Console, analysis: dict[str, Any]) -> None:
    """Draw one analysis (`analysis_summary`)."""
    console.print(analysis_summary(analysis), crop=False)


def _resources(plugin: dict[str, Any]) -> str:
    res = plugin.get("resources") or {}
    if not isinstance(res, dict):
        return str(res)
    cpu = f"cpu {res.get('cpu_request', '-')}/{res.get('cpu_limit', '-')}"
    memory = f"memory {res.get('memory_request', '-')}/{res.get('memory_limit', '-')}"
    return f"{cpu}, {memory}"


def _types(plugin: dict[str, Any]) -> str:
    types = plugin.get("artifact_types")
    return ", ".join(str(t) for t in types) if isinstance(types, list) else str(types or "-")


def plugin_list_table(console: Console, plugins: list[dict[str, Any]], *,
                      wide: bool = False, headers: bool = True, fit: bool = True) -> None:
    """Draw the plugin catalog, one line per plugin (name, artifact types, timeout,
    description); `fit` as `exp_list_table`'s."""
    from .table import Column, print_table

    if not plugins:  # the caller says so on stderr (`EMPTY`)
        return
    columns = [Column("NAME"), Column("ARTIFACT TYPES", elide=not wide), Column("TIMEOUT"),
               Column("DESCRIPTION", elide=not wide)]
    rows = []
    for plugin in plugins:
        timeout = plugin.get("timeout_seconds")
        rows.append([plain_cell(plugin.get("name")), plain_cell(_types(plugin)),
                     plain_cell(duration(timeout) if isinstance(timeout, (int, float))
                                else timeout),
                     plain_cell(plugin.get("description"))])
    print_table(console, columns, rows, headers=headers, fit=fit and not wide)


def plugin_detail(console: Console, plugin: dict[str, Any]) -> None:
    """Draw one plugin: its name, description, command, artifact types, resources, timeout, and
    any other field the server sends."""
    known = {"name", "description", "command", "artifact_types", "resources", "timeout_seconds"}
    timeout = plugin.get("timeout_seconds")
    rows = [
        ("name", plain(plugin.get("name"))),
        ("description", plain(plugin.get("description"), multiline=True)),
        ("command", plain(plugin.get("command"), multiline=True)),
        ("artifact types", plain(_types(plugin))),
        ("resources (request/limit)", plain(_resources(plugin))),
        ("timeout", plain(f"{timeout} s" if timeout is not None else None)),
    ]
    rows += [(str(key), plain(cell(value))) for key, value in plugin.items() if key not in known]
    console.print(_fields_table(rows), crop=False)


def cell(value: Any) -> str:
    """One JSON value as table text: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# A number as a result table shows it (`plugins.render.format_value`): 12,345  5.381e-05  1.5 MiB
NUMBER_TEXT = re.compile(r"^[-+]?(\d[\d,]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?( [KMGTPE]?i?B)?$"
                         r"|^[-+]?(inf|nan)$")


def _is_number_text(value: Any) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    return isinstance(value, str) and bool(NUMBER_TEXT.match(value))


def result_tables(console: Console, tables: list[tuple[str, list[str], list[list[Any]]]]) -> None:
    """Draw result tables given as `(title, columns, rows)`; a cell is shown with `cell`.

    A column of numbers is right-aligned, never wraps and is at least as wide as its widest
    number, so a number is never split over two lines or cut; the other columns fold.

    Args:
        console: where to draw.
        tables: each table's title, its column names and its rows (one value per column).
    """
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    for title, columns, rows in tables:
        table = Table(title=visible(str(title)) if title else None, title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False)
        for index, column in enumerate(columns):
            values = [row[index] for row in rows if index < len(row) and row[index] is not None]
            if values and all(_is_number_text(value) for value in values):
                # As wide as its widest number: the text columns fold to make room.
                table.add_column(visible(str(column)), no_wrap=True, justify="right",
                                 min_width=max(len(cell(value)) for value in values))
            else:
                table.add_column(visible(str(column)), overflow="fold")
        for row in rows:
            table.add_row(*(Text("-") if value is None else plain(cell(value)) for value in row))
        parts.append(table)
    if not parts:
        console.print("No records.")
        return
    console.print(Group(*parts))


def generic_tables(records: list[Any]) -> list[tuple[str, list[str], list[list[Any]]]]:
    """Lay out any JSON records as key/value tables: one table per `kind` (records without one
    share a `records` table), its columns the keys in the order first seen.

    Args:
        records: the parsed results, usually JSON objects; anything else is shown under `value`.

    Returns:
        `(title, columns, rows)` for `result_tables`; a missing key is None; numbers are
        formatted for reading as the built-in plugins' tables are
        (`plugins.render.format_value`).
    """
    from plugins.render import format_value

    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if not isinstance(record, dict):
            record = {"value": record}
        kind = record.get("kind")
        groups.setdefault(kind if isinstance(kind, str) and kind else "records", []).append(record)
    tables = []
    for title, group in groups.items():
        columns: list[str] = []
        for record in group:
            columns += [key for key in record if key not in columns]
        tables.append((title, columns, [[format_value(key, record.get(key)) for key in columns]
                                        for record in group]))
    return tables


# --- exp diff ------------------------------------------------------------------------------------

def diff_cell(value: Any, absent: bool, written: str | None = None) -> Text:
    """A value of `exp diff`: compact JSON (so `1` and `"1"` differ on screen); `<absent>`;
    a scalar written otherwise than its JSON (`010`, `3.10`, `.nan`) also shows its text."""
    from rich.text import Text

    if absent:
        return Text("<absent>", style="dim")
    shown = json.dumps(value, ensure_ascii=False)
    if written is not None and written != shown and not (isinstance(value, str)
                                                        and value == written):
        shown += f" (written {written})"
    return Text(visible(shown))


def exp_diff_table(console: Console, diff: dict[str, Any]) -> None:
    """Draw `GET /api/v1/exps/diff`'s answer: one row per path, one column per experiment,
    then the unified diffs of text configs."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    exps = diff.get("experiments") or []
    rows = diff.get("differences") or []
    if not rows:
        console.print("No differences." if not diff.get("config_text_diffs") else "")
    else:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("PATH", overflow="fold", style="bold")
        for exp in exps:
            table.add_column(visible(f"{exp.get('id')} {exp.get('name') or ''}".strip()),
                             overflow="fold")
        for row in rows:
            absent = set(row.get("absent") or ())
            written = row.get("written") or []
            table.add_row(plain(row.get("path")),
                          *[diff_cell(value, index in absent,
                                      written[index] if index < len(written) else None)
                            for index, value in enumerate(row.get("values") or [])])
        console.print(table)
    for text_diff in diff.get("config_text_diffs") or []:
        if text_diff.get("diff"):
            console.print(Text(f"config is not YAML; text diff against experiment "
                               f"{exps[0].get('id') if exps else '?'}:", style="bold"))
            console.print(plain(text_diff["diff"], multiline=True))
