"""What `falcon` writes: a closed pipe ends it quietly (exit 141); a bad COLUMNS still gives a
table; text from the server reaches a terminal with its control characters made visible, while
JSON and YAML stay exact."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli.env import Environment, columns_from
from cli.exit_codes import ExitCode
from experiments.models import Experiment

from .conftest import TASKS_YAML

ROOT = Path(__file__).resolve().parents[2]


def _run_with_closed(stream: str, *args: str, env: dict | None = None):
    """Run `python -m cli ARGS` with its stdout or stderr a pipe nobody reads any more."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # closed before the command starts: its first write fails, always
    other = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    other[stream] = write_end
    try:
        return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, timeout=60,
                              env={**os.environ, **(env or {})}, **other)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["exp", "--help"],
                                  ["exp", "create", "--help"]])
def test_help_into_a_closed_pipe_exits_141_without_a_word(args):
    done = _run_with_closed("stdout", *args)
    assert done.returncode == ExitCode.OUTPUT_CLOSED == 141
    assert done.stderr == b""


@pytest.mark.parametrize("args", [["exp", "get", "abc"], ["nope"], ["exp", "get", "1"]])
def test_an_error_into_a_closed_stderr_exits_141(args, tmp_path):
    done = _run_with_closed("stderr", *args, env={"FALCON_CONFIG_DIR": str(tmp_path),
                                                  "FALCON_SERVER": "http://127.0.0.1:9"})
    assert done.returncode == ExitCode.OUTPUT_CLOSED
    assert done.stdout == b""


def test_help_lists_the_exit_codes():
    done = subprocess.run([sys.executable, "-m", "cli", "--help"], cwd=ROOT, timeout=60,
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "100"})
    text = " ".join(done.stdout.replace("│", " ").split())
    for code in ("5 not logged in", "10 forbidden", "130 interrupted (Ctrl-C;",
                 "141 output closed"):
        assert code in text


class ClosedAfterOneLine(io.StringIO):
    """A stdout whose reader went away after the first line (`| head -1`)."""

    def write(self, text: str) -> int:
        if "\n" in self.getvalue():
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


@pytest.mark.django_db(transaction=True)
def test_create_wait_into_head_1_ends_quietly_with_141(logged_in, files):
    logged_in.stdout = ClosedAfterOneLine()
    logged_in.sleep = lambda seconds: None
    result = logged_in("exp", "create", "--name", "piped", "--cluster", "c", "--type",
                       "profiling", "--role-to-task-spec", files("t.yaml", TASKS_YAML), "--wait")
    assert result.exit_code == ExitCode.OUTPUT_CLOSED, result.output
    assert result.stderr == ""
    exp = Experiment.objects.get(name="piped")
    assert logged_in.stdout.getvalue() == f"created experiment {exp.pk} (piped)\n"
    assert exp.status == "Created"  # the experiment goes on


@pytest.mark.parametrize("value,width", [
    (None, None), ("", None), (" ", None), ("0", 80), ("-3", 80), ("abc", 80), ("1.5", 80),
    ("\u0663", 80), ("1", 1), ("100", 100), (" 120 ", 120), ("100000000", 10_000)])
def test_columns_is_used_only_when_it_is_a_positive_integer(value, width):
    environ = {} if value is None else {"COLUMNS": value}
    assert columns_from(environ) == width


@pytest.mark.parametrize("value,width", [(None, 200), ("0", 80), ("abc", 80), ("120", 120)])
def test_a_piped_table_is_200_columns_unless_columns_says_otherwise(value, width):
    environ = {} if value is None else {"COLUMNS": value}
    assert Environment(environ=environ, stdout=io.StringIO()).console().width == width


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("columns", ["0", "-1", "wide"])
def test_exp_list_with_a_bad_columns_prints_an_80_column_table(logged_in, files, columns):
    result = logged_in("exp", "create", "--name", "shown", "--cluster", "c", "--type", "t",
                       "--role-to-task-spec", files("t.yaml", TASKS_YAML))
    assert result.exit_code == 0, result.output
    logged_in.environ = {"COLUMNS": columns}
    result = logged_in("exp", "list")
    assert result.exit_code == 0, result.output
    assert "shown" in result.stdout and "Created" in result.stdout and "Pend" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


@pytest.mark.parametrize("columns,widest", [("0", 80), ("100000000", 10_000)])
def test_help_with_a_bad_or_absurd_columns_is_printed(columns, widest):
    done = subprocess.run([sys.executable, "-m", "cli", "exp", "--help"], cwd=ROOT, timeout=60,
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": columns})
    assert done.returncode == 0, done.stderr
    assert "Usage: falcon exp" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) == widest


