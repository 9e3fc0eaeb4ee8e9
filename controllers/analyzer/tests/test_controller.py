"""AnalyzerController's loop over an in-memory record API and the real local backend:
real runner processes, real files."""
from __future__ import annotations

import os
import random
import signal
from datetime import timedelta

from artifacts.store import local_path
from controllers.analyzer.backends.base import run_name_for
from controllers.analyzer.contract import AwaitingView
from core.testing import FakeClock

from .fake_records import T0, FakeRecordAPI
from .helpers import artifact, make_controller, runner_pids, until


def online(api, tmp_path, plugin="echo-ok", command="", **kw):
    """Create an online record the way CreateAnalysis does."""
    from .helpers import CATALOG

    api.artifact_paths[1] = artifact(tmp_path)
    return api.create_record(exp_id=1, analysis_type="online", plugin_name=plugin,
                             command=command or CATALOG[plugin].command,
                             result_root=(tmp_path / "results").as_uri(), **kw)


def status(api, rec):
    return api.get_record(rec.analysis_id).status


def test_plugin_run_succeeds_with_results_and_log(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path)
    until(lambda: status(api, rec) == "succeeded", tick=c.tick)
    done = api.get_record(rec.analysis_id)
    out = local_path(done.result_path)
    assert (out / "echo-ok.jsonl").read_text() == '{"ok": 1}\n'
    assert f"hello from {rec.analysis_id}" in (out / "output.log").read_text()
    # The plugin's resources are not enforced here, and the log's first line says so.
    assert (out / "output.log").read_text().splitlines()[0] == (
        "[falcon-analyzer] the local backend does not enforce resources (requested: "
        "cpu_request=100m, cpu_limit=1, memory_request=64Mi, memory_limit=1Gi)")
    assert "[falcon-analyzer] fetched 1 file of " in (out / "output.log").read_text()
    assert done.attempts == 1 and done.cluster_object_name == run_name_for(rec.analysis_id)
    until(lambda: not c.queues.holds(rec.analysis_id), tick=c.tick)


