"""kubectl's output conventions, tried on the real `falcon` process: a real pipe, a real
`COLUMNS`, a real stdout encoding (issue 28, items 1-7).

Each test logs in once in-process (the credentials land in a config folder), then runs
`python -m cli` (the console script's entry point) as a subprocess against the live server.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from accounts.tests.factories import UserFactory
from cli.exit_codes import ExitCode
from cli.tests.signals import watching
from core.testing import wait_until
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
LONG_NAME = "qwen3-32b-prefill-16k-decode-1k-tpu-v5p-2x2x2-concurrency-64"  # 60 characters
EMAIL = "newcomer@example.com"
ROLES = ("prefill", "decode", "router", "profiler")
CONFIG = "model: qwen/qwen3-32b\nnote: Δ 日本\nsteps: 10\n"


class Cli:
    """Runs `python -m cli ARGS` against the live server with the logged-in config folder."""

    def __init__(self, server: str, config_dir: Path):
        self.environ = {**os.environ, "FALCON_SERVER": server,
                        "FALCON_CONFIG_DIR": str(config_dir), "COLUMNS": "120"}
        self.environ.pop("PYTHONIOENCODING", None)

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cli", *args]

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), cwd=ROOT, timeout=120, capture_output=True,
                              text=True, encoding="utf-8", errors="backslashreplace",
                              env={**self.environ, **env})

    def terminal(self, *args: str, **env: str) -> tuple[int, str]:
        """Run with stdout a terminal (a pseudo-terminal); return the exit code and what it
        showed, colours stripped and `\r\n` read as `\n`."""
        import pty
        import re

        primary, secondary = pty.openpty()
        try:
            process = subprocess.Popen(self.command(*args), cwd=ROOT, stdout=secondary,
                                       stderr=subprocess.DEVNULL, env={**self.environ, **env})
        finally:
            os.close(secondary)
        chunks = []
        try:
            while True:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # EIO: the terminal's last writer is gone
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(primary)
        code = process.wait(timeout=120)
        text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
        return code, re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", text)

    def closed(self, *args: str) -> subprocess.CompletedProcess:
        """Run with stdout a pipe whose reader is gone (`falcon ... | true`)."""
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            return subprocess.run(self.command(*args), cwd=ROOT, timeout=120, stdout=write_end,
                                  stderr=subprocess.PIPE, env=self.environ)
        finally:
            os.close(write_end)


@pytest.fixture
def cli(logged_in) -> Cli:
    return Cli(logged_in.server, logged_in.config_dir)


@pytest.fixture
def four_roles():
    """A 4-role experiment with a 60-character name, a long email and a non-ASCII config."""
    return make_exp(name=LONG_NAME, roles=ROLES, config=CONFIG,
                    creator=UserFactory(email=EMAIL))


def _rows(stdout: str) -> list[str]:
    lines = stdout.split("\n")
    assert lines[-1] == ""  # ends with one newline
    return lines[:-1]


# --- 1. tables -----------------------------------------------------------------------------------

LIST_HEADER = ["ID", "NAME", "STATUS", "TYPE", "CLUSTER", "AGE", "DURATION", "JOBS"]


@pytest.mark.parametrize("columns", ["80", "120", "0", "5", "300"])
def test_a_table_is_one_line_per_row_with_id_and_name_whole(cli, four_roles, columns):
    """On a terminal: the same columns at every width, long cells of the elidable ones cut
    with a marker, ID and NAME whole."""
    other = make_exp(name="short", roles=("main",))
    code, shown = cli.terminal("exp", "list", COLUMNS=columns)
    assert code == 0, shown
    lines = _rows(shown)
    assert len(lines) == 3 and all(line.strip() for line in lines), shown
    header, second, first = lines  # newest first
    assert header.split() == LIST_HEADER  # fixed: -o wide adds CREATOR and LABELS
    assert first.split()[:3] == [str(four_roles.pk), LONG_NAME, "Created"]
    assert second.split()[:3] == [str(other.pk), "short", "Created"]
    assert EMAIL not in first
    if int(columns) < 300:  # the 4 jobs give way (elided with a marker)
        assert first.endswith("...") and sum(role in first for role in ROLES) < 4, shown
    else:
        assert all(f"{role}:Pending" in first for role in ROLES), shown
    # Columns stay aligned: every line's STATUS starts where the header's does.
    start = header.index("STATUS")
    assert first[start:].startswith("Created") and second[start:].startswith("Created")


def test_wide_elides_nothing_and_no_headers_drops_the_header(cli, four_roles):
    done = cli("exp", "list", "-o", "wide", "--no-headers", COLUMNS="80")
    assert done.returncode == 0, done.stderr
    (row,) = _rows(done.stdout)
    assert EMAIL in row and all(f"{role}:Pending" in row for role in ROLES)


def test_get_wide_prints_the_objects_row_of_the_wide_list(cli, four_roles):
    from analysis.tests.factories import make_analysis, make_finished_exp

    listed = _rows(cli("exp", "list", "-o", "wide", COLUMNS="80").stdout)
    done = cli("exp", "get", str(four_roles.pk), "-o", "wide", COLUMNS="80")
    assert done.returncode == 0, done.stderr
    got = _rows(done.stdout)
    age = listed[0].split().index("AGE")  # the seconds since creation may tick between the two
    assert [line.split()[:age] + line.split()[age + 1:] for line in got] == \
        [line.split()[:age] + line.split()[age + 1:] for line in listed]
    assert got[0] == listed[0] and len(got) == 2  # the header and the row, nothing elided
    assert EMAIL in listed[1] and all(f"{role}:Pending" in listed[1] for role in ROLES)
    analysis = make_analysis(exp=make_finished_exp(name="analysed"), name=LONG_NAME)
    listed = _rows(cli("analysis", "list", "-o", "wide").stdout)
    done = cli("analysis", "get", analysis.pk, "-o", "wide", COLUMNS="80")
    assert done.returncode == 0, done.stderr
    assert _rows(done.stdout) == listed and analysis.pk in listed[1]
    # Its field table at 80 columns: a long message elided at the edge, one line per field.
    type(analysis).objects.filter(pk=analysis.pk).update(
        message="the plugin could not parse the benchmark summary file " * 3)
    done = cli("analysis", "get", analysis.pk, COLUMNS="80")
    assert done.returncode == 0, done.stderr
    (message,) = [line for line in _rows(done.stdout) if line.startswith("message ")]
    assert message.endswith("...") and len(message) == 80, done.stdout
    assert not any(line.startswith(" ") for line in _rows(done.stdout)), done.stdout


@pytest.mark.parametrize("command", ["get", "describe"])
def test_get_and_describe_never_wrap_a_value_at_80_columns(cli, four_roles, command):
    from experiments.models import Experiment
    from jobs.models import Job

    message = "the replica ran out of memory while loading shard " * 4  # 200 characters
    Experiment.objects.filter(pk=four_roles.pk).update(message=message.strip())
    Job.objects.filter(experiment=four_roles).update(message=message.strip())
    done = cli("exp", command, str(four_roles.pk), COLUMNS="80")
    assert done.returncode == 0, done.stderr
    lines = _rows(done.stdout)
    fields = [line for line in lines if line.split(" ", 1)[0] in ("id", "name", "message")]
    assert [line.split()[0] for line in fields] == ["id", "name", "message"], lines
    assert fields[1].split()[1] == LONG_NAME  # a key value is whole
    assert fields[2].endswith("...") and len(fields[2]) == 80  # a long one elided to the edge
    # Each job is one line (its message elided, not folded onto the next lines).
    jobs = [line for line in lines if line.split()[1:2] and line.split()[1] in ROLES]
    assert len(jobs) == 4, lines
    assert all(line.endswith("...") for line in jobs), jobs
    assert not any(line.startswith(" ") and "shard" in line for line in lines), lines


# --- 2. list options -----------------------------------------------------------------------------

def test_name_jsonpath_sort_by_and_label_short_form(cli, logged_in):
    from accounts.models import User

    assert logged_in("exp", "list").exit_code == 0  # the server registers alice on first sight
    alice = User.objects.get(email="alice@example.com")
    b = make_exp(name="bravo", creator=alice)
    a = make_exp(name="alpha", creator=alice)
    result = logged_in("exp", "label", str(a.pk), "team=infra")
    assert result.exit_code == 0, result.output
    assert _rows(cli("exp", "list", "-o", "name").stdout) == [f"exp/{a.pk}", f"exp/{b.pk}"]
    assert cli("exp", "list", "-o", "name", "-l", "team=infra").stdout == f"exp/{a.pk}\n"
    done = cli("exp", "list", "-o", "jsonpath={[*].name}", "--sort-by", ".name")
    assert done.stdout == "alpha bravo", done.stderr  # kubectl adds no newline either
    done = cli("exp", "list", "-o", 'jsonpath={[0].id}{"\\n"}', "--sort-by", "{.id}")
    assert done.stdout == f"{min(a.pk, b.pk)}\n"
    assert cli("exp", "list", "-o", "jsonpath={[*.id").returncode == ExitCode.USAGE


def test_sort_by_a_field_missing_or_unsortable_keeps_every_row(cli, logged_in):
    """kubernetes/kubernetes#40541 and kubectl#1343 (a field missing from some or all rows
    errored or printed "No resources"), kubectl#993 and kubernetes#103239 (a map field
    crashed), kubectl#724 (an empty list errored)."""
    from accounts.models import User

    assert logged_in("exp", "list").exit_code == 0  # registers alice
    alice = User.objects.get(email="alice@example.com")
    plain, labelled = make_exp(name="plain", creator=alice), make_exp(name="lab", creator=alice)
    assert logged_in("exp", "label", str(labelled.pk), "team=a").exit_code == 0
    for field in (".labels.team", "{.labels}", ".jobs"):
        done = cli("exp", "list", "-o", "name", "--sort-by", field)
        assert done.returncode == 0, (field, done.stderr)
        assert sorted(_rows(done.stdout)) == sorted([f"exp/{plain.pk}", f"exp/{labelled.pk}"])
    done = cli("exp", "list", "-o", "name", "--sort-by", ".labels.team")
    assert _rows(done.stdout)[0] == f"exp/{labelled.pk}"  # rows without the field come last
    done = cli("exp", "list", "--search", "zzz", "--sort-by", ".labels.team")
    assert done.returncode == 0 and "No experiments match." in done.stderr
    done = cli("exp", "list", "--search", "zzz", "--sort-by", ".nope")  # empty: no error
    assert done.returncode == 0 and "No experiments match." in done.stderr


