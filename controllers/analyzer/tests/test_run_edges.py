"""Analysis runs at their edges on the local backend: detached children, Python's buffering,
signals, and the log of a second attempt (real runner processes, real files)."""
from __future__ import annotations

import os
import signal
from pathlib import Path

from artifacts.store import local_path
from controllers.analyzer.backends.base import run_name_for
from core.processes.proctree import descendants

from .fake_records import FakeRecordAPI
from .helpers import artifact, make_controller, runner_pids, until
from .test_controller import online, status


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _log(api, rec) -> Path:
    return local_path(api.get_record(rec.analysis_id).result_path) / "output.log"


def test_cancel_leaves_no_process_behind_not_even_one_detached_with_setsid(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path, limits={"offline": 1, "online": 1})
    pid_file, late = tmp_path / "detached.pid", tmp_path / "alive"
    # The command, with the detached shell writing its pid first (the "after 8 s").
    rec = online(api, tmp_path, plugin="slow",
                 command=f"setsid sh -c 'echo $$ > {pid_file}; sleep 40; echo alive > {late}' "
                         "& sleep 60")
    until(lambda: pid_file.exists() and pid_file.read_text().strip(), tick=c.tick)
    detached = int(pid_file.read_text())
    tree = [detached, *until(lambda: descendants(detached))]  # the shell and its `sleep 40`
    assert os.getsid(detached) == detached, "the command did detach it into its own session"
    api.update_record(rec.analysis_id, status="cancelled")
    until(lambda: not c.queues.holds(rec.analysis_id), tick=c.tick)
    until(lambda: not any(_alive(pid) for pid in tree), timeout=10)
    assert not runner_pids(run_name_for(rec.analysis_id))
    assert not late.exists()


def test_a_command_that_ends_leaves_none_of_its_detached_children_running(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    pid_file = tmp_path / "detached.pid"
    rec = online(api, tmp_path, plugin="echo-ok",
                 command=f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 40' & "
                         f"while [ ! -s {pid_file} ]; do sleep 0.05; done; "
                         "echo '{}' > \"$FALCON_RESULT_FILE\"")
    until(lambda: status(api, rec) == "succeeded", tick=c.tick)
    until(lambda: not _alive(int(pid_file.read_text())), timeout=10)


def test_python_output_reaches_the_log_while_the_command_runs(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path, plugin="slow", command="python -c \"import time; "
                 "print('early line'); time.sleep(30)\"")
    until(lambda: status(api, rec) == "running", tick=c.tick)
    until(lambda: _log(api, rec).exists() and "early line" in _log(api, rec).read_text())
    api.update_record(rec.analysis_id, status="cancelled")
    until(lambda: not c.queues.holds(rec.analysis_id), tick=c.tick)


def test_a_cancelled_run_says_terminated_by_sigterm_not_exit_code_minus_15(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path, plugin="slow", command="echo up; sleep 30")
    until(lambda: _log(api, rec).exists() and "up" in _log(api, rec).read_text(), tick=c.tick)
    api.update_record(rec.analysis_id, status="cancelled")
    until(lambda: not c.queues.holds(rec.analysis_id), tick=c.tick)
    text = _log(api, rec).read_text()
    assert "[falcon-analyzer] the command was terminated by SIGTERM" in text
    assert "exit code -15" not in text


def test_a_command_killed_by_a_signal_fails_naming_the_signal(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path, plugin="slow", command="echo up; kill -KILL $$")
    until(lambda: status(api, rec) == "failed", tick=c.tick)
    failed = api.get_record(rec.analysis_id)
    assert failed.reason == "NonZeroExit"
    assert failed.error_message.startswith("terminated by SIGKILL"), failed.error_message
    assert "exit code -9" not in _log(api, rec).read_text()


def test_a_second_attempt_replaces_the_first_attempts_log_on_a_file_root(tmp_path):
    api = FakeRecordAPI()
    flag = tmp_path / "first-attempt-ran"
    rec = api.add(status="running", attempts=1, plugin_name="echo-ok",
                  command=f"if [ -e {flag} ]; then echo second attempt; "
                          "echo '{}' > \"$FALCON_RESULT_FILE\"; "
                          f"else touch {flag}; echo first attempt; sleep 30; fi",
                  artifact_path=artifact(tmp_path),
                  result_path=(tmp_path / "results" / "x").as_uri() + "/")
    c = make_controller(api, tmp_path, backoff_seconds=0.05, max_attempts=3)
    # The record says running with no run: recovery starts attempt 2, which prints and waits ...
    until(lambda: _log(api, rec).exists() and "first attempt" in _log(api, rec).read_text(),
          tick=c.tick)
    # ... and is lost: its processes and its run folder vanish; recovery starts attempt 3.
    for pid in runner_pids(run_name_for(rec.analysis_id)):
        os.killpg(pid, signal.SIGKILL)
    until(lambda: c.backend.stop(rec.analysis_id))
    until(lambda: status(api, rec) == "succeeded", tick=c.tick)
    text = _log(api, rec).read_text()
    assert "second attempt" in text and "first attempt" not in text
    assert "[falcon-analyzer] attempt 3: this log replaces the one of the earlier attempt" in text
    assert not [p for p in _log(api, rec).parent.iterdir() if p.name.endswith(".tmp")]

