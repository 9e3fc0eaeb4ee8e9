"""LocalBackend with real processes, per docs/cluster-behaviours.md: env, status mapping (CB-5,
CB-6, CB-9), abort (CB-13, CB-14), restart (CB-3), vanished jobs (CB-12). No database; every wait
polls with a deadline."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest

from controllers.contract import JobView
from core.domain.taskspec import TaskSpec
from controllers.cluster_backends import (
    ClusterJobStatus,
    LocalBackend,
    SubmitResult,
    cluster_job_name_for,
)
from controllers.cluster_backends.local import RUNNER
from core.testing import wait_until as poll_until

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 60.0


def wait_for(check, timeout: float = DEADLINE, what: str = "condition"):
    """Poll `check` until it returns a truthy value, which is returned; fail after `timeout`."""
    return poll_until(check, timeout=timeout, what=what)


def process_alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie (a zombie has no code left to run)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        # The entry can vanish between open and read: Linux then fails the read with ESRCH.
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def make_job(tmp_path: Path, command: str, *, job_id: int = 1, exp_id: int = 7,
             role: str = "main", replica: int = 1, envs=None, config: str = "",
             artifact_path: str | None = None, **spec) -> JobView:
    task_spec = {"command": command, "replica": replica, "image": "", "device_count": 0,
                 "device_type": "", "device_topo": "", "envs": envs or {}, **spec}
    return JobView(
        id=job_id, exp_id=exp_id, exp_name="demo-exp", exp_status="Running", role=role,
        cluster_name="local", exp_type="profiling", task_spec=TaskSpec.from_json(task_spec),
        artifact_path=artifact_path or (tmp_path / "artifacts" / f"{exp_id}-{role}").as_uri(),
        config=config, status="Pending")


def manifest_of(backend: LocalBackend, job: JobView) -> dict:
    return json.loads((backend.state_dir / backend.name_of(job) / "manifest.json").read_text())


def runner_pids(backend: LocalBackend, job: JobView) -> list[int]:
    return [rec["pid"] for rec in manifest_of(backend, job)["replicas"].values()]


@pytest.fixture
def state_dir(tmp_path):
    """A state directory whose leftover process groups are killed after the test."""
    path = tmp_path / "state"
    yield path
    for manifest in path.glob("*/manifest.json"):
        for rec in json.loads(manifest.read_text())["replicas"].values():
            if process_alive(rec["pid"]):
                try:
                    os.killpg(rec["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def backend(state_dir):
    return LocalBackend(state_dir, grace_seconds=0.5, stop_wait_seconds=0.1)


def test_cluster_job_name_is_deterministic_dns1123_and_unique():
    name = cluster_job_name_for(exp_id=12, exp_name="Model_Profiling.001", role="main")
    assert name == "falcon-12-model-profiling-001-main"
    long_a = cluster_job_name_for(exp_id=12, exp_name="x" * 128, role="a" * 63)
    long_b = cluster_job_name_for(exp_id=12, exp_name="x" * 128, role="a" * 62 + "b")
    for value in (name, long_a, long_b):
        assert len(value) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value)
    assert long_a != long_b and long_a.startswith("falcon-12-")
    assert re.search(r"-[0-9a-f]{8}$", long_a)
    assert long_a == cluster_job_name_for(exp_id=12, exp_name="x" * 128, role="a" * 63)
    assert cluster_job_name_for(exp_id=1, exp_name="e", role="main") != \
        cluster_job_name_for(exp_id=11, exp_name="e", role="main")


def test_two_replicas_succeed_and_see_env_config_and_artifact_dir(backend, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("FALCON_TEST_SECRET", "must-not-leak")
    config = "model: qwen/qwen3-32b\nname: 'Ünïcode ✓ 模型'\n  quoted: \"a b\" $HOME `x`\n"
    artifact_url = (tmp_path / "art dir" / "7-demo").as_uri()  # a space: percent-encoded
    dump = ("import json, os; p = os.environ['FALCON_ARTIFACT_PATH']; "
            "open(os.path.join(p, 'env-%s.json' % os.environ['FALCON_REPLICA_INDEX']), 'w')"
            ".write(json.dumps(dict(os.environ)))")
    job = make_job(tmp_path, f'python -c "{dump}"', replica=2, config=config,
                   envs={"LOG_LEVEL": "info"}, artifact_path=artifact_url,
                   image="gcr.io/x/y:dev", device_type="tpu-v5p", device_count=8)

    result = backend.submit(job)

    assert isinstance(result, SubmitResult) and result.created
    assert result.cluster_job_name == "falcon-7-demo-exp-main"
    assert "image and device fields are ignored by the local backend" in result.message
    state = wait_for(lambda: backend.observe([job])[job.id].terminal, what="job to end") and \
        backend.observe([job])[job.id]
    assert state.status == ClusterJobStatus.SUCCEEDED, state
    assert state.exit_code == 0
    assert "image and device fields are ignored" in state.message
    art_dir = tmp_path / "art dir" / "7-demo"
    for index in (0, 1):
        env = json.loads((art_dir / f"env-{index}.json").read_text())
        assert env["CUSTOM_CONFIG_KEY"] == config
        assert env["FALCON_REPLICA_INDEX"] == str(index)
        assert (env["FALCON_EXP_ID"], env["FALCON_JOB_ID"], env["FALCON_ROLE"]) == \
            ("7", "1", "main")
        assert env["FALCON_REPLICA_COUNT"] == "2"
        assert env["FALCON_ARTIFACT_PATH"] == str(art_dir)
        assert env["LOG_LEVEL"] == "info"
        assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
        assert "FALCON_TEST_SECRET" not in env
    assert backend.validate(job.task_spec.to_json()) == {}


def test_gs_artifact_path_is_passed_unchanged(backend, tmp_path):
    out = tmp_path / "seen.txt"
    job = make_job(tmp_path, f'printf %s "$FALCON_ARTIFACT_PATH" > "{out}"',
                   artifact_path="gs://bucket/falcon/7-demo/main")
    backend.submit(job)
    wait_for(lambda: backend.observe([job])[job.id].terminal, what="job to end")
    assert out.read_text() == "gs://bucket/falcon/7-demo/main"


def test_failing_replica_fails_job_with_exit_code_and_stderr_tail(backend, tmp_path):
    command = ('if [ "$FALCON_REPLICA_INDEX" = 1 ]; then '
               'for i in $(seq 1 30); do echo "err line $i" >&2; done; exit 3; fi; sleep 30')
    job = make_job(tmp_path, command, replica=2)
    backend.submit(job)

    state = wait_for(lambda: (s := backend.observe([job])[job.id]).terminal and s,
                     what="Failed")

    assert state.status == ClusterJobStatus.FAILED and state.reason == "ReplicaFailed"
    assert state.exit_code == 3
    assert "Replica 1 of 2 exited with code 3" in state.message
    assert "err line 30" in state.message and "err line 11" in state.message
    assert "err line 10\n" not in state.message  # only the last 20 lines
    # The other replica is stopped at once (test_a_failed_replica_stops_the_others_...).
    wait_for(lambda: not any(process_alive(pid) for pid in runner_pids(backend, job)),
             what="the other replica to stop")
    wait_for(lambda: backend.delete(job), what="delete")


def test_running_only_when_every_replica_runs(backend, state_dir, tmp_path):
    gate = tmp_path / "gate"
    # A runner launcher that holds replica 1 back until the gate exists: a slow-to-start
    # replica, as an unschedulable pod would be (cluster-behaviours.md#cb-5).
    launcher = tmp_path / "launcher.sh"
    launcher.write_text(
        "#!/bin/sh\n"
        f'if [ "$FALCON_REPLICA_INDEX" = 1 ]; then\n'
        f'  while [ ! -e "{gate}" ]; do sleep 0.02; done\n'
        "fi\n"
        f'exec "{sys.executable}" "{RUNNER}" "$@"\n')
    launcher.chmod(0o755)
    slow = LocalBackend(state_dir, grace_seconds=0.5, stop_wait_seconds=0.1,
                        runner=[str(launcher)])
    marker = tmp_path / "marker"
    job = make_job(tmp_path, f'echo "$FALCON_REPLICA_INDEX" >> "{marker}"; sleep 30', replica=2)
    slow.submit(job)

    wait_for(lambda: marker.exists(), what="replica 0 to start")
    # The runner records a replica as started just after starting its command, so the marker
    # can come first: wait until the backend sees replica 0 running, then check the job waits.
    state = wait_for(lambda: (s := slow.observe([job])[job.id]).message.startswith("1 of 2")
                     and s, what="replica 0 to be seen running")
    assert state.status == ClusterJobStatus.PENDING, state
    assert state.reason == "ReplicasStarting" and "1 of 2 replicas running" in state.message

    gate.touch()
    state = wait_for(lambda: (s := slow.observe([job])[job.id]).status == "Running" and s,
                     what="Running")
    assert "2 of 2 replicas running" in state.message
    wait_for(lambda: slow.delete(job), what="delete")


def test_abort_kills_the_whole_process_group(backend, tmp_path):
    child_pid = tmp_path / "child.pid"
    job = make_job(tmp_path, f'sleep 30 & echo $! > "{child_pid}"; wait')
    backend.submit(job)
    wait_for(lambda: backend.observe([job])[job.id].status == "Running", what="Running")
    wait_for(lambda: child_pid.exists() and child_pid.read_text().strip(), what="grandchild pid")
    pids = runner_pids(backend, job) + [int(child_pid.read_text())]
    assert all(process_alive(pid) for pid in pids)

    wait_for(lambda: backend.delete(job), what="delete")

    assert not any(process_alive(pid) for pid in pids)
    runner = pids[0]
    assert not Path(f"/proc/{runner}").exists()  # our child was reaped, not left a zombie
    assert not (backend.state_dir / backend.name_of(job)).exists()
    assert backend.delete(job) is True  # idempotent (cluster-behaviours.md#cb-14)
    assert backend.observe([job])[job.id].status == ClusterJobStatus.MISSING


def test_abort_escalates_to_sigkill_after_grace(backend, tmp_path):
    child_pid = tmp_path / "child.pid"
    # The shell and its child ignore SIGTERM; only SIGKILL after grace_seconds ends them.
    job = make_job(tmp_path, f"trap '' TERM; sleep 30 & echo $! > \"{child_pid}\"; wait; wait")
    backend.submit(job)
    wait_for(lambda: child_pid.exists() and child_pid.read_text().strip(), what="grandchild pid")
    pids = runner_pids(backend, job) + [int(child_pid.read_text())]

    assert backend.delete(job) is False  # SIGTERM sent; grace (0.5 s) not over yet
    assert process_alive(int(child_pid.read_text()))

    wait_for(lambda: backend.delete(job), what="delete after grace")
    assert not any(process_alive(pid) for pid in pids)


def submit_from_other_process(state_dir: Path, job: JobView) -> dict:
    """Submit `job` from a separate resource-manager process that then exits (a restart)."""
    script = ("import json, sys; from pathlib import Path; from controllers.contract import JobView; "
              "from controllers.cluster_backends import LocalBackend; "
              "from core.domain.taskspec import TaskSpec; "
              "d = json.loads(sys.argv[2]); d['task_spec'] = TaskSpec.from_json(d['task_spec']); "
              "r = LocalBackend(Path(sys.argv[1])).submit(JobView(**d)); "
              "print(json.dumps({'name': r.cluster_job_name, 'created': r.created}))")
    data = {f.name: getattr(job, f.name) for f in fields(job)}
    data["task_spec"] = job.task_spec.to_json()
    out = subprocess.run([sys.executable, "-c", script, str(state_dir), json.dumps(data)],
                         cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def runner_processes(token: str) -> list[int]:
    """Pids of live runner processes whose command line holds `token`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if RUNNER.name in cmdline and token in cmdline and process_alive(int(entry)):
            found.append(int(entry))
    return found


