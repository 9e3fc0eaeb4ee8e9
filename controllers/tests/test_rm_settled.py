"""A job decided with the same inputs as last tick, which did nothing then, is not decided
again; any change of its row or of its observed state, and any clock, decides it again.

Pure: an in-memory API and a backend whose states the test sets; the manager's clock is the
test's (`now`), never the wall clock.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import controllers.resource_manager as rm
from controllers.cluster_backends.base import (
    ClusterBackend,
    ClusterJobState,
    ClusterJobStatus,
    SubmitResult,
)
from controllers.contract import ItemResult, JobView, ListFilter
from core.domain.statuses import ExpStatus, JobStatus
from core.domain.taskspec import TaskSpec

CLUSTER = "c"


class MemoryAPI:
    """The calls a tick makes, over job views kept here (a write changes them)."""

    def __init__(self, jobs: list[JobView]):
        self.jobs = {job.id: job for job in jobs}
        self.written: list[int] = []

    def list_jobs(self, flt: ListFilter) -> list[JobView]:
        return [job for job in self.jobs.values()
                if job.status in flt.statuses and job.cluster_name in flt.cluster_names]

    def update_job_statuses(self, updates):
        results = []
        for u in updates:
            job = self.jobs[u.job_id]
            self.jobs[u.job_id] = replace(
                job, status=u.status,
                reason=job.reason if u.reason is None else u.reason,
                message=job.message if u.message is None else u.message,
                cluster_job_name=job.cluster_job_name if u.cluster_job_name is None
                else u.cluster_job_name)
            self.written.append(u.job_id)
            results.append(ItemResult(id=u.job_id, changed=True))
        return results


class TableBackend(ClusterBackend):
    """A cluster whose cluster jobs' states are what the test put in `states`."""

    name = "table"

    def __init__(self):
        self.states: dict[int, ClusterJobState] = {}
        self.deleted: list[int] = []
        self.submitted: list[int] = []

    def observe(self, jobs):
        return {job.id: self.states.get(job.id) for job in jobs}

    def submit(self, job):
        self.submitted.append(job.id)
        name = self.cluster_job_name(job)
        self.states[job.id] = ClusterJobState(name=name, status=ClusterJobStatus.PENDING,
                                              reason="Created", message="created")
        return SubmitResult(cluster_job_name=name, created=True)

    def delete(self, job):
        self.deleted.append(job.id)
        self.states.pop(job.id, None)
        return True

    def validate(self, task_spec):
        return {}


def view(job_id: int, status: JobStatus = JobStatus.RUNNING, **fields) -> JobView:
    values = dict(id=job_id, exp_id=100 + job_id, exp_name=f"exp-{job_id}",
                  exp_status=ExpStatus.RUNNING, role="main", cluster_name=CLUSTER,
                  exp_type="t", task_spec=TaskSpec(command="true", image="img:1"),
                  artifact_path="", config="", status=status)
    values.update(fields)
    return JobView(**values)


def running(name: str) -> ClusterJobState:
    return ClusterJobState(name=name, status=ClusterJobStatus.RUNNING,
                           reason="AllReplicasReady", message="1/1 pods ready")


def pending(name: str, **fields) -> ClusterJobState:
    return ClusterJobState(name=name, status=ClusterJobStatus.PENDING,
                           reason="Unschedulable", message="0/1 pods ready", **fields)


@pytest.fixture
def decided(monkeypatch):
    """The ids of the jobs `decide` was asked about, in order (the real `decide` answers)."""
    seen: list[int] = []
    real = rm.decide

    def spy(observed, job, now, **kwargs):
        seen.append(job.id)
        return real(observed, job, now, **kwargs)

    monkeypatch.setattr(rm, "decide", spy)
    return seen


