"""`falcon analysis` and `falcon plugins` over the wire, against a real HTTP server answering the
Data Analyzer's API as docs/analyzer.md states it (`analyzer_stub.py`)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import jwt
import pytest

from cli.exit_codes import ExitCode
from cli.token_cache import CredentialStore, Session

from .analyzer_stub import AnalyzerStub, analysis_id
from .conftest import EMAIL, Falcon, one_line

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
# The ids of the first analyses the stub stores (strings like `an-6b86b273ff34fce1`).
A1, A2, A3, A4, A5 = (analysis_id(n) for n in range(1, 6))
UNAVAILABLE = ("error: the analyzer controller is unavailable; records stay readable "
               "(falcon analysis list/get)")


@pytest.fixture
def analyzer():
    stub = AnalyzerStub()
    yield stub
    stub.close()


@pytest.fixture
def state(analyzer):
    return analyzer.state


@pytest.fixture
def cli(analyzer, tmp_path) -> Falcon:
    """The CLI pointed at the stub server, with a cached session for it."""
    falcon = Falcon(server=analyzer.url, config_dir=tmp_path / "falcon-config")
    expires = int(time.time()) + 3600
    token = jwt.encode({"sub": EMAIL, "email": EMAIL, "exp": expires}, "k" * 32,
                       algorithm="HS256")
    CredentialStore(falcon.config_dir).put(Session(server=analyzer.url, token=token, email=EMAIL,
                                                   expires_at=expires, method="local",
                                                   obtained_at=int(time.time())))
    return falcon


class Script:
    """An injected `sleep`: each call applies the next step and advances a fake clock."""

    def __init__(self, steps=()):
        self.steps = list(steps)
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.steps:
            self.steps.pop(0)()

    def monotonic(self) -> float:
        return self.now


def _scripted(cli: Falcon, *steps) -> Script:
    script = Script(steps)
    cli.sleep, cli.monotonic = script.sleep, script.monotonic
    return script


def _unwrapped(text: str) -> str:
    """A usage error's box of rich-click, as one line."""
    return re.sub(r"[\s│╭╮╰╯─]+", " ", text)


# --- create ------------------------------------------------------------------------------------

def test_create_with_a_plugin_sends_the_contract_body(cli, state):
    result = cli("analysis", "create", "--exp", "1", "--plugin", "trace-summary", "--name",
                 "top-ops", "--cpu-request", "500m", "--memory-limit", "2Gi", "-o", "json")
    assert result.exit_code == 0, result.output
    created = json.loads(result.stdout)
    assert created["id"] == A1 and created["status"] == "pending"
    assert created["plugin_name"] == "trace-summary" and created["name"] == "top-ops"
    assert state.created_bodies[A1] == {"exp_id": 1, "plugin": "trace-summary", "name": "top-ops",
                                       "resources": {"cpu_request": "500m",
                                                     "memory_limit": "2Gi"}}


def test_create_with_a_command_and_script_sends_the_script_verbatim(cli, state, files):
    script = "import sys\r\nprint('caf\u00e9 \U0001f985')\n\n  # trailing  "
    result = cli("analysis", "create", "--exp", "2", "--command", "python script.py",
                 "--script", files("script.py", script))
    assert result.exit_code == 0, result.output
    assert state.created_bodies[A1] == {"exp_id": 2, "command": "python script.py",
                                       "script": script, "script_name": "script.py"}
    for text in ("python script.py", "Pending", "queue position", f"yes ({len(script.encode())} "
                 "bytes)"):
        assert text in result.stdout


@pytest.mark.parametrize("args,which", [
    (["--plugin", "trace-summary", "--command", "ls"], "both were given"),
    ([], "neither was given"),
])
def test_plugin_and_command_are_exclusive_and_one_is_required(cli, state, args, which):
    result = cli("analysis", "create", "--exp", "1", *args)
    assert result.exit_code == ExitCode.USAGE, result.output
    text = _unwrapped(result.stderr)
    assert f"give exactly one of --plugin NAME and --command CMD ({which})" in text
    assert state.requests == []