# --- control characters --------------------------------------------------------------------------

ESC_CLEAR = "\x1b[2J\x1b]0;pwned\x07"  # clear the screen, retitle the window


@pytest.mark.parametrize("text,one_line,multi_line", [
    ("plain text, \u6a21\u578b \U0001f985", "plain text, \u6a21\u578b \U0001f985",
     "plain text, \u6a21\u578b \U0001f985"),
    (ESC_CLEAR, "\\x1b[2J\\x1b]0;pwned\\x07", "\\x1b[2J\\x1b]0;pwned\\x07"),
    ("a\nb\tc", "a\\nb\\tc", "a\nb\tc"),
    ("line 1\r\nline 2\r\n", "line 1\\r\\nline 2\\r\\n", "line 1\nline 2\n"),
    ("progress 10%\rprogress 99%", "progress 10%\\rprogress 99%", "progress 10%\\rprogress 99%"),
    ("\x00\x08\x7f\x85\x9b", "\\x00\\x08\\x7f\\x85\\x9b", "\\x00\\x08\\x7f\\x85\\x9b"),
    ("safe\u202eexe.txt", "safe\\u202eexe.txt", "safe\\u202eexe.txt"),
    ("a\u2028b", "a\\u2028b", "a\\u2028b"),
])
def test_control_characters_are_escaped(text, one_line, multi_line):
    from cli.visible import visible

    assert visible(text) == one_line
    assert visible(text, multiline=True) == multi_line


def _hostile_exp() -> dict:
    return {"id": 7, "name": "n\x1b[31m", "status": "Failed", "reason": "Oops\x1b[2J",
            "message": "line 1\n\x1b]0;pwned\x07line 2", "exp_type": "t\x9b",
            "cluster_name": "c", "creator": "a@b\x1b", "config": "k: v\r\n\tx: \x1b[5m\n",
            "jobs": [{"id": 1, "role": "main\x1b", "status": "Failed", "reason": "R\x1b",
                      "message": "out\n\x1b[A", "task_spec": {"replica": 1}}],
            "artifact": {"id": 1, "status": "Failed", "path": "file:///x\x1b", "reason": None,
                         "message": "m\x1b"}}


@pytest.mark.parametrize("draw", ["exp_detail", "exp_list_table", "exp_progress"])
def test_tables_never_write_a_control_character(draw):
    from cli import output

    exp = _hostile_exp()
    buffer = io.StringIO()
    console = Environment(environ={}, stdout=buffer).console()
    if draw == "exp_detail":
        output.exp_detail(console, exp)
    elif draw == "exp_list_table":
        output.exp_list_table(console, [exp])
    else:
        console.print(output.exp_progress(exp, 3.0))
    text = buffer.getvalue()
    assert not any(ord(c) < 32 and c != "\n" or 0x7f <= ord(c) <= 0x9f for c in text), text
    assert "n\\x1b[31m" in text
    if draw == "exp_detail":
        assert "line 1" in text and "\\x1b]0;pwned\\x07line 2" in text
        assert "k: v\n" in text and "\\x1b[5m" in text and "\\x9b" in text


def test_error_lines_from_the_server_escape_control_characters():
    from cli.client import error_from_response

    err = error_from_response(400, {"name": ["bad \x1b[2Jname"], "code": "invalid"}, url="u")
    assert err.message == "name: bad \\x1b[2Jname"


@pytest.mark.django_db(transaction=True)
def test_exp_get_escapes_on_a_terminal_and_json_yaml_stay_exact(logged_in, files):
    import yaml

    from experiments.services import exp_update_status
    from jobs.services import job_update_status

    config = "model: x\r\n\tcolour: \x1b[31mred\x1b[0m\n"
    result = logged_in("exp", "create", "--name", "esc", "--cluster", "c", "--type", "t",
                       "--role-to-task-spec", files("t.yaml", TASKS_YAML),
                       "--config", files("c.yaml", config), "-o", "json")
    assert result.exit_code == 0, result.output
    exp = json.loads(result.stdout)
    job_update_status(job_id=exp["jobs"][0]["id"], status="Failed", reason="TaskFailed",
                      message="step 1\n\x1b[2J\x1b]0;owned\x07step 2")
    exp_update_status(exp_id=exp["id"], status="Failed", reason="Task\x1bFailed")

    table = logged_in("exp", "get", str(exp["id"]))
    assert table.exit_code == 0, table.output
    assert "\x1b" not in table.stdout and "\x07" not in table.stdout
    assert "\\x1b[31mred\\x1b[0m" in table.stdout and "\\x1b]0;owned\\x07" in table.stdout
    assert "Task\\x1bFailed" in table.stdout

    as_json = json.loads(logged_in("exp", "get", str(exp["id"]), "-o", "json").stdout)
    assert as_json["config"] == config
    assert as_json["jobs"][0]["message"] == "step 1\n\x1b[2J\x1b]0;owned\x07step 2"
    as_yaml = yaml.safe_load(logged_in("exp", "get", str(exp["id"]), "-o", "yaml").stdout)
    assert as_yaml["config"] == config and as_yaml["reason"] == "Task\x1bFailed"

    wait = logged_in("exp", "wait", str(exp["id"]))
    assert wait.exit_code == ExitCode.EXP_FAILED
    assert "\x1b" not in wait.stdout + wait.stderr
    assert "ended Failed (Task\\x1bFailed)" in wait.stderr