def test_restarted_backend_adopts_running_job_without_starting_it_twice(state_dir, tmp_path):
    marker, gate = tmp_path / "marker", tmp_path / "gate"
    token = f"tok{os.getpid()}x{time.monotonic_ns()}"
    job = make_job(tmp_path, f'echo {token} >> "{marker}"; '
                             f'while [ ! -e "{gate}" ]; do sleep 0.02; done', replica=2)
    first = submit_from_other_process(state_dir, job)
    assert first["created"] is True

    fresh = LocalBackend(state_dir, grace_seconds=0.5)
    wait_for(lambda: fresh.observe([job])[job.id].status == "Running", what="Running")
    result = fresh.submit(job)

    assert result.created is False and result.cluster_job_name == first["name"]
    assert "Adopted" in result.message
    assert len(runner_processes(token)) == 2  # one runner per replica, no second copy
    gate.touch()
    state = wait_for(lambda: (s := fresh.observe([job])[job.id]).terminal and s, what="end")
    assert state.status == ClusterJobStatus.SUCCEEDED
    assert marker.read_text().split() == [token, token]


def test_restarted_backend_reads_exit_code_of_job_that_ended_meanwhile(state_dir, tmp_path):
    job = make_job(tmp_path, 'sleep 0.2; if [ "$FALCON_REPLICA_INDEX" = 1 ]; then '
                             'echo "boom" >&2; exit 4; fi', replica=2)
    name = submit_from_other_process(state_dir, job)["name"]
    # No manager runs now; wait until both runners have recorded their exit codes.
    wait_for(lambda: all((state_dir / name / f"replica-{i}.exit").exists() for i in (0, 1)),
             what="exit files")

    state = LocalBackend(state_dir).observe([job])[job.id]

    assert state.status == ClusterJobStatus.FAILED and state.exit_code == 4
    assert "boom" in state.message