@pytest.mark.parametrize("option", ["--command", "--plugin"])
def test_an_empty_command_or_plugin_is_named_as_empty(cli, state, option):
    result = cli("analysis", "create", "--exp", "1", option, " ")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert f"{option} is empty" in _unwrapped(result.stderr)
    assert state.requests == []


def test_script_without_command_is_a_usage_error(cli, state, files):
    for extra in ([], ["--plugin", "trace-summary"]):
        result = cli("analysis", "create", "--exp", "1", "--script", files("s.sh", "ls\n"),
                     *extra)
        assert result.exit_code == ExitCode.USAGE, result.output
        assert "--script FILE is run by a --command; give --command CMD too" in \
            _unwrapped(result.stderr)
    assert state.requests == []


def test_timeout_without_wait_is_a_usage_error(cli, state):
    result = cli("analysis", "create", "--exp", "1", "--plugin", "x", "--timeout", "5")
    assert result.exit_code == ExitCode.USAGE
    assert "--timeout applies to --wait" in _unwrapped(result.stderr)
    assert state.requests == []


def test_a_script_over_1_mib_is_refused_locally_and_exactly_1_mib_is_sent(cli, state, files):
    big = files("big.sh", b"#" * (MIB + 1))
    result = cli("analysis", "create", "--exp", "1", "--command", "sh big.sh", "--script", big)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert one_line(result.stderr) == (f"error: script file {big} is 1,048,577 bytes; --script "
                                       "accepts a file of at most 1,048,576 bytes")
    assert state.requests == []

    exact = files("exact.sh", b"#" * MIB)
    result = cli("analysis", "create", "--exp", "1", "--command", "sh exact.sh", "--script",
                 exact, "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["script_bytes"] == MIB
    assert state.created_bodies[A1]["script"] == "#" * MIB


def test_a_script_that_is_not_utf8_or_missing_is_refused_locally(cli, state, files, tmp_path):
    bad = files("bad.sh", "echo caf\xe9\n".encode("latin-1"))
    result = cli("analysis", "create", "--exp", "1", "--command", "sh", "--script", bad)
    assert result.exit_code == ExitCode.USAGE
    assert "is not UTF-8 text (byte 0xe9 at offset 8)" in one_line(result.stderr)
    missing = str(tmp_path / "nope.sh")
    result = cli("analysis", "create", "--exp", "1", "--command", "sh", "--script", missing)
    assert one_line(result.stderr) == f"error: script file {missing}: no such file"
    assert state.requests == []


def test_create_errors_name_the_field_the_experiment_or_the_controller(cli, state):
    result = cli("analysis", "create", "--exp", "1", "--plugin", "nope", "--cpu-limit", "lots")
    assert result.exit_code == ExitCode.INVALID, result.output
    line = one_line(result.stderr)
    assert "plugin: No plugin named 'nope'." in line
    assert "resources.cpu_limit: Not a Kubernetes quantity: 'lots'." in line

    result = cli("analysis", "create", "--exp", "99", "--plugin", "trace-summary")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert one_line(result.stderr) == \
        "error: no experiment 99 (Experiment 99 does not exist.)"

    result = cli("analysis", "create", "--exp", "3", "--plugin", "trace-summary")
    assert result.exit_code == ExitCode.CONFLICT
    assert one_line(result.stderr) == "error: Experiment 3 has not finished."

    state.controller_up = False
    result = cli("analysis", "create", "--exp", "1", "--plugin", "trace-summary")
    assert result.exit_code == ExitCode.UNAVAILABLE == 9
    assert one_line(result.stderr) == UNAVAILABLE
    assert state.analyses == {}

    result = cli("analysis", "create", "--exp", "0", "--plugin", "trace-summary")
    assert result.exit_code == ExitCode.USAGE
    assert "'0' is not an experiment id" in _unwrapped(result.stderr)


# --- create --wait -----------------------------------------------------------------------------

def test_wait_shows_status_and_queue_position_until_succeeded(cli, state):
    state.add(status="pending")  # ahead in the queue
    script = _scripted(
        cli,
        lambda: None,
        lambda: (state.move(A1, "running"), state.analyses[A2].update(queue_position=1)),
        lambda: state.move(A2, "running"),
        lambda: None,
        lambda: state.move(A2, "succeeded", result_path=f"/store/analysis/1/{A2}/"),
    )
    result = cli("analysis", "create", "--exp", "1", "--plugin", "trace-summary", "--wait")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:5] == [
        f"created analysis {A2}",
        f"[0s] analysis {A2} Pending (queue position 2)",
        f"[4s] analysis {A2} Pending (queue position 1)",
        f"[6s] analysis {A2} Running",
        f"[10s] analysis {A2} Succeeded",
    ]
    assert f"/store/analysis/1/{A2}/" in result.stdout  # then the analysis
    assert script.slept == [2.0] * 5