def test_json_lists_every_row_unless_limit(cli):
    for index in range(55):  # more than the old default of 50 rows
        make_exp(name=f"e{index}")
    assert len(json.loads(cli("exp", "list", "-o", "json").stdout)) == 55
    assert len(json.loads(cli("exp", "list", "-o", "json", "--limit", "7").stdout)) == 7
    assert len(yaml.safe_load(cli("exp", "list", "-o", "yaml").stdout)) == 55


# --- 3. block scalars ----------------------------------------------------------------------------

def test_yaml_writes_commands_and_configs_as_blocks(cli, four_roles):
    done = cli("exp", "get", str(four_roles.pk), "-o", "yaml")
    assert done.returncode == 0, done.stderr
    assert "config: |\n  model: qwen/qwen3-32b\n  note: Δ 日本\n" in done.stdout
    assert yaml.safe_load(done.stdout)["config"] == CONFIG


def test_the_admin_task_spec_view_writes_multi_line_commands_as_blocks():
    from core.admin import yaml_block

    html = yaml_block({"main": {"command": "set -e\npython -m train\n", "replica": 1}})
    assert "command: |\n    set -e\n    python -m train\n" in html


# --- 4. watch ------------------------------------------------------------------------------------

def test_watch_into_a_pipe_prints_the_table_then_each_change_once(cli, four_roles):
    with watching(cli.command("exp", "list", "--watch", "--interval", "0.1"), cwd=ROOT,
                  env=cli.environ) as (process, lines):
        wait_until(lambda: len(lines) >= 2, what="the first table")
        exp_update_status(exp_id=four_roles.pk, status="Running")
        wait_until(lambda: any(" Running " in line for line in lines), what="the Running row")
        exp_update_status(exp_id=four_roles.pk, status="Succeeded")
        wait_until(lambda: any(" Succeeded " in line for line in lines),
                   what="the Succeeded row")
    assert process.returncode == 0, process.stderr.read()
    assert [line.split()[2] for line in lines] == ["STATUS", "Created", "Running", "Succeeded"]


