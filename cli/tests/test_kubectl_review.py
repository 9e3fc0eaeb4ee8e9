"""kubectl habits, third round (a reviewer who uses kubectl daily): a closed pipe mid-write,
"No resources found" on stderr, a table's columns whatever the width, `exp wait --timeout` as
a bound on the whole run, repeated or non-finite options, the Ctrl-C resume hint, and what
`config use-context` says under FALCON_SERVER. Each runs `python -m cli` as a subprocess (a
real pipe, a real COLUMNS) against the live server (`test_conventions.Cli`)."""
from __future__ import annotations

import json
import subprocess

import pytest

from cli.exit_codes import ExitCode
from experiments.tests.factories import make_exp

from .test_conventions import ROOT, Cli

pytestmark = pytest.mark.django_db(transaction=True)

# Just under the server's config limit (128 KiB less the environment's own overhead).
BIG_CONFIG = "model: x\n" + "".join(f"key{i}: {'v' * 100}\n" for i in range(1100))
MIB = 1 << 20


@pytest.fixture
def cli(logged_in) -> Cli:
    """`python -m cli ARGS` logged in as alice, COLUMNS=120 (`test_conventions.Cli`)."""
    return Cli(logged_in.server, logged_in.config_dir)


def _first_line_then_close(cli: Cli, args: list[str], **env: str) -> tuple[int, bytes]:
    """Run `falcon ARGS | head -1`: read one line from a real pipe, close it, return the exit
    code and stderr."""
    process = subprocess.Popen(cli.command(*args), cwd=ROOT, env={**cli.environ, **env},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read()
    process.wait(timeout=120)
    assert first, stderr
    return process.returncode, stderr


# --- 1. a closed pipe mid-write exits 141, never 0 ----------------------------------------------

@pytest.fixture
def big_exps():
    """Ten experiments of ~120 KB config each: `get`/`describe` of all write > 1 MiB."""
    return [str(make_exp(name=f"big-{i}", config=BIG_CONFIG).pk) for i in range(10)]


@pytest.mark.parametrize("unbuffered", ["1", ""])
@pytest.mark.parametrize("args", [["exp", "get", "{ids}", "-o", "json"],
                                  ["exp", "describe", "{ids}", "-o", "yaml"],
                                  ["exp", "list", "-o", "json"], ["exp", "list", "-o", "yaml"]])
def test_large_output_into_a_pipe_closed_after_one_line_exits_141(cli, big_exps, args,
                                                                  unbuffered):
    """`PYTHONUNBUFFERED=1` put stdout's text layer on a raw FileIO that wrote 64 KiB of a
    400 KB chunk once and exited 0: the rest must be written, and EPIPE is the 141."""
    if args[:2] == ["exp", "list"]:  # a list row has no config: a few hundred rows instead
        for index in range(500):
            make_exp(name=f"row-{index}-" + "n" * 110, roles=tuple(f"role-{r}" for r in range(8)))
    args = [part for arg in args for part in (big_exps if arg == "{ids}" else [arg])]
    whole = subprocess.run(cli.command(*args), cwd=ROOT, env=cli.environ, capture_output=True,
                           timeout=120)
    assert whole.returncode == 0 and len(whole.stdout) > MIB, (len(whole.stdout), whole.stderr)
    code, stderr = _first_line_then_close(cli, args, PYTHONUNBUFFERED=unbuffered)
    assert code == ExitCode.OUTPUT_CLOSED == 141, stderr
    assert stderr == b""


# --- 2. "No experiments match." goes to stderr, as kubectl's "No resources found" ---------------

@pytest.mark.parametrize("args,message", [
    (["exp", "list", "-l", "team=none"], "No experiments match."),
    (["exp", "list", "-l", "team=none", "--no-headers"], "No experiments match."),
    (["exp", "list", "-l", "team=none", "-o", "wide"], "No experiments match."),
    (["exp", "list", "-l", "team=none", "-o", "name"], "No experiments match."),
    (["analysis", "list", "--exp", "77"], "No analyses match."),
    (["analysis", "list", "--exp", "77", "--no-headers", "-o", "name"], "No analyses match."),
])
def test_an_empty_list_writes_nothing_on_stdout(cli, args, message):
    make_exp(name="unlabelled")  # a list that matches nothing, not an empty server
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == message + "\n"
    done = cli(*args[:4], "-o", "json")
    assert done.returncode == 0 and done.stdout == "[]\n", done.stderr


# --- 3. fixed columns whatever the width; nothing elided into a pipe -----------------------------

LONG_NAME = "qwen3-32b-prefill-16k-decode-1k-tpu-v5p-2x2x2-concurrency-64"
ROLES = ("prefill", "decode", "router", "profiler")


@pytest.mark.parametrize("columns", ["40", "80", "119", "120", "200"])
def test_into_a_pipe_a_table_has_fixed_columns_and_every_cell_whole(cli, columns):
    exp = make_exp(name=LONG_NAME, roles=ROLES)
    done = cli("exp", "list", COLUMNS=columns)
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "STATUS", "TYPE", "CLUSTER", "AGE", "DURATION",
                              "JOBS"]
    assert row.split()[:2] == [str(exp.pk), LONG_NAME]
    assert row.endswith("decode:Pending prefill:Pending profiler:Pending router:Pending")
    assert "..." not in row
    done = cli("exp", "list", "-o", "wide", COLUMNS=columns)  # every column, as before
    header, row = done.stdout.splitlines()
    assert header.split()[5:] == ["CREATOR", "AGE", "DURATION", "LABELS", "JOBS"]
    assert exp.creator.email in row and row.endswith("router:Pending") and "..." not in row