def settled_setup(n: int = 3):
    """`n` Running jobs whose rows already say what their running cluster jobs say."""
    backend = TableBackend()
    jobs = []
    for i in range(1, n + 1):
        name = backend.cluster_job_name(view(i))
        jobs.append(view(i, reason="AllReplicasReady", message="1/1 pods ready",
                         cluster_job_name=name))
        backend.states[i] = running(name)
    return MemoryAPI(jobs), backend


def test_a_steady_job_is_decided_once_then_not_again(decided):
    api, backend = settled_setup()
    manager = rm.ResourceManager(api, {CLUSTER: backend})
    manager.tick()
    assert decided == [1, 2, 3] and api.written == []
    decided.clear()
    stats = manager.tick()
    assert decided == [] and api.written == [] and stats.jobs == 3 and not stats.errors
    # An equal state (a backend that maps the same object again) is the same input.
    backend.states = {k: replace(v) for k, v in backend.states.items()}
    manager.tick()
    assert decided == []


@pytest.mark.parametrize("change", [
    {"message": "set by someone else"},
    {"reason": "Other"},
    {"cluster_job_name": "another-name"},
    {"exp_name": "renamed"},
    {"status": JobStatus.PENDING},
])
def test_a_job_whose_row_changes_is_decided_again(decided, change):
    api, backend = settled_setup()
    manager = rm.ResourceManager(api, {CLUSTER: backend})
    manager.tick()
    manager.tick()
    decided.clear()
    api.jobs[2] = replace(api.jobs[2], **change)
    manager.tick()
    assert decided == [2]
    job = api.jobs[2]
    # ... and brought back in line with its cluster job, as any tick would.
    if "status" in change or "message" in change or "reason" in change:
        assert (job.status, job.reason, job.message) == (
            JobStatus.RUNNING, "AllReplicasReady", "1/1 pods ready")
    if "exp_name" in change:  # the name it derives is compared with the recorded one
        assert job.cluster_job_name == backend.cluster_job_name(job)
    # The write changed its row again: decided once more (nothing to do now), then settled.
    decided.clear()
    manager.tick()
    assert decided == [2] and api.jobs[2] == job
    decided.clear()
    manager.tick()
    assert decided == []


def test_a_job_whose_observed_state_changes_is_decided_again(decided):
    api, backend = settled_setup()
    manager = rm.ResourceManager(api, {CLUSTER: backend})
    manager.tick()
    decided.clear()
    name = api.jobs[3].cluster_job_name
    backend.states[3] = ClusterJobState(name=name, status=ClusterJobStatus.SUCCEEDED,
                                        reason="Completed", message="done", exit_code=0)
    manager.tick()
    assert decided == [3]
    assert (api.jobs[3].status, api.jobs[3].reason) == (JobStatus.SUCCEEDED, "Completed")


def test_a_pending_job_with_a_pending_timeout_is_decided_every_tick_and_fails_at_it(decided):
    """Its clock runs: never settled, so the timeout fires at its time (the injected clock)."""
    now = [1000.0]
    backend = TableBackend()
    name = backend.cluster_job_name(view(1))
    api = MemoryAPI([view(1, JobStatus.PENDING, reason="Unschedulable",
                          message="0/1 pods ready", cluster_job_name=name)])
    backend.states[1] = pending(name)
    manager = rm.ResourceManager(api, {CLUSTER: backend}, pending_timeout=60,
                                 clock=lambda: now[0])
    for _ in range(3):
        manager.tick()
        now[0] += 20
    assert decided == [1, 1, 1] and api.written == []
    assert api.jobs[1].status == JobStatus.PENDING
    now[0] += 1  # 61 s after the clock started
    manager.tick()
    assert (api.jobs[1].status, api.jobs[1].reason) == (JobStatus.FAILED, "PendingTimeout")
    assert backend.deleted == [1]