def test_watch_prints_a_deleted_row_when_an_experiment_is_deleted_through_the_api(
        cli, logged_in):
    """kubectl get -w prints a deleted object's last row; the watch prints it with status
    Deleted, and a row that only stops matching the filter with its current state."""
    from accounts.models import User

    assert logged_in("exp", "list").exit_code == 0  # the server registers alice on first sight
    gone = make_exp(name=LONG_NAME, roles=ROLES, creator=User.objects.get(
        email="alice@example.com"))
    other = make_exp(name="stays", roles=("main",))
    exp_update_status(exp_id=gone.pk, status="Failed")
    with watching(cli.command("exp", "list", "--watch", "--interval", "0.1", "--status",
                              "Created", "--status", "Failed"), cwd=ROOT,
                  env=cli.environ) as (process, lines):
        wait_until(lambda: len(lines) >= 3, what="the first table")
        result = logged_in("exp", "delete", str(gone.pk), "--yes")
        assert result.exit_code == 0, result.output
        wait_until(lambda: any(" Deleted " in line for line in lines), what="the Deleted row")
        exp_update_status(exp_id=other.pk, status="Running")  # leaves the --status filter
        wait_until(lambda: any(" Running " in line for line in lines), what="the Running row")
    assert process.returncode == 0, process.stderr.read()
    rows = [line.split()[:3] for line in lines]
    assert rows[3:] == [[str(gone.pk), LONG_NAME, "Deleted"],
                        [str(other.pk), "stays", "Running"]], lines
    start = lines[0].index("STATUS")  # the first table's columns
    assert lines[3][start:].startswith("Deleted")


# --- 5. results yaml, status words, repeated options ---------------------------------------------

