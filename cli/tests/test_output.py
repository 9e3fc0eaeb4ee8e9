"""What `falcon` writes: a closed pipe ends it quietly (exit 141); a bad COLUMNS still gives a
table."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    for code in ("5 not logged in", "10 forbidden", "130 interrupted (Ctrl-C)",
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
