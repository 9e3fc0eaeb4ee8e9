"""The resource manager over the real gRPC API and the real LocalBackend
(docs/cluster-behaviours.md: CB-3, CB-5 to CB-7, CB-9, CB-12 to CB-14).

Jobs are created through the services, the manager talks to an in-process API server with
`GrpcFalconAPI`, and the cluster is `LocalBackend` on a temporary state directory: real
processes, real process groups. Every wait polls with a deadline.
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from accounts.tests.factories import UserFactory
from controllers.cluster_backends import LocalBackend, cluster_job_name_for
from controllers.cluster_backends.local import RUNNER
from controllers.resource_manager import ResourceManager
from experiments.models import Experiment
from experiments.services import exp_abort
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import falcon_api, grpc_server  # noqa: F401  (fixtures)
from jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE = 8.0


class SimulatedCrash(BaseException):
    """The manager process dies here (a BaseException: no handler in a tick catches it)."""


class CrashOnFirstWrite:
    """A `FalconAPI` that reads through the real client and dies on its first write."""

    def __init__(self, inner):
        self.inner = inner

    def list_jobs(self, flt):
        return self.inner.list_jobs(flt)

    def update_job_status(self, **kwargs):
        raise SimulatedCrash(f"crash before UpdateJobStatus {kwargs}")


def wait_for(check, timeout: float = DEADLINE, what: str = "condition"):
    """Poll `check` every 20 ms until it returns a truthy value; fail after `timeout` seconds."""
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def tick_until(manager: ResourceManager, job: Job, status: str, timeout: float = DEADLINE) -> Job:
    """Tick `manager` until `job` has `status`; return the fresh row."""
    def check():
        manager.tick()
        row = Job.objects.get(pk=job.pk)
        return row if row.status == status else None

    return wait_for(check, timeout, f"job {job.pk} to be {status}")


def process_alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def kill_groups(pids) -> None:
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def state_dir(tmp_path):
    """A state directory whose leftover process groups are killed after the test."""
    path = tmp_path / "state"
    yield path
    for manifest in path.glob("*/manifest.json"):
        kill_groups(rec["pid"] for rec in json.loads(manifest.read_text())["replicas"].values())


def local_backend(state_dir: Path, **kwargs) -> LocalBackend:
    return LocalBackend(state_dir, grace_seconds=0.5, stop_wait_seconds=0.2, **kwargs)


def gated_runner(tmp_path: Path, gate: Path, replica: str = "1") -> list[str]:
    """A runner launcher that holds replica `replica` back until `gate` exists ("*": all).

    A replica that does not start is the local stand-in for an unschedulable Pod or an image
    that cannot be pulled (cluster-behaviours.md#cb-6, #cb-7).
    """
    launcher = tmp_path / f"launcher-{gate.name}.sh"
    test = "true" if replica == "*" else f'[ "$FALCON_REPLICA_INDEX" = {replica} ]'
    launcher.write_text(
        "#!/bin/sh\n"
        f"if {test}; then\n"
        f'  while [ ! -e "{gate}" ]; do sleep 0.02; done\n'
        "fi\n"
        f'exec "{sys.executable}" "{RUNNER}" "$@"\n')
    launcher.chmod(0o755)
    return [str(launcher)]


def waiting_command(marker: Path, release: Path) -> str:
    """Append the replica index to `marker` (one line per start), then run until `release`."""
    return (f'echo "$FALCON_REPLICA_INDEX" >> "{marker}"; '
            f'while [ ! -e "{release}" ]; do sleep 0.02; done')


def starts(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


def one_job(command: str, name: str = "rm", replica: int = 1) -> tuple[Experiment, Job]:
    exp = make_exp(creator=UserFactory(), name=name, command=command, replica=replica)
    return exp, exp.jobs.get()


def cluster_name_of(exp: Experiment, job: Job) -> str:
    return cluster_job_name_for(exp_id=exp.pk, exp_name=exp.name, role=job.role)


def runner_pids(state_dir: Path, name: str) -> list[int]:
    manifest = json.loads((state_dir / name / "manifest.json").read_text())
    return [rec["pid"] for rec in manifest["replicas"].values()]


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


# -- submit, Running (CB-5), Succeeded, Failed --------------------------------------------------

def test_pending_job_is_submitted_running_only_when_every_replica_runs_then_succeeds(
        falcon_api, state_dir, tmp_path):
    gate, marker, release = tmp_path / "gate", tmp_path / "starts", tmp_path / "release"
    backend = local_backend(state_dir, runner=gated_runner(tmp_path, gate))
    manager = ResourceManager(falcon_api, {"local": backend})
    exp, job = one_job(waiting_command(marker, release), replica=2)

    stats = manager.tick()
    job = fresh(job)
    assert stats.submitted == 1
    assert (job.status, job.reason) == ("Pending", "Submitted")
    assert job.cluster_job_name == cluster_name_of(exp, job)
    assert (state_dir / job.cluster_job_name / "manifest.json").exists()

    wait_for(lambda: starts(marker) == ["0"], what="replica 0 to start")

    def one_of_two_running():
        # The runner records a replica as running just after its command starts: on a busy
        # machine that can take another tick (replica 1 stays held at the gate meanwhile).
        manager.tick()
        row = fresh(job)
        return row if "1 of 2 replicas running" in row.message else None

    job = wait_for(one_of_two_running, what="the job to see 1 of 2 replicas running")
    assert (job.status, job.reason) == ("Pending", "ReplicasStarting")
    assert job.started_at is None and starts(marker) == ["0"]

    gate.touch()
    job = tick_until(manager, job, "Running")
    assert "2 of 2 replicas running" in job.message and job.started_at is not None

    release.touch()
    job = tick_until(manager, job, "Succeeded")
    assert job.reason == "Completed" and "All 2 replicas exited 0" in job.message
    assert job.finished_at is not None
    assert sorted(starts(marker)) == ["0", "1"]  # each replica started once


def test_failed_replica_fails_the_job_with_exit_code_and_stderr_tail(falcon_api, state_dir):
    manager = ResourceManager(falcon_api, {"local": local_backend(state_dir)})
    _exp, job = one_job("echo 'loading model'; echo 'ValueError: bad input' >&2; exit 3")

    job = tick_until(manager, job, "Failed")
    assert job.reason == "ReplicaFailed"
    assert "exited with code 3" in job.message and "ValueError: bad input" in job.message
    assert job.finished_at is not None


# -- abort (CB-13, CB-14) --------------------------------------------------------------------

def test_abort_stops_every_process_before_the_job_is_aborted(falcon_api, state_dir, tmp_path):
    pidfile = tmp_path / "pid"
    manager = ResourceManager(falcon_api, {"local": local_backend(state_dir)})
    exp, job = one_job(f'echo $$ > "{pidfile}"; exec sleep 600')
    job = tick_until(manager, job, "Running")
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="pid"))
    runners = runner_pids(state_dir, job.cluster_job_name)
    assert process_alive(pid)

    exp_abort(exp_id=exp.pk, actor=exp.creator)
    assert fresh(job).status == "Aborting"
    job = tick_until(manager, job, "Aborted")
    assert not process_alive(pid) and not any(process_alive(p) for p in runners)
    assert not (state_dir / job.cluster_job_name).exists()
    assert job.aborted_at is not None and job.aborting_at <= job.aborted_at
    assert job.reason == "Aborted" and job.cluster_job_name in job.message


def test_abort_of_a_job_whose_cluster_job_was_deleted_by_hand_is_done_in_one_tick(
        falcon_api, state_dir):
    manager = ResourceManager(falcon_api, {"local": local_backend(state_dir)})
    exp, job = one_job("exec sleep 600")
    job = tick_until(manager, job, "Running")
    folder = state_dir / job.cluster_job_name
    kill_groups(runner_pids(state_dir, job.cluster_job_name))  # `kubectl delete job` by hand
    shutil.rmtree(folder)

    exp_abort(exp_id=exp.pk, actor=exp.creator)
    stats = manager.tick()
    job = fresh(job)
    assert (job.status, stats.failed) == ("Aborted", 0), stats.errors
    assert job.aborted_at is not None and not folder.exists()


def test_abort_of_a_job_never_submitted_is_aborted(falcon_api, state_dir):
    manager = ResourceManager(falcon_api, {"local": local_backend(state_dir)})
    exp, job = one_job("exec sleep 600")
    exp_abort(exp_id=exp.pk, actor=exp.creator)
    manager.tick()
    job = fresh(job)
    assert job.status == "Aborted" and job.cluster_job_name == ""
    assert not any(state_dir.glob("falcon-*"))  # nothing was started for it


# -- a cluster job that vanished (CB-12) --------------------------------------------------------

def test_vanished_cluster_job_fails_within_one_tick_and_is_not_recreated(falcon_api, state_dir,
                                                                         tmp_path):
    marker, release = tmp_path / "starts", tmp_path / "release"
    manager = ResourceManager(falcon_api, {"local": local_backend(state_dir)})
    _exp, job = one_job(waiting_command(marker, release))
    job = tick_until(manager, job, "Running")
    folder = state_dir / job.cluster_job_name
    runners = runner_pids(state_dir, job.cluster_job_name)
    try:
        shutil.rmtree(folder)  # deleted behind Falcon's back
        stats = manager.tick()
        job = fresh(job)
        assert stats.submitted == 0
        assert (job.status, job.reason) == ("Failed", "ClusterJobMissing")
        assert "disappeared" in job.message and job.cluster_job_name in job.message
        for _ in range(3):
            manager.tick()
        assert not folder.exists() and fresh(job).status == "Failed"
        assert starts(marker) == ["0"]
    finally:
        kill_groups(runners)


# -- restart: adopt, never start twice (CB-3) ---------------------------------------------------

@pytest.mark.parametrize("crash_before_recording", [False, True])
def test_restarted_manager_adopts_the_running_job_and_finishes_it(falcon_api, state_dir, tmp_path,
                                                                  crash_before_recording):
    marker, release = tmp_path / "starts", tmp_path / "release"
    exp, job = one_job(waiting_command(marker, release), replica=2)
    if crash_before_recording:
        # The first manager dies between creating the cluster job and recording its name.
        first = ResourceManager(CrashOnFirstWrite(falcon_api), {"local": local_backend(state_dir)})
        with pytest.raises(SimulatedCrash):
            first.tick()
        assert fresh(job).cluster_job_name == ""
    else:
        first = ResourceManager(falcon_api, {"local": local_backend(state_dir)})
        job = tick_until(first, job, "Running")
    wait_for(lambda: len(starts(marker)) == 2, what="both replicas to start")
    name = cluster_name_of(exp, job)
    runners = runner_pids(state_dir, name)
    del first  # the old manager and its backend are gone; their processes are not

    second = ResourceManager(falcon_api, {"local": local_backend(state_dir)})
    job = tick_until(second, job, "Running")
    assert job.cluster_job_name == name
    assert runner_pids(state_dir, name) == runners and all(process_alive(p) for p in runners)
    second.tick()
    assert sorted(starts(marker)) == ["0", "1"]  # adopted: no replica started a second time

    release.touch()
    job = tick_until(second, job, "Succeeded")
    assert sorted(starts(marker)) == ["0", "1"]


# -- pending timeout (CB-7) -------------------------------------------------------------------

def test_pending_timeout_fails_a_job_that_cannot_start_and_removes_its_cluster_job(
        falcon_api, state_dir, tmp_path):
    gate, marker = tmp_path / "gate", tmp_path / "starts"
    backend = local_backend(state_dir, runner=gated_runner(tmp_path, gate, replica="*"))
    now = [1000.0]  # the manager's clock: 0.5 s pass when the test says, not under load
    manager = ResourceManager(falcon_api, {"local": backend}, pending_timeout=0.5,
                              clock=lambda: now[0])
    _exp, job = one_job(waiting_command(marker, tmp_path / "release"))

    manager.tick()
    job = fresh(job)
    assert (job.status, job.cluster_job_name) == ("Pending", cluster_job_name_for(
        exp_id=job.experiment_id, exp_name="rm", role="main"))
    launchers = runner_pids(state_dir, job.cluster_job_name)
    now[0] += 0.4
    manager.tick()
    assert fresh(job).status == "Pending"  # not yet: 0.5 s have not passed
    now[0] += 0.2

    job = tick_until(manager, job, "Failed", timeout=5)
    assert job.reason == "PendingTimeout" and "still pending after" in job.message
    assert "waiting for replica(s) 0 to start" in job.message
    # The cluster job is gone: it cannot start later for a job Falcon calls Failed.
    assert not any(process_alive(p) for p in launchers)
    assert not (state_dir / job.cluster_job_name).exists()
    gate.touch()  # the launchers are dead (above): nothing is left that could start
    assert starts(marker) == []


def test_pending_timeout_counts_from_the_cluster_job_not_from_the_falcon_job(
        falcon_api, state_dir, tmp_path):
    gate, marker = tmp_path / "gate", tmp_path / "starts"
    backend = local_backend(state_dir, runner=gated_runner(tmp_path, gate, replica="*"))
    manager = ResourceManager(falcon_api, {"local": backend}, pending_timeout=1.0,
                              clock=lambda: 1000.0)  # no time passes while it ticks
    _exp, job = one_job(waiting_command(marker, tmp_path / "release"))
    # Queued 5 s ago while no manager ran: the cluster job does not exist yet.
    Job.objects.filter(pk=job.pk).update(
        created_at=job.created_at - datetime.timedelta(seconds=5))

    manager.tick()  # creates the cluster job
    manager.tick()
    job = fresh(job)
    assert job.status == "Pending", (job.reason, job.message)
    gate.touch()  # the cluster job starts in time
    job = tick_until(manager, job, "Running")