@pytest.mark.parametrize("end,detail", [
    ({"status": "failed", "reason": "PluginFailed", "error_message": "no trace files"},
     " (PluginFailed: no trace files)"),
    ({"status": "cancelled", "reason": "Cancelled"}, " (Cancelled)"),
])
def test_wait_exits_non_zero_when_the_analysis_failed_or_was_cancelled(cli, state, end, detail):
    _scripted(cli, lambda: state.move(A1, end.pop("status"), **end))
    result = cli("analysis", "create", "--exp", "1", "--plugin", "trace-summary", "--wait",
                 "-o", "json")
    assert result.exit_code == ExitCode.ANALYSIS_FAILED == 11, result.output
    final = json.loads(result.stdout)  # only the final analysis on stdout
    assert final["status"] in ("failed", "cancelled")
    assert f"[0s] analysis {A1} Pending (queue position 1)" in result.stderr
    assert result.stderr.splitlines()[-1] == \
        f"error: analysis {A1} ended {final['status'].capitalize()}{detail}"


def test_wait_gives_up_after_the_timeout(cli, state):
    script = _scripted(cli)
    result = cli("analysis", "create", "--exp", "1", "--plugin", "trace-summary", "--wait",
                 "--timeout", "5")
    assert result.exit_code == ExitCode.TIMEOUT
    assert result.stderr.splitlines()[-1] == \
        f"error: gave up waiting for analysis {A1} after 5s; it is still pending"
    assert script.slept == [2.0, 2.0, 1.0]


def test_wait_rides_out_a_controller_outage_since_records_stay_readable(cli, state):
    _scripted(cli, lambda: setattr(state, "controller_up", False),
              lambda: state.move(A1, "succeeded"))
    result = cli("analysis", "create", "--exp", "1", "--plugin", "trace-summary", "--wait")
    assert result.exit_code == 0, result.output


# --- list and get ------------------------------------------------------------------------------

def _five(state):
    state.add(exp_id=1, plugin_name="trace-summary", status="succeeded", analysis_type="offline",
              attempts=1, started_at="2025-04-15T12:00:00+00:00",
              finished_at="2025-04-15T12:02:05+00:00")
    state.add(exp_id=1, plugin_name=None, command="ls", status="failed", attempts=2)
    state.add(exp_id=2, plugin_name="bench-summary", status="running")
    state.add(exp_id=2, plugin_name="trace-summary", name="mine")
    state.add(exp_id=1, plugin_name="trace-summary", status="cancelled")


def test_list_shows_the_columns_and_follows_pages(cli, state):
    _five(state)
    result = cli("analysis", "list")
    assert result.exit_code == 0, result.output
    assert re.search(r"ID\s+NAME\s+EXP\s+TYPE\s+PLUGIN\s+STATUS\s+ATTEMPTS\s+CREATED\s+DURATION",
                     result.stdout)
    assert "2m05s" in result.stdout and "(command)" in result.stdout and "offline" in \
        result.stdout
    # Five analyses in pages of 2: three requests, all to the stub (the next link names another
    # host; only its cursor is used).
    assert [r[1].split("?")[0] for r in state.requests] == ["/api/v1/analyses"] * 3

    def ids(*args):
        result = cli("analysis", "list", "-o", "json", *args)
        assert result.exit_code == 0, result.output
        return [a["id"] for a in json.loads(result.stdout)]

    assert ids() == [A5, A4, A3, A2, A1]  # newest first, whatever the ids' own order
    assert ids("--exp", "1") == [A5, A2, A1]
    assert ids("--status", "RUNNING") == [A3]
    assert ids("--type", "offline") == [A1]
    assert ids("--plugin", "trace-summary", "--exp", "2") == [A4]
    state.requests.clear()
    assert ids("--limit", "3") == [A5, A4, A3]
    assert len(state.requests) == 2
    assert state.requests[0][1] == "/api/v1/analyses"
    empty = cli("analysis", "list", "--exp", "77")
    assert empty.stdout == "" and "No analyses match." in empty.stderr
    assert cli("analysis", "list", "--status", "Bogus").exit_code == ExitCode.USAGE
    assert cli("analysis", "list", "--type", "nightly").exit_code == ExitCode.USAGE