@pytest.mark.parametrize("args", [["exp", "list", "--type", "a", "--type", "b"],
                                  ["exp", "get", "1", "-o", "json", "-o", "yaml"],
                                  ["analysis", "list", "--exp", "2", "--exp", "4"]])
def test_a_repeated_single_valued_option_is_a_usage_error(cli, args):
    done = cli(*args)
    assert done.returncode == ExitCode.USAGE, done.stdout
    option = args[-2]
    assert f"'{option}'" in done.stderr or "'--output'" in done.stderr
    assert "more than once" in done.stderr


def test_repeatable_options_and_flags_stay_repeatable(cli):
    done = cli("exp", "list", "--status", "Created", "--status", "Running", "-o", "name")
    assert done.returncode == 0, done.stderr


# --- 6. closed pipe ------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["exp", "list"], ["exp", "list", "-o", "wide"],
                                  ["exp", "list", "-o", "name"], ["exp", "list", "-o", "yaml"],
                                  ["exp", "get", "{id}"], ["exp", "describe", "{id}"],
                                  ["exp", "diff", "{id}", "{other}"], ["analysis", "list"]])
def test_a_closed_pipe_exits_141_for_every_output(cli, four_roles, args):
    other = make_exp(name="other", config="model: x\n")
    if args[0] == "analysis":  # an empty list writes nothing to stdout (its note is on stderr)
        from analysis.tests.factories import make_analysis, make_finished_exp

        make_analysis(exp=make_finished_exp(name="analysed"))
    args = [a.format(id=four_roles.pk, other=other.pk) for a in args]
    done = cli.closed(*args)
    assert done.returncode == ExitCode.OUTPUT_CLOSED == 141, done.stderr
    assert done.stderr == b""


def test_plugins_list_into_a_closed_pipe_exits_141(logged_in, analyzer):
    from analysis import analyzer_client

    analyzer_client.close()  # this test's server opens its own channel to this analyzer
    try:
        for args in (["plugins", "list"], ["plugins", "list", "-o", "name"]):
            done = Cli(logged_in.server, logged_in.config_dir).closed(*args)
            assert done.returncode == ExitCode.OUTPUT_CLOSED, done.stderr
            assert done.stderr == b""
    finally:
        analyzer_client.close()


# --- 7. encodings --------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["iso8859-15", "ascii"])
def test_a_stdout_that_cannot_encode_the_text_never_fails(cli, four_roles, encoding):
    other = make_exp(name="other", config="model: qwen/qwen3-32b\nnote: plain\nsteps: 10\n")
    exp_id = str(four_roles.pk)
    env = {"PYTHONIOENCODING": encoding}
    done = cli("exp", "get", exp_id, "-o", "json", **env)
    assert done.returncode == 0, done.stderr
    assert "\\u65e5\\u672c" in done.stdout and json.loads(done.stdout)["config"] == CONFIG
    done = cli("exp", "get", exp_id, "-o", "yaml", **env)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["config"] == CONFIG
    for args in (["exp", "get", exp_id], ["exp", "list"], ["exp", "describe", exp_id]):
        done = cli(*args, **env)
        assert done.returncode == 0, (args, done.stderr)
        assert "\\u65e5\\u672c" in done.stdout or LONG_NAME in done.stdout
    done = cli("exp", "diff", exp_id, str(other.pk), **env)
    assert done.returncode == 1, done.stderr  # 1: they differ (12 would be a failure)
    assert "\\u65e5\\u672c" in done.stdout and "unexpected" not in done.stderr


def test_watch_asks_again_about_a_missing_row_while_the_server_is_unavailable():
    """A row gone from the list whose lookup finds the server down is neither printed nor
    forgotten: the next poll asks again, and its deletion is still printed."""
    import io

    from cli.env import Environment
    from cli.errors import CLIError
    from cli.exp.read import watch_list

    row = {"id": 7, "name": "gone", "status": "Failed", "jobs": []}
    answers = iter([[row], [], [], []])
    lookups = iter([CLIError("down", ExitCode.UNAVAILABLE),
                    CLIError("no such experiment", ExitCode.NOT_FOUND)])

    class Client:
        def paginate(self, path, params, limit):
            return next(answers)

        def request(self, method, path):
            raise next(lookups)

    polls = []

    def sleep(_seconds):
        polls.append(1)
        if len(polls) == 3:
            raise KeyboardInterrupt

    out = io.StringIO()
    env = Environment(environ={"COLUMNS": "120"}, stdout=out, stderr=io.StringIO(),
                      sleep=sleep, clock=lambda: 0.0)
    watch_list(env, Client(), params=[], limit=10, interval=1)
    lines = out.getvalue().splitlines()
    assert [line.split()[:3] for line in lines[1:]] == [["7", "gone", "Failed"],
                                                       ["7", "gone", "Deleted"]], lines
