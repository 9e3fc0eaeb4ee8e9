"""The table of `falcon exp compare`: the experiments and their jobs, the config differences,
each plugin's metrics side by side with their changes against the baseline, and the gate.

Imported only inside the command (it imports rich through `cli.output`). The document is
docs/compare.md's; every text from the server is drawn through `plain` or `visible`, so it
cannot drive the terminal.
"""
from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .output import duration, exp_diff_table, plain, status_text
from .visible import visible


def number(value: Any) -> str:
    """A metric's value: 6 significant digits, no exponent below a million."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return f"{value:.6g}" if abs(value) < 1e6 else f"{value:,.0f}" if abs(value) < 1e15 \
        else f"{value:.6g}"


def change_text(cell: dict[str, Any], better: str) -> Text:
    """The change of a cell against the baseline, `-50 (-50.0%)`, green when it is better and
    red when worse (where the catalog says which way is better); nothing when unchanged."""
    change, percent = cell.get("change"), cell.get("change_percent")
    if not change:
        return Text("")
    shown = f"{change:+.6g}" + (f" ({percent:+.1f}%)" if percent is not None else "")
    style = ""
    if change and better in ("higher", "lower"):
        style = "green" if (change > 0) == (better == "higher") else "red"
    return Text(shown, style=style)


def cell_text(cell: dict[str, Any], better: str, baseline: bool) -> Text:
    """One experiment's value of a metric: the number and, but for the baseline, its change;
    `missing` and `NaN` never as a number."""
    state = cell.get("state")
    if state == "missing":
        return Text("missing", style="dim")
    if state == "nan":
        return Text("NaN", style="yellow")
    text = Text(number(cell.get("value")))
    if not baseline:
        change = change_text(cell, better)
        if change.plain:
            text.append(" ")
            text.append_text(change)
    return text


def _experiments(console: Console, doc: dict[str, Any]) -> None:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left",
                  title=Text(f"Baseline: experiment {doc.get('baseline')}", style="bold"))
    for name in ("ID", "NAME", "STATUS", "DURATION", "JOBS", "LABELS"):
        table.add_column(name, overflow="fold")
    for exp in doc.get("experiments") or []:
        jobs = Text()
        for index, job in enumerate(exp.get("jobs") or []):
            if index:
                jobs.append("\n")
            jobs.append(visible(str(job.get("role"))) + " ")
            jobs.append_text(status_text(job.get("status")))
            if job.get("duration_seconds") is not None:
                jobs.append(f" {duration(job['duration_seconds'])}")
        labels = ",".join(f"{k}={v}" for k, v in (exp.get("labels") or {}).items())
        seconds = exp.get("duration_seconds")
        table.add_row(str(exp.get("id")), plain(exp.get("name")), status_text(exp.get("status")),
                      duration(seconds) if seconds is not None else "-", jobs, plain(labels))
    console.print(table)


def _plugin(console: Console, doc: dict[str, Any], section: dict[str, Any]) -> None:
    exps = doc.get("experiments") or []
    title = Text(visible(str(section.get("plugin"))), style="bold")
    gone = [f"{a.get('experiment')}: {a.get('note') or a.get('state')}"
            for a in section.get("analyses") or [] if a.get("state") != "used"]
    if gone:
        title.append(f"  (no metrics from {'; '.join(gone)})", style="dim")
    metrics = section.get("metrics") or []
    if not metrics:
        console.print(title)
        patterns = (doc.get("filters") or {}).get("metric") or []
        console.print(Text(f"  no metric matches --metric {' '.join(patterns)}" if patterns
                           else "  no metrics", style="dim"))
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=title, title_justify="left")
    table.add_column("METRIC", overflow="fold", style="bold")
    table.add_column("UNIT")
    for index, exp in enumerate(exps):
        table.add_column(visible(f"{exp.get('id')}" + (" (base)" if index == 0 else "")),
                         overflow="fold", justify="right")
    for metric in metrics:
        better = metric.get("better") or ""
        table.add_row(plain(metric.get("path")), plain(metric.get("unit") or "-"),
                      *[cell_text(cell, better, index == 0)
                        for index, cell in enumerate(metric.get("values") or [])])
    console.print(table)


def _gate(console: Console, gate: dict[str, Any]) -> None:
    if not gate.get("failed"):
        console.print(Text("Gate: passed", style="bold green"))
        return
    console.print(Text("Gate: FAILED", style="bold red"))
    for condition in gate.get("conditions") or []:
        if not condition.get("failed"):
            continue
        head = visible(str(condition.get("condition")))
        if not condition.get("matched"):
            console.print(Text(f"  {head}: matches no metric of the baseline or the others"))
        for failure in condition.get("failures") or []:
            what = {"missing": "missing", "nan": "NaN"}.get(failure.get("why"))
            if what is None:
                percent = failure.get("change_percent")
                what = (f"{number(failure.get('value'))} against "
                        f"{number(failure.get('baseline'))}"
                        + (f" ({percent:+.1f}%)" if percent is not None else ""))
            else:
                what = f"{what} (baseline {number(failure.get('baseline'))})"
            console.print(Text(f"  {head}: experiment {failure.get('experiment')} "
                               f"{visible(str(failure.get('path')))} {what}"))


def exp_compare_table(console: Console, doc: dict[str, Any]) -> None:
    """Draw the compare document (docs/compare.md) for a person."""
    _experiments(console, doc)
    console.print(Text("Config differences", style="bold"))
    exp_diff_table(console, doc)
    sections = doc.get("plugins") or []
    if not sections:
        asked = (doc.get("filters") or {}).get("plugin") or []
        # With --plugin the sections were filtered out: "no analysis" would send the user
        # looking for a failed run instead of at a misspelt plugin name.
        console.print(Text(
            f"No succeeded analysis of {', '.join(asked)} on these experiments (--plugin): "
            "no metrics to compare." if asked else
            "No succeeded analysis on these experiments: no metrics to compare.", style="dim"))
    for section in sections:
        _plugin(console, doc, section)
    if doc.get("gate") is not None:
        _gate(console, doc["gate"])