def test_watch_into_a_pipe_never_cuts_a_later_row_to_the_first_tables_widths(cli):
    """The first table's JOBS is one job wide; a later row with four is printed whole."""
    from cli.tests.signals import watching
    from core.testing import wait_until

    make_exp(name="one-job", roles=("main",))
    with watching(cli.command("exp", "list", "-w", "--interval", "0.1"), cwd=ROOT,
                  env={**cli.environ, "COLUMNS": "80"}) as (process, lines):
        wait_until(lambda: len(lines) >= 2, what="the first table")
        later = make_exp(name=LONG_NAME, roles=ROLES)
        wait_until(lambda: len(lines) >= 3, what="the new row")
    assert process.returncode == 0, process.stderr.read()
    assert lines[2].split()[:2] == [str(later.pk), LONG_NAME]
    assert lines[2].rstrip("\n").endswith(
        "decode:Pending prefill:Pending profiler:Pending router:Pending"), lines


# --- 4. exp wait --timeout bounds the whole run; -l reports ended ones from its list -------------

def _labelled(name: str, status: str | None, **labels: str) -> int:
    from accounts.tests.factories import UserFactory
    from experiments.services import exp_create, exp_update_status
    from experiments.tests.factories import task_spec

    exp = exp_create(creator=UserFactory(), name=name, cluster_name="c", exp_type="t",
                     role_to_task_spec={"main": task_spec()}, labels=labels)
    if status is not None:
        exp_update_status(exp_id=exp.pk, status=status)
    return exp.pk


def _gets_of_one(caplog) -> list[str]:
    import re

    return [r.getMessage() for r in caplog.records
            if re.match(r"GET /api/v1/exps/\d+ ", r.getMessage())]