def test_command_with_script_and_no_results_rule(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    cmd = online(api, tmp_path, plugin="echo-ok", command="x")  # placeholder, replaced below
    api.records.pop(cmd.analysis_id)
    script = online(api, tmp_path, plugin="echo-ok")
    api.records[script.analysis_id] = api.records[script.analysis_id].__class__(
        **{**api.records[script.analysis_id].__dict__, "plugin_name": "",
           "command": '"$FALCON_SCRIPT"', "script_content": "#!/bin/sh\necho from-script\n",
           "script_bytes": 26})
    bad = online(api, tmp_path, plugin="no-results")
    until(lambda: status(api, script) in ("succeeded", "failed")
          and status(api, bad) in ("succeeded", "failed"), tick=c.tick)
    assert status(api, script) == "succeeded"
    log = (local_path(api.get_record(script.analysis_id).result_path) / "output.log").read_text()
    assert "from-script" in log
    failed = api.get_record(bad.analysis_id)
    assert failed.status == "failed" and failed.reason == "NoResults"


def test_the_script_is_saved_under_its_own_name_and_as_falcon_script(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    api.artifact_paths[1] = artifact(tmp_path)
    rec = api.create_record(
        exp_id=1, analysis_type="online", command='sh run.sh 7 && cmp run.sh "$FALCON_SCRIPT"',
        script_content='echo "run.sh says $1"\n', script_name="run.sh",
        result_root=(tmp_path / "results").as_uri())
    until(lambda: status(api, rec) in ("succeeded", "failed"), tick=c.tick)
    done = api.get_record(rec.analysis_id)
    log = (local_path(done.result_path) / "output.log").read_text()
    assert done.status == "succeeded", (done.error_message, log)
    assert "run.sh says 7" in log
    assert "does not enforce" not in log  # a command with no resources asked for none


def test_a_resource_override_on_the_local_backend_is_named_on_the_log_first_line(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path, plugin="", command="echo hi")
    c.overrides[rec.analysis_id] = {"memory_limit": "2Gi"}
    until(lambda: status(api, rec) == "succeeded", tick=c.tick)
    log = (local_path(api.get_record(rec.analysis_id).result_path) / "output.log").read_text()
    assert log.splitlines()[0] == ("[falcon-analyzer] the local backend does not enforce "
                                   "resources (requested: memory_limit=2Gi)")


def test_the_runner_starts_its_own_lines_on_a_new_line(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path, plugin="", command="printf 'no newline at the end'")
    until(lambda: status(api, rec) == "succeeded", tick=c.tick)
    log = (local_path(api.get_record(rec.analysis_id).result_path) / "output.log").read_text()
    assert log.endswith("no newline at the end\n"
                        "[falcon-analyzer] the command ended with exit code 0\n"), log


def test_log_is_written_as_the_run_goes(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path, plugin="slow")
    until(lambda: status(api, rec) == "running", tick=c.tick)
    log = local_path(api.get_record(rec.analysis_id).result_path) / "output.log"
    until(lambda: log.exists() and "first line" in log.read_text())
    assert status(api, rec) == "running"
    api.update_record(rec.analysis_id, status="cancelled", reason="Cancelled")
    until(lambda: not c.queues.holds(rec.analysis_id), tick=c.tick)
    assert "never" not in log.read_text()


def test_fifo_and_limit_per_queue(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path, limits={"offline": 1, "online": 1})
    recs = [online(api, tmp_path, plugin="slow") for _ in range(3)]
    c.tick()
    states = [status(api, r) for r in recs]
    assert states == ["running", "pending", "pending"]
    for _ in range(3):
        c.tick()
    assert [status(api, r) for r in recs] == ["running", "pending", "pending"]
    api.update_record(recs[0].analysis_id, status="cancelled")
    until(lambda: status(api, recs[1]) == "running", tick=c.tick)
    assert status(api, recs[2]) == "pending"
    for r in recs[1:]:
        api.update_record(r.analysis_id, status="cancelled")
    until(lambda: not any(c.queues.held(q) for q in ("online", "offline")), tick=c.tick)


def test_slot_held_while_the_run_is_still_alive_after_cancel(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path, limits={"offline": 1, "online": 1})
    c.backend.grace_seconds = 30  # SIGKILL only much later: the trap decides
    slow = online(api, tmp_path, plugin="slow",
                  command="trap 'sleep 1.5; exit 0' TERM; echo up; while :; do sleep 0.1; done")
    nxt = online(api, tmp_path, plugin="echo-ok")
    until(lambda: status(api, slow) == "running", tick=c.tick)
    log = local_path(api.get_record(slow.analysis_id).result_path) / "output.log"
    until(lambda: log.exists() and "up" in log.read_text())
    api.update_record(slow.analysis_id, status="cancelled")
    c.tick()
    c.tick()
    assert c.queues.holds(slow.analysis_id), "the slot is released while the run stops"
    assert status(api, nxt) == "pending"
    until(lambda: status(api, nxt) == "succeeded", tick=c.tick)
    assert not runner_pids(run_name_for(slow.analysis_id))


def test_pending_rebuilt_after_restart_in_the_same_order(tmp_path):
    api = FakeRecordAPI()
    ids = []
    times = list(range(20))
    random.Random(7).shuffle(times)
    for n in times:
        rec = api.add(analysis_id=f"an-p{n:03d}", created_at=T0 + timedelta(seconds=n),
                      analysis_type="offline" if n % 2 else "online")
        ids.append(rec.analysis_id)
    c = make_controller(api, tmp_path)
    c.recover()
    assert c.queues.pending("online") == [f"an-p{n:03d}" for n in range(0, 20, 2)]
    assert c.queues.pending("offline") == [f"an-p{n:03d}" for n in range(1, 20, 2)]


def test_terminal_records_never_readmitted_and_offline_create_idempotent(tmp_path):
    api = FakeRecordAPI()
    for st in ("succeeded", "failed", "cancelled"):
        api.add(status=st, plugin_name="echo-ok", command="echo again")
    api.awaiting = [AwaitingView(exp_id=5, exp_name="demo", exp_type="train",
                                 creator_email="u@example.com", artifact_id=9,
                                 artifact_path=artifact(tmp_path), artifact_type="profiling",
                                 plugin_name=name) for name in ("echo-ok", "slow")]
    raw = api.list_awaiting
    api.list_awaiting = lambda plugins, limit=100: [  # the server's answer may lag: retries
        a for a in api.awaiting if a.plugin_name in plugins][:limit]
    c = make_controller(api, tmp_path, catalog={k: v for k, v in
                                                __import__("controllers.analyzer.tests.helpers",
                                                           fromlist=["CATALOG"]).CATALOG.items()
                                                if k == "echo-ok"})
    c.tick()
    offline = [r for r in api.records.values() if r.analysis_type == "offline"]
    assert [r.plugin_name for r in offline] == ["echo-ok"]
    until(lambda: api.get_record(offline[0].analysis_id).status == "succeeded", tick=c.tick)
    c2 = make_controller(api, tmp_path, catalog=c.catalog)
    for _ in range(5):
        c2.tick()
    assert len([r for r in api.records.values() if r.analysis_type == "offline"]) == 1
    assert api.calls.count("create_record") >= 2  # asked again, answered ALREADY_EXISTS
    assert [r.status for r in api.records.values()] == [
        "succeeded", "failed", "cancelled", "succeeded"]
    api.list_awaiting = raw


def test_run_killed_from_outside_fails_and_frees_the_slot(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path, limits={"offline": 1, "online": 1})
    rec = online(api, tmp_path, plugin="slow")
    until(lambda: status(api, rec) == "running", tick=c.tick)
    folder = c.backend.folder(rec.analysis_id)
    until(lambda: (folder / "child.json").exists())
    pids = runner_pids(folder.name)
    assert len(pids) == 1
    os.kill(pids[0], signal.SIGKILL)
    until(lambda: status(api, rec) == "failed", tick=c.tick)
    failed = api.get_record(rec.analysis_id)
    assert failed.reason == "Killed" and "first line" in failed.error_message
    until(lambda: not c.queues.holds(rec.analysis_id), tick=c.tick)
    assert not folder.exists()


def test_timeout_fails_the_run(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path, plugin="short-timeout")
    until(lambda: status(api, rec) == "failed", tick=c.tick)
    failed = api.get_record(rec.analysis_id)
    assert failed.reason == "Timeout" and "timed out after 1 s" in failed.error_message


def test_restart_reattaches_to_the_live_run(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path, plugin="slow")
    until(lambda: status(api, rec) == "running", tick=c.tick)
    name = run_name_for(rec.analysis_id)
    until(lambda: runner_pids(name))
    c2 = make_controller(api, tmp_path)  # a new controller on the same state
    for _ in range(5):
        c2.tick()
    assert len(runner_pids(name)) == 1 and c2.queues.holds(rec.analysis_id)
    assert api.get_record(rec.analysis_id).attempts == 1
    api.update_record(rec.analysis_id, status="cancelled")
    until(lambda: not runner_pids(name) and not c2.queues.holds(rec.analysis_id), tick=c2.tick)


def test_lost_run_recreated_after_backoff_then_given_up(tmp_path):
    api = FakeRecordAPI()
    api.artifact_paths[1] = artifact(tmp_path)
    rec = api.add(status="running", attempts=1, plugin_name="slow",
                  command="echo again; sleep 30", artifact_path=artifact(tmp_path),
                  result_path=(tmp_path / "results" / "x").as_uri() + "/")
    clock = FakeClock()
    c = make_controller(api, tmp_path, backoff_seconds=0.3, max_attempts=2, clock=clock)
    c.tick()  # finds the run lost: starts it again 0.3 s (the back-off) later
    clock.advance(0.29)
    for _ in range(3):
        c.tick()
    # It waits for the back-off first: no run, no new attempt.
    assert not runner_pids(run_name_for(rec.analysis_id))
    assert api.get_record(rec.analysis_id).attempts == 1
    clock.advance(0.01)
    until(lambda: runner_pids(run_name_for(rec.analysis_id)), tick=c.tick)
    assert api.get_record(rec.analysis_id).attempts == 2
    # Lost again (state removed, processes gone): attempts are used up -> failed RunLost.
    name = run_name_for(rec.analysis_id)
    for pid in runner_pids(name):
        os.killpg(pid, signal.SIGKILL)
    until(lambda: c.backend.stop(rec.analysis_id))
    until(lambda: status(api, rec) == "failed", tick=c.tick)
    failed = api.get_record(rec.analysis_id)
    assert failed.reason == "RunLost" and "attempts 2 of 2" in failed.error_message


def test_cancel_written_while_the_controller_was_down_stops_the_run(tmp_path):
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path, plugin="slow")
    until(lambda: status(api, rec) == "running", tick=c.tick)
    name = run_name_for(rec.analysis_id)
    until(lambda: runner_pids(name))
    api.update_record(rec.analysis_id, status="cancelled")  # the API server, straight to the DB
    c2 = make_controller(api, tmp_path)
    c2.tick()
    assert c2.queues.holds(rec.analysis_id)  # held until nothing of the run is left
    until(lambda: not runner_pids(name) and not c2.queues.holds(rec.analysis_id), tick=c2.tick)
    assert status(api, rec) == "cancelled"


def test_start_refuses_to_adopt_the_run_of_another_analysis(tmp_path):
    import json

    import pytest

    from controllers.analyzer.backends.base import RunConflict, RunSpec

    c = make_controller(FakeRecordAPI(), tmp_path)
    folder = c.backend.folder("an-x")
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"analysis_id": "an-other", "pid": 1,
                                                 "start_time": 0}))
    with pytest.raises(RunConflict, match="an-other"):
        c.backend.start(RunSpec(analysis_id="an-x", exp_id=1, command="true",
                                artifact_path=artifact(tmp_path),
                                result_path=(tmp_path / "r").as_uri() + "/"))
    assert c.backend.observe(["an-x"])["an-x"].phase == "missing"
    assert run_name_for("A" * 80) != run_name_for("A" * 79 + "B")
    assert len(run_name_for("A" * 80)) <= 63