def test_vanished_state_folder_is_missing_and_delete_still_stops_processes(backend, tmp_path):
    job = make_job(tmp_path, "sleep 30")
    backend.submit(job)
    wait_for(lambda: backend.observe([job])[job.id].status == "Running", what="Running")
    pid = runner_pids(backend, job)[0]

    shutil.rmtree(backend.state_dir / backend.name_of(job))

    state = backend.observe([job])[job.id]
    assert state.status == ClusterJobStatus.MISSING and state.reason == "ClusterJobMissing"
    assert backend.name_of(job) in state.message
    wait_for(lambda: backend.delete(job), what="delete")
    assert not process_alive(pid)


def test_observe_is_batched_and_reports_unknown_jobs_missing(backend, tmp_path):
    done = make_job(tmp_path, "true", job_id=1, role="a")
    unknown = make_job(tmp_path, "true", job_id=2, role="b")
    backend.submit(done)
    wait_for(lambda: backend.observe([done])[done.id].terminal, what="end")

    states = backend.observe([done, unknown])

    assert states[1].status == ClusterJobStatus.SUCCEEDED
    assert states[2].status == ClusterJobStatus.MISSING


def test_delete_of_unknown_job_is_done(backend, tmp_path):
    assert backend.delete(make_job(tmp_path, "true", exp_id=999)) is True