def test_wait_by_selector_reports_ended_experiments_from_its_list(cli, caplog):
    import logging
    import time

    caplog.set_level(logging.INFO, logger="falcon.http")
    ids = [_labelled(f"gold-{i}", "Succeeded", tier="gold") for i in range(40)]
    started = time.monotonic()
    done = cli("exp", "wait", "-l", "tier=gold", "--timeout", "1", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert sorted(exp["id"] for exp in json.loads(done.stdout)) == ids
    assert _gets_of_one(caplog) == []  # one list, no GET per experiment
    assert time.monotonic() - started < 30
    failed = _labelled("gold-failed", "Failed", tier="gold")
    done = cli("exp", "wait", "-l", "tier=gold", "--timeout", "1")
    assert done.returncode == ExitCode.EXP_FAILED, done.stderr
    assert done.stderr == f"error: experiment {failed} ended Failed\n"


def test_wait_timeout_bounds_the_run_and_polls_only_unfinished_ones(cli, caplog):
    import logging
    import time

    caplog.set_level(logging.INFO, logger="falcon.http")
    pending = [_labelled(f"x-{i}", None, team="x") for i in range(20)]
    ended = _labelled("x-done", "Succeeded", team="x")
    started = time.monotonic()
    done = cli("exp", "wait", "-l", "team=x", "--timeout", "2", "--interval", "0.5")
    took = time.monotonic() - started
    assert done.returncode == ExitCode.TIMEOUT, done.stderr
    errors = done.stderr.splitlines()
    assert len(errors) == 20 and all("is still Created" in line for line in errors), errors
    assert f"experiment {ended} Succeeded" in done.stdout
    gets = _gets_of_one(caplog)
    # Only the first unfinished one is polled until the deadline; the others, left when it
    # passed, are reported as the list showed them.
    assert gets and all(f"/exps/{pending[-1]} " in line for line in gets), gets
    assert took < 2 + 5, took  # the process's start-up and the list, not a read per row


# --- 5. the global --server given twice is a usage error ----------------------------------------

def test_a_repeated_global_server_is_a_usage_error(cli):
    done = cli("--server", "http://127.0.0.1:1", "--server", "http://127.0.0.1:2", "exp", "list")
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert "'--server'" in done.stderr and "more than once" in done.stderr
    assert done.stdout == ""


# --- 6. NaN and infinities are usage errors for every float option ------------------------------

@pytest.mark.parametrize("args", [["exp", "wait", "1", "--interval", "nan"],
                                  ["exp", "wait", "1", "--timeout", "nan"],
                                  ["exp", "wait", "1", "--timeout", "inf"],
                                  ["exp", "list", "-w", "--interval", "nan"],
                                  ["exp", "abort", "1", "--wait", "--timeout", "-inf"],
                                  ["exp", "logs", "1", "-f", "--interval", "NaN"],
                                  ["analysis", "create", "--exp", "1", "--plugin", "summary",
                                   "--wait", "--timeout", "infinity"]])
def test_a_non_finite_number_is_a_usage_error_naming_the_option(cli, args):
    done = cli(*args)
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert f"'{args[-2]}'" in done.stderr and "not a finite number" in done.stderr
    assert "unexpected" not in done.stderr


def test_every_float_option_uses_the_one_finite_float_type():
    import click

    from cli.main import LAZY_COMMANDS, load_command
    from cli.options import FiniteFloat

    def options(command, path):
        for param in command.params:
            if isinstance(param.type, click.types.FloatParamType):
                yield path, param
        for name, sub in getattr(command, "commands", {}).items():
            yield from options(sub, f"{path} {name}")

    found = [(path, param) for name in LAZY_COMMANDS
             for path, param in options(load_command(name), name)]
    assert found and all(isinstance(param.type, FiniteFloat) for _, param in found), [
        (path, param.name) for path, param in found if not isinstance(param.type, FiniteFloat)]


# --- 7. the Ctrl-C hint of exp wait resumes every experiment not yet ended ----------------------

@pytest.mark.parametrize("by_selector", [False, True])
def test_ctrl_c_hint_names_every_experiment_not_yet_ended(logged_in, by_selector):
    import signal

    from .test_kubectl_habits import _first_line, _popen_falcon

    done, first, second = (_labelled(name, status, batch="9") for name, status in
                           (("ended", "Succeeded"), ("w-1", None), ("w-2", None)))
    args = ["-l", "batch=9"] if by_selector else [str(done), str(second), str(first)]
    proc = _popen_falcon(logged_in, "exp", "wait", *args, "--interval", "0.1")
    try:
        watched = second  # the ids' second; the selector's newest unfinished one
        lines = [_first_line(proc)]
        while f"experiment {watched} " not in lines[-1] and len(lines) < 3:
            lines.append(_first_line(proc))  # the ended one first, when given by id
        assert lines[-1].startswith(f"[0s] experiment {watched} Created"), lines
        assert by_selector or f"experiment {done} Succeeded\n" in lines  # -l: newest first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, err
    resume = "-l batch=9" if by_selector else f"{second} {first}"
    assert err == (f"error: stopped waiting; experiment {second} is still Created (`falcon exp "
                   f"wait {resume}` resumes, `falcon exp abort {resume}` stops it)\n")


# --- 8. use-context under FALCON_SERVER says the variable wins -----------------------------------

def test_use_context_warns_that_falcon_server_overrides_it(cli):
    done = cli("config", "set-context", "prod", "--server", "https://falcon.example.com")
    assert done.returncode == 0, done.stderr
    done = cli("config", "use-context", "prod", FALCON_SERVER="http://127.0.0.1:9")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "switched to context prod (https://falcon.example.com)\n"
    assert done.stderr.startswith("warning: FALCON_SERVER=http://127.0.0.1:9 is set and "
                                  "overrides the context")
    done = cli("config", "use-context", "prod", FALCON_SERVER="")
    assert done.returncode == 0 and done.stderr == "", done.stderr


# --- 9. the top-level help lists every exit code, and --watch's 0 on Ctrl-C ----------------------

def test_top_level_help_lists_every_exit_code_and_the_watch_exception(cli):
    import re

    done = cli("--help", FALCON_NO_HELP_CACHE="1", COLUMNS="200")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.replace("│", " ").split())
    listed = {int(code) for code in re.findall(r"(?<![\w-])(\d+) [a-z`]", text.split(
        "Exit codes:")[1].split("Examples")[0])}
    assert listed == {int(code) for code in ExitCode}, listed
    assert "`exp list --watch` ends with 0 on Ctrl-C" in text