def test_list_and_get_show_the_same_duration(cli, state):
    state.add(status="succeeded", started_at="2026-01-01T00:00:00.200000+00:00",
              finished_at="2026-01-01T00:00:00.900000+00:00")
    listed = cli("analysis", "list").stdout
    got = cli("analysis", "get", A1).stdout
    assert re.search(r"duration\s+1s", got), got
    assert re.search(rf"{A1}.*\s1s\s*$", listed, re.M), listed


def test_list_and_get_work_while_the_controller_is_down(cli, state):
    _five(state)
    state.controller_up = False
    assert cli("analysis", "list").exit_code == 0
    assert cli("analysis", "get", A1).exit_code == 0


def test_get_shows_every_field_the_queue_position_and_the_error(cli, state):
    state.add(status="pending", queue_position=3, name="queued")
    state.add(status="failed", error_message="trace-summary: no trace files under /in",
              reason="PluginFailed", attempts=2)
    result = cli("analysis", "get", A1)
    assert result.exit_code == 0, result.output
    assert re.search(rf"id\s+{A1}", result.stdout)
    assert re.search(r"queue position\s+3", result.stdout)
    assert "error" not in result.stdout
    result = cli("analysis", "get", A2)
    assert "queue position" not in result.stdout
    assert re.search(r"error\s+trace-summary: no trace files under /in", result.stdout)
    assert "PluginFailed" in result.stdout
    # A cancellation is no error: its message is labelled so.
    state.add(status="cancelled", error_message="cancelled by alice@example.com",
              reason="Cancelled")
    result = cli("analysis", "get", A3)
    assert re.search(r"message\s+cancelled by alice@example.com", result.stdout)
    assert not re.search(r"^\s*error\s", result.stdout, re.M)
    got = json.loads(cli("analysis", "get", A1, "-o", "json").stdout)
    assert got == state.analyses[A1] and got["id"] == A1
    import yaml

    assert yaml.safe_load(cli("analysis", "get", A2, "-o", "yaml").stdout) == state.analyses[A2]


UNKNOWN = "an-00000000000000ff"


@pytest.mark.parametrize("args", [["get"], ["cancel"], ["delete", "--yes"], ["logs"],
                                  ["results"]])
@pytest.mark.parametrize("unknown", [UNKNOWN, "42"])  # digits alone are a DNS-1123 label too
def test_an_unknown_analysis_is_one_line_and_not_found(cli, state, args, unknown):
    state.add()
    result = cli("analysis", *args, unknown)
    assert result.exit_code == ExitCode.NOT_FOUND, result.output
    assert one_line(result.stderr) == f"error: no analysis {unknown} (see `falcon analysis list`)"
    assert state.requests[0][1].startswith(f"/api/v1/analyses/{unknown}")


@pytest.mark.parametrize("command", [["get"], ["cancel"], ["delete", "--yes"], ["logs"],
                                     ["results"]])
@pytest.mark.parametrize("bad", [
    "-3", "an-1-", "An-127d556979606b76", "an_127d556979606b76", "an.1", "an 1", "an/1",
    "an-127d556979606b76\n", "", "\u0430n-1", "an-\uff11", "a" * 41,
])
def test_ids_are_checked_before_any_request(cli, state, command, bad):
    result = cli("analysis", *command, "--", bad)
    assert result.exit_code == ExitCode.USAGE, result.output
    text = _unwrapped(result.stderr)
    assert "is not an analysis id: ids are lower-case letters, digits and '-' (not first or " \
        "last), at most 40 characters, e.g. an-127d556979606b76 (see `falcon analysis list`)" \
        in text
    assert state.requests == []