def test_a_run_sees_none_of_the_controllers_secrets(tmp_path, monkeypatch):
    """A user's command runs with a subset of the controller's environment: no token, no
    database URL, no Django secret reaches it."""
    secrets = {"FALCON_INTERNAL_TOKEN": "internal-" + "x" * 32,
               "FALCON_ANALYZER_TOKEN": "analyzer-" + "y" * 32,
               "DATABASE_URL": "mysql://root:pw@db/falcon", "DJANGO_SECRET_KEY": "z" * 50}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    api = FakeRecordAPI()
    c = make_controller(api, tmp_path)
    rec = online(api, tmp_path, plugin="echo-ok")
    api.records[rec.analysis_id] = api.records[rec.analysis_id].__class__(
        **{**api.records[rec.analysis_id].__dict__, "plugin_name": "",
           "command": 'env > "$FALCON_RESULT_FILE"'})
    until(lambda: status(api, rec) in ("succeeded", "failed"), tick=c.tick)
    assert status(api, rec) == "succeeded"
    seen = (local_path(api.get_record(rec.analysis_id).result_path) / "result.jsonl").read_text()
    assert "FALCON_ANALYSIS_ID=" + rec.analysis_id in seen
    for name, value in secrets.items():
        assert name not in seen and value not in seen


def test_a_new_leadership_term_recovers_from_the_records_not_from_memory(tmp_path):
    """What a replica knew in an earlier term is dropped when it leads again: a record another
    leader finished meanwhile is not queued any more, and one created meanwhile is."""
    api = FakeRecordAPI()
    first = api.add(analysis_id="an-term1", created_at=T0, analysis_type="online")
    c = make_controller(api, tmp_path)
    c.recover()
    assert c.queues.pending("online") == ["an-term1"]
    # Another replica led for a while: it finished the first record and a user made another.
    api.records[first.analysis_id] = api.records[first.analysis_id].__class__(
        **{**api.records[first.analysis_id].__dict__, "status": "cancelled"})
    api.add(analysis_id="an-term2", created_at=T0 + timedelta(seconds=1), analysis_type="online")
    c.reset()
    c.recover()
    assert c.queues.pending("online") == ["an-term2"]