def test_a_failed_replica_stops_the_others_and_keeps_the_logs(backend, tmp_path):
    """Like the Kubernetes Job controller with backoffLimit 0: once one replica failed, the
    others are stopped, and the job's records stay for the user to read."""
    pid_file = tmp_path / "survivor.pid"
    job = make_job(tmp_path, f'if [ "$FALCON_REPLICA_INDEX" = 0 ]; then echo $$ > "{pid_file}"; '
                   'exec sleep 30; else sleep 0.3; echo broken >&2; exit 4; fi', replica=2)
    backend.submit(job)
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), what="replica 0")
    survivor = int(pid_file.read_text())
    state = wait_for(lambda: (s := backend.observe([job])[job.id]).status == "Failed" and s,
                     what="Failed")
    assert state.exit_code == 4 and "broken" in state.message
    wait_for(lambda: not process_alive(survivor), what="replica 0 to be stopped")
    assert (backend.state_dir / backend.name_of(job)).exists()
    assert backend.observe([job])[job.id].status == "Failed"


def test_abort_stops_a_process_that_left_the_group(backend, tmp_path):
    """`setsid cmd &` escapes a process-group kill; the runner, a child subreaper, adopts and
    stops it (as a container's processes end with the container)."""
    escaped = tmp_path / "escaped.pid"
    job = make_job(tmp_path, f'setsid sleep 300 & echo $! > "{escaped}"; sleep 300')
    backend.submit(job)
    wait_for(lambda: escaped.exists() and escaped.read_text().strip(), what="escaped pid")
    pid = int(escaped.read_text())
    assert process_alive(pid)
    wait_for(lambda: backend.delete(job), what="delete")
    wait_for(lambda: not process_alive(pid), what="the escaped process to stop")