def test_yaml_output_quotes_every_string_another_reader_would_type(logged_in, files):
    # PyYAML quotes only what YAML 1.1 would type, so `0o10` and `1e3` came out plain and a
    # YAML 1.2 reader (yq, Go's yaml.v3, ruamel) read 8 and 1000.0; `y` came out plain and
    # YAML 1.1 readers other than PyYAML (Go's yaml.v2 under kubectl) read true (pyyaml#791).
    from core.limits import boundedyaml

    labels = {"a": "0o10", "b": "1e3", "c": "y", "d": "N", "e": "0x1F", "f": "on", "g": "010",
              "h": "Null", "i": "1.0", "j": "plain"}
    args = [arg for key, text in labels.items() for arg in ("--label", f"{key}={text}")]
    result = logged_in("exp", "create", "--name", "quoted", "--cluster", "c", "--type", "t",
                       "--role-to-task-spec", files("t.yaml", TASKS_YAML),
                       "--config", files("c.yaml", "size: 1\n"), *args, "-o", "json")
    assert result.exit_code == 0, result.output
    exp_id = json.loads(result.stdout)["id"]

    as_json = json.loads(logged_in("exp", "get", str(exp_id), "-o", "json").stdout)
    text = logged_in("exp", "get", str(exp_id), "-o", "yaml").stdout
    assert as_json["labels"] == labels
    assert yaml.safe_load(text)["labels"] == labels  # YAML 1.1, as PyYAML reads it
    assert boundedyaml.load(text)["labels"] == labels  # YAML 1.2 core
    for key in ("c", "d"):
        assert f"{key}: '{labels[key]}'\n" in text
    assert "j: plain\n" in text  # a string no reader types stays plain


@pytest.mark.parametrize("width", [30, 80, 200])
@pytest.mark.parametrize("wide", [None, True, False])
def test_a_piped_table_is_the_text_rich_draws_there(width, wide):
    """Into a pipe the line tables are written without rich (`cli.table.PlainConsole`): the
    very text a rich console draws there, and on a terminal the same text with colours."""
    import re
    from datetime import datetime, timezone

    from rich.console import Console

    from cli import output
    from cli.table import PlainConsole

    exps = [_hostile_exp(),
            {"id": 8, "name": "\u6a21\u578b-\U0001f985-" * 3, "status": "Aborted",
             "reason": "\u65e5\u672c" * 4, "exp_type": "t\u0301" * 20,
             "cluster_name": "\u6a21" * 15, "creator": "b@example.com", "labels": {"k": "v"},
             "created_at": "2026-12-01T00:00:00+00:00", "started_at": None,
             "jobs": [{"role": f"r{i}\u578b", "status": "Running"} for i in range(6)]}]
    now = datetime(2026, 12, 3, tzinfo=timezone.utc)
    drawn, plain, coloured = io.StringIO(), io.StringIO(), io.StringIO()
    widths = output.exp_list_table(
        Console(file=drawn, width=width, force_terminal=False, highlight=False,
                soft_wrap=False), exps, now=now, wide=wide)
    assert output.exp_list_table(PlainConsole(plain, width), exps, now=now,
                                 wide=wide) == widths
    assert plain.getvalue() == drawn.getvalue()
    output.exp_list_table(Console(file=coloured, width=width, force_terminal=True,
                                  color_system="standard", highlight=False, soft_wrap=False),
                          exps, now=now, wide=wide)
    assert "\x1b[35mAborted (" in coloured.getvalue()  # the reason shares the status's colour
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured.getvalue()) == plain.getvalue()