@pytest.mark.parametrize("good", ["an-127d556979606b76", "7", "a" * 40, "x-y--z", "0a"])
def test_any_dns_label_of_at_most_40_characters_is_an_id(cli, state, good):
    state.add(id=good, status="succeeded")
    result = cli("analysis", "get", good, "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == good
    assert state.requests[0][1] == f"/api/v1/analyses/{good}"


def test_not_logged_in_is_exit_5(cli, tmp_path):
    stranger = Falcon(server=cli.server, config_dir=tmp_path / "nobody")
    result = stranger("analysis", "list")
    assert result.exit_code == ExitCode.AUTH
    assert "falcon auth login" in result.stderr


# --- logs --------------------------------------------------------------------------------------

def test_logs_prints_what_there_is_stitching_pages(cli, state):
    state.add(status="running")
    state.logs[A1] = "step 1\n\u00e9t\u00e9 \U0001f985\nstep 2\n".encode()
    state.log_page_bytes = 5  # pages end mid-character: the stub cuts before it
    result = cli("analysis", "logs", A1)
    assert result.exit_code == 0, result.output
    assert result.stdout == state.logs[A1].decode()
    offsets = [int(re.search(r"offset=(\d+)", r[1]).group(1)) for r in state.requests]
    assert offsets[0] == 0 and offsets == sorted(offsets) and len(offsets) > 5
    assert result.stderr == ""


def test_logs_help_and_cli_docs_say_the_log_is_text_and_logs_takes_no_output_option(cli):
    text = " ".join(cli("analysis", "logs", "--help").stdout.split())
    assert "a pipe gets the log as is" not in text
    assert "a byte that is not UTF-8 shown as U+FFFD" in text
    readme = " ".join((ROOT / "docs/cli.md").read_text(encoding="utf-8").split())
    assert "Every read command takes `-o table|json|yaml`" in readme
    assert "except `analysis logs` (the log as text" in readme


def test_logs_of_a_pending_analysis_print_the_note_at_once(cli, state):
    state.add(status="pending")
    state.logs[A1] = b""
    note = "the analysis is pending (queue position 2); its log starts when it runs"
    state.log_notes[A1] = note

    def start():
        state.move(A1, "succeeded")
        state.logs[A1] = b"ran\n"
        state.log_complete.add(A1)
        state.log_notes[A1] = None

    script = _scripted(cli, start)
    result = cli("analysis", "logs", A1, "--follow")
    assert result.exit_code == 0, result.output
    assert result.stdout == "ran\n" and one_line(result.stderr) == f"note: {note}"
    assert script.slept == [2.0]
    result = cli("analysis", "logs", A1)
    assert result.stderr == ""
    state.logs[A1], state.log_notes[A1] = b"", note
    result = cli("analysis", "logs", A1)
    assert result.stdout == "" and one_line(result.stderr) == f"note: {note}"


def test_logs_follow_polls_until_complete_and_prints_the_note(cli, state):
    state.add(status="running")
    state.logs[A1] = b"starting\n"

    def grow(text: bytes, done: bool = False):
        def step():
            state.logs[A1] += text
            if done:
                state.move(A1, "succeeded")
                state.log_complete.add(A1)
                state.log_notes[A1] = "the log was cut at 10 MiB"
        return step

    script = _scripted(cli, lambda: None, grow(b"half"), grow(b"way\n"),
                       grow(b"done\n", done=True))
    result = cli("analysis", "logs", A1, "--follow")
    assert result.exit_code == 0, result.output
    assert result.stdout == "starting\nhalfway\ndone\n"
    assert one_line(result.stderr) == "note: the log was cut at 10 MiB"
    assert script.slept == [2.0] * 4
    offsets = [re.search(r"offset=(\d+)", r[1]).group(1) for r in state.requests]
    assert offsets == ["0", "9", "9", "9", "13", "13", "17", "17"]


def test_logs_of_a_finished_analysis_stop_at_complete(cli, state):
    state.add(status="failed")
    state.logs[A1] = b"Traceback ...\n"
    state.log_complete.add(A1)
    result = cli("analysis", "logs", A1, "-f")
    assert result.exit_code == 0 and result.stdout == "Traceback ...\n"
    assert len(state.requests) == 1


def test_logs_need_the_controller(cli, state):
    state.add(status="running")
    state.controller_up = False
    result = cli("analysis", "logs", A1)
    assert result.exit_code == ExitCode.UNAVAILABLE
    assert one_line(result.stderr) == UNAVAILABLE


# --- results -----------------------------------------------------------------------------------

STORED = [
    '{"kind":"meta","plugin":"trace-summary","version":1,"inputs":[{"path":"a.json.gz"}]}',
    '{"kind":"op","name":"fusion.1","total_us":1234.5,"count":3,"device":"TPU:0"}',
    '{"kind":"op","name":"caf\u00e9 \U0001f985","total_us":1e-05,"count":1,"device":null}',
    '{"z":1,"a":{"nested":[1,2,{"x":"y"}]},"kind":"step"}',
]


def test_results_json_prints_the_stored_lines_exactly(cli, state):
    state.add(status="succeeded")
    state.results[A1] = STORED
    result = cli("analysis", "results", A1, "-o", "json")
    assert result.exit_code == 0, result.output
    assert result.stdout == "".join(line + "\n" for line in STORED)
    assert result.stderr == ""


def test_results_of_a_command_are_key_value_tables(cli, state):
    state.add(status="succeeded", plugin_name=None, command="python x.py")
    state.results[A1] = ['{"metric":"latency_ms","p50":12.5}', '{"metric":"tps","p50":980}',
                        '{"kind":"note","text":"\\u001b[31mred"}']
    result = cli("analysis", "results", A1)
    assert result.exit_code == 0, result.output
    assert re.search(r"metric\s+p50", result.stdout)
    assert re.search(r"latency_ms\s+12\.5", result.stdout)
    assert "\x1b" not in result.stdout and "\\x1b[31mred" in result.stdout


def test_results_of_a_plugin_render_does_not_know_are_key_value_tables(cli, state):
    state.add(status="succeeded", plugin_name="no-such-renderer")
    state.results[A1] = STORED
    result = cli("analysis", "results", A1)
    assert result.exit_code == 0, result.output
    assert "fusion.1" in result.stdout and "caf\u00e9" in result.stdout
    assert re.search(r"NAME\s+TOTAL_US\s+COUNT\s+DEVICE", result.stdout, re.I)


TRACE = [
    {"kind": "meta", "plugin": "trace-summary", "version": 1, "inputs": [{"path": "p.json.gz"}]},
    {"kind": "group", "input": "p.json.gz", "group": "TPU:0", "slices": 40, "ops": 2,
     "busy_us": 900.5},
    {"kind": "op", "input": "p.json.gz", "group": "TPU:0", "name": "fusion.7", "count": 10,
     "total_us": 800.0, "self_us": 700.0, "mean_us": 80.0, "max_us": 95.0},
    {"kind": "op_total", "input": "p.json.gz", "name": "fusion.7", "count": 10,
     "total_us": 800.0, "self_us": 700.0, "groups": 1},
]


def test_results_of_a_built_in_plugin_use_its_tables(cli, state):
    state.add(status="succeeded", plugin_name="trace-summary")
    state.results[A1] = [json.dumps(r, separators=(",", ":")) for r in TRACE]
    result = cli("analysis", "results", A1)
    assert result.exit_code == 0, result.output
    for title in ("p.json.gz: groups", "p.json.gz: TPU:0", "p.json.gz: all groups"):
        assert title in result.stdout
    assert re.search(r"name\s+count\s+total_us\s+self_us\s+mean_us\s+max_us", result.stdout)
    assert re.search(r"fusion\.7\s+10\s+800\s+700\s+80\s+95\b", result.stdout)
    assert "meta" not in result.stdout  # the renderer's tables, not the generic ones

    state.add(status="succeeded", plugin_name="bench-summary")
    state.results[A2] = ['{"kind":"metric","metric":"latency_ms","count":3,"mean":2.5,"min":1,'
                        '"p50":2,"p90":4,"p99":4,"max":4}']
    result = cli("analysis", "results", A2)
    assert result.exit_code == 0, result.output
    assert "metrics" in result.stdout
    assert re.search(r"latency_ms\s+3\s+2\.5\s+1\s+2\s+4\s+4\s+4", result.stdout)


@pytest.mark.parametrize("plugin_name", ["bench-summary", None])
def test_result_numbers_are_rounded_for_reading_and_never_split(cli, state, plugin_name):
    state.add(status="succeeded", plugin_name=plugin_name, command="" if plugin_name else "x")
    line = ('{"kind":"metric","metric":"step_time_seconds_of_the_whole_training_loop",'
            '"count":1234567,"mean":5.3809999826626154e-05,"min":5.3809999826626154e-05,'
            '"p50":5.3809999826626154e-05,"p90":123456.789,"p99":0.1,"max":7.0,'
            '"wall_us":1234567.8,"output_bytes":1572864}')
    state.results[A1] = [line]
    cli.environ["COLUMNS"] = "60" if plugin_name else "200"
    result = cli("analysis", "results", A1)
    assert result.exit_code == 0, result.output
    assert "5.381e-05" in result.stdout and "1.235e+05" in result.stdout
    assert "5.3809999826626154" not in result.stdout
    if plugin_name is None:  # the generic tables follow the same rules
        assert "1,234,568" in result.stdout and "1.5 MiB" in result.stdout
    # No number is split over two lines: every cell of a number holds it whole or cut with …
    for token in re.findall(r"[\d.,e+-]{3,}", result.stdout):
        assert token.rstrip(",") in line or token in ("5.381e-05", "1.235e+05", "1,234,567",
                                                     "1,234,568", "0.1", "7", "1.5"), (token,
                                                                                result.stdout)
    json_out = cli("analysis", "results", A1, "-o", "json").stdout
    assert json_out == line + "\n"  # exact


def test_records_a_renderer_cannot_read_fall_back_to_key_value_tables(cli, state):
    state.add(status="succeeded", plugin_name="hlo-stats")
    state.results[A1] = ['{"kind":"module","file":"m.txt"}']  # no entry_opcodes
    result = cli("analysis", "results", A1)
    assert result.exit_code == 0, result.output
    assert "m.txt" in result.stdout
    assert one_line(result.stderr).startswith(
        "note: the hlo-stats records do not have the shape its tables expect (KeyError")


def test_lines_that_are_not_records_are_named_on_stderr_not_mixed_into_records(cli, state):
    state.add(status="succeeded", plugin_name=None, command="x")
    state.results[A1] = ['{"a":1}', "oops", '{"kind":"unparsable","line":2}']
    result = cli("analysis", "results", A1, "-o", "json")
    assert result.exit_code == 0, result.output
    assert result.stdout == '{"a":1}\n{"kind":"unparsable","line":2}\n'
    assert one_line(result.stderr) == ("note: 1 line of result.jsonl could not be read: line 2: "
                                       "not JSON: Expecting value at column 1")


def test_truncated_results_say_so_on_stderr(cli, state):
    state.add(status="succeeded")
    state.results[A1] = STORED[:2]
    state.truncated.add(A1)
    result = cli("analysis", "results", A1, "-o", "json")
    assert result.exit_code == 0
    assert result.stdout == "".join(line + "\n" for line in STORED[:2])
    assert one_line(result.stderr) == (f"note: the results of analysis {A1} are truncated: only "
                                       "the first 2 records of trace-summary.jsonl are shown")


def test_no_results_yet_is_not_found_and_says_why(cli, state):
    state.add(status="running")
    result = cli("analysis", "results", A1)
    assert result.exit_code == ExitCode.NOT_FOUND
    assert one_line(result.stderr) == \
        f"error: analysis {A1} has no results yet: result.jsonl does not exist; it is running"
    state.move(A1, "failed")
    result = cli("analysis", "results", A1)
    assert one_line(result.stderr) == \
        f"error: analysis {A1} has no results: result.jsonl does not exist; it is failed"
    assert cli("analysis", "results", A1, "-o", "yaml").exit_code == ExitCode.NOT_FOUND


# --- cancel and delete -------------------------------------------------------------------------

def test_cancel_is_harmless_when_repeated(cli, state):
    state.add(status="running")
    result = cli("analysis", "cancel", A1)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"analysis {A1} is cancelled\n"
    again = json.loads(cli("analysis", "cancel", A1, "-o", "json").stdout)
    assert again["status"] == "cancelled"
    state.controller_up = False
    result = cli("analysis", "cancel", A1)
    assert result.exit_code == ExitCode.UNAVAILABLE
    assert one_line(result.stderr) == UNAVAILABLE


def test_delete_a_finished_analysis_and_refuse_a_running_one(cli, state):
    state.add(status="running")
    state.add(status="succeeded")
    result = cli("analysis", "delete", A1, "--yes")
    assert result.exit_code == ExitCode.CONFLICT
    assert one_line(result.stderr) == (
        f"error: Analysis {A1} is running; only succeeded, failed, cancelled or skipped "
        f"analyses can be deleted. Cancel it first (`falcon analysis cancel {A1}`)")
    result = cli("analysis", "delete", A2, "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"deleted analysis {A2}\n"
    assert state.requests[-1][:2] == ("DELETE", f"/api/v1/analyses/{A2}")


def test_purge_asks_on_a_terminal_and_refuses_without_one(cli, state):
    state.add(status="failed")
    state.results[A1] = STORED
    result = cli("analysis", "delete", A1, "--purge")
    assert result.exit_code == ExitCode.USAGE
    assert "without a terminal to confirm it, pass --yes" in _unwrapped(result.stderr)
    assert state.requests == []

    cli.interactive = lambda: True
    result = cli("analysis", "delete", A1, "--purge", input="n\n")
    assert result.exit_code == ExitCode.ERROR
    assert f"analysis {A1} was not deleted" in result.stderr
    assert state.requests == [] and A1 in state.analyses

    result = cli("analysis", "delete", A1, "--purge", input="y\n")
    assert result.exit_code == 0, result.output
    assert f"deleted analysis {A1} with its results and log" in result.stdout
    assert state.requests == [("DELETE", f"/api/v1/analyses/{A1}?purge=true", None)]
    assert A1 not in state.results


def test_purge_with_yes_asks_nothing(cli, state):
    state.add(status="cancelled")
    result = cli("analysis", "delete", A1, "--purge", "--yes")
    assert result.exit_code == 0, result.output
    assert state.requests == [("DELETE", f"/api/v1/analyses/{A1}?purge=true", None)]


# --- plugins -----------------------------------------------------------------------------------

def test_plugins_list_and_get(cli, state):
    result = cli("plugins", "list")
    assert result.exit_code == 0, result.output
    assert re.search(r"trace-summary\s+profiling\s+30m00s", result.stdout)
    assert "bench-summary" in result.stdout
    listed = json.loads(cli("plugins", "list", "-o", "json").stdout)
    assert [p["name"] for p in listed] == ["trace-summary", "bench-summary"]

    result = cli("plugins", "get", "bench-summary")
    assert result.exit_code == 0, result.output
    assert "cpu 250m/1, memory 256Mi/1Gi" in result.stdout
    assert "600 s" in result.stdout
    got = json.loads(cli("plugins", "get", "bench-summary", "-o", "json").stdout)
    assert got["artifact_types"] == ["benchmark"]

    result = cli("plugins", "get", "nope")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert one_line(result.stderr) == "error: no plugin 'nope' (see `falcon plugins list`)"

    state.controller_up = False
    for args in (["list"], ["get", "bench-summary"]):
        result = cli("plugins", *args)
        assert result.exit_code == ExitCode.UNAVAILABLE
        assert one_line(result.stderr) == UNAVAILABLE


# --- start-up ----------------------------------------------------------------------------------

def test_analysis_help_imports_no_django_nor_httpx():
    probe = ("import sys, json\nfrom cli.main import main\n"
             "for args in (['analysis', '--help'], ['analysis', 'create', '--help'], "
             "['plugins', '--help']):\n"
             "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert loaded.isdisjoint({"django", "httpx", "yaml", "jwt"}), loaded
    assert "falcon analysis create" in done.stdout or "analysis create" in done.stdout