def test_what_a_finished_command_left_running_is_stopped(backend, tmp_path):
    escaped = tmp_path / "escaped.pid"
    job = make_job(tmp_path, f'setsid sleep 300 & echo $! > "{escaped}"; exit 0')
    backend.submit(job)
    state = wait_for(lambda: (s := backend.observe([job])[job.id]).terminal and s,
                     what="Succeeded")
    assert state.status == ClusterJobStatus.SUCCEEDED
    wait_for(lambda: not process_alive(int(escaped.read_text())), what="the leftover to stop")


def test_a_replica_log_holds_both_streams_and_reaches_the_store_when_it_ends(backend,
                                                                              tmp_path):
    from artifacts.store import job_log_url, local_path

    gate = tmp_path / "gate"
    job = make_job(tmp_path, f'echo out; echo err >&2; while [ ! -e "{gate}" ]; do sleep 0.02; '
                             'done; echo done', replica=2,
                   artifact_path=(tmp_path / "artifacts" / "exp-1" / "main").as_uri())
    backend.submit(job)
    folder = backend.state_dir / backend.name_of(job)
    wait_for(lambda: b"err" in (folder / "replica-1.log").read_bytes(), what="output")
    assert (folder / "replica-1.log").read_bytes() == b"out\nerr\n"
    assert manifest_of(backend, job)["artifact_path"] == job.artifact_path
    stored = [local_path(job_log_url(job.artifact_path, "main", i)) for i in range(2)]
    assert stored[0] == tmp_path / "artifacts" / "exp-1.logs" / "main" / "replica-0.log"
    backend.observe([job])
    assert not any(p.exists() for p in stored)  # still running: nothing copied yet

    gate.touch()
    wait_for(lambda: backend.observe([job])[job.id].terminal, what="the job to end")
    assert [p.read_bytes() for p in stored] == [b"out\nerr\ndone\n"] * 2
    assert (folder / "replica-0.copied").exists()
    assert backend.delete(job) and not folder.exists()
    assert [p.read_bytes() for p in stored] == [b"out\nerr\ndone\n"] * 2


def test_delete_keeps_the_folder_while_the_logs_cannot_be_stored(backend, tmp_path):
    from controllers.cluster_backends.base import BackendError

    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the logs folder would go")
    # Submit cannot make an artifact folder under a file either, so the job runs with a good
    # path and its manifest is pointed at the unwritable one afterwards (not yet copied).
    ok = make_job(tmp_path, "echo hi")
    backend.submit(ok)
    wait_for(lambda: backend.observe([ok])[ok.id].terminal, what="the job to end")
    folder = backend.state_dir / backend.name_of(ok)
    manifest = manifest_of(backend, ok)
    manifest["artifact_path"] = (blocker / "x" / "main").as_uri()
    for marker in folder.glob("replica-*.copied"):
        marker.unlink()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BackendError, match="run folder is kept"):
        backend.delete(ok)
    assert folder.exists()