def test_a_running_job_that_lost_a_replica_fails_at_its_progress_deadline(decided):
    now = [0.0]
    api, backend = settled_setup(1)
    manager = rm.ResourceManager(api, {CLUSTER: backend}, progress_deadline=30,
                                 clock=lambda: now[0])
    manager.tick()
    manager.tick()
    decided.clear()
    lost = ClusterJobState(name=api.jobs[1].cluster_job_name, status=ClusterJobStatus.PENDING,
                           reason="ReplicaLost", message="pod evicted", replica_lost=True)
    backend.states[1] = lost
    for _ in range(4):  # 0, 10, 20, 30 s: within the deadline, decided every tick
        manager.tick()
        now[0] += 10
    assert decided == [1, 1, 1, 1]
    assert (api.jobs[1].status, api.jobs[1].reason) == (JobStatus.RUNNING, "ReplicaLost")
    manager.tick()  # 40 s
    assert (api.jobs[1].status, api.jobs[1].reason) == (JobStatus.FAILED, "ReplicaLost")


def test_pending_jobs_settle_only_while_no_clock_runs(decided):
    """With a pending timeout, a suspended cluster job stops the clock (CB-8): it settles like
    a running one, and its timeout starts once it is resumed; an unsuspended pending one is
    decided every tick (its clock runs), and so is one just submitted."""
    now = [0.0]
    backend = TableBackend()
    names = [backend.cluster_job_name(view(i)) for i in (1, 2, 3)]
    suspended = ClusterJobState(name=names[0], status=ClusterJobStatus.PENDING,
                                reason="Suspended", message="held", suspended=True)
    api = MemoryAPI([view(1, JobStatus.PENDING, reason="Suspended", message="held",
                          cluster_job_name=names[0]),
                     view(2, JobStatus.PENDING),
                     view(3, JobStatus.PENDING, reason="Unschedulable",
                          message="0/1 pods ready", cluster_job_name=names[2])])
    backend.states.update({1: suspended, 3: pending(names[2])})
    manager = rm.ResourceManager(api, {CLUSTER: backend}, pending_timeout=60,
                                 clock=lambda: now[0])
    manager.tick()
    assert backend.submitted == [2] and api.jobs[2].cluster_job_name == names[1]
    decided.clear()
    for _ in range(3):
        now[0] += 10
        manager.tick()
    # Job 2's clock started with its submit (the pending timeout runs from the create).
    assert decided.count(1) == 0 and decided.count(2) == decided.count(3) == 3
    backend.states[1] = pending(names[0])  # resumed: its clock starts now
    decided.clear()
    manager.tick()
    assert decided.count(1) == 1 and api.jobs[1].reason == "Unschedulable"
    now[0] += 61
    manager.tick()
    assert (api.jobs[1].status, api.jobs[1].reason) == (JobStatus.FAILED, "PendingTimeout")
    assert (api.jobs[3].status, api.jobs[3].reason) == (JobStatus.FAILED, "PendingTimeout")


def test_a_new_leadership_term_decides_every_job_again(decided):
    api, backend = settled_setup()
    manager = rm.ResourceManager(api, {CLUSTER: backend})
    manager.tick()
    manager.reset()
    decided.clear()
    manager.tick()
    assert decided == [1, 2, 3]


def test_a_job_whose_decision_failed_is_decided_again(decided, monkeypatch):
    """A decision that raised did nothing but is not a decision: the next tick tries again."""
    api, backend = settled_setup(2)
    manager = rm.ResourceManager(api, {CLUSTER: backend})
    real = rm.decide

    def fails_for_2(observed, job, now, **kwargs):
        if job.id == 2:
            raise KeyError("bad data")
        return real(observed, job, now, **kwargs)

    monkeypatch.setattr(rm, "decide", fails_for_2)
    stats = manager.tick()
    assert stats.skipped == 1
    monkeypatch.setattr(rm, "decide", real)
    seen = []
    monkeypatch.setattr(rm, "decide", lambda o, j, n, **k: seen.append(j.id) or real(o, j, n, **k))
    manager.tick()
    assert seen == [2]
