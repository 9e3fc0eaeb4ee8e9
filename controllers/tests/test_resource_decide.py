"""The resource manager's decisions, row by row: `resource_decide.decide` and `decide_submit`.

Pure: each row is a Falcon job, its observed cluster job, the time and the job's clocks, and
the actions and clocks expected. No cluster, no API server, no clock.
"""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from controllers.cluster_backends.base import ClusterJobState, ClusterJobStatus, SubmitResult
from controllers.contract import JobView
from core.domain.taskspec import EMPTY
from controllers.resource_decide import (
    Adopt,
    Delete,
    JobClocks,
    KeepLogs,
    Limits,
    Refused,
    Retry,
    Submit,
    Submitted,
    Waiting,
    Write,
    decide,
    decide_submit,
)
from core.domain.statuses import JobStatus

NAME = "falcon-1-demo-main"
START = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
LIMITS = Limits(pending_timeout=60.0, progress_deadline=30.0)
P, R = JobStatus.PENDING, JobStatus.RUNNING


def job(status=P, recorded=NAME) -> JobView:
    return JobView(id=9, exp_id=1, exp_name="demo", exp_status="Running", role="main",
                   cluster_name="local", exp_type="profile", task_spec=EMPTY, artifact_path="",
                   config="", status=status, cluster_job_name=recorded)


def seen(status, *, suspended=False, replica_lost=False, reason="Why", message="because",
         started_at=None) -> ClusterJobState:
    return ClusterJobState(name=NAME, status=status, reason=reason, message=message,
                           suspended=suspended, replica_lost=replica_lost,
                           started_at=started_at)


CP, CR, CS, CF, CM = (ClusterJobStatus.PENDING, ClusterJobStatus.RUNNING,
                      ClusterJobStatus.SUCCEEDED, ClusterJobStatus.FAILED,
                      ClusterJobStatus.MISSING)
NO_CLOCKS = JobClocks()

ROWS = [
    # id, job, observed, now, clocks before, actions, clocks after
    ("never submitted: submit, pending clock starts", job(recorded=""), None, 100.0, NO_CLOCKS,
     (Submit(),), JobClocks(pending_since=100.0)),
    ("reported missing: submit", job(recorded=""), seen(CM), 100.0,
     JobClocks(pending_since=50.0), (Submit(),), JobClocks(pending_since=50.0)),
    ("vanished after its name was recorded: clean up, fail", job(R), seen(CM), 100.0,
     NO_CLOCKS, (Delete(), Write(JobStatus.FAILED, reason="ClusterJobMissing",
                                 message=f"cluster job {NAME} disappeared (deleted outside "
                                 "Falcon?); it is not re-created")), NO_CLOCKS),
    ("exists, name unrecorded: adopt first, then record it", job(recorded=""), seen(CP), 10.0,
     NO_CLOCKS, (Adopt(), Write(P, reason="Why", message="because", cluster_job_name=NAME)),
     JobClocks(pending_since=10.0)),
    ("pending within the timeout: keep Pending with the cluster's words", job(), seen(CP),
     100.0, JobClocks(pending_since=50.0), (Write(P, reason="Why", message="because"),),
     JobClocks(pending_since=50.0)),
    ("pending past the timeout: fail, delete after the write", job(), seen(CP), 111.0,
     JobClocks(pending_since=50.0),
     (Write(JobStatus.FAILED, reason="PendingTimeout", message=f"still pending after 60 s, "
            f"cluster job {NAME} being deleted: because", delete_after=True),),
     JobClocks(pending_since=50.0)),
    ("suspended: waiting its turn, the clock stops", job(), seen(CP, suspended=True), 500.0,
     JobClocks(pending_since=50.0), (Write(P, reason="Why", message="because"),), NO_CLOCKS),
    ("running job whose cluster job is pending again: degraded clock starts", job(R),
     seen(CP), 100.0, NO_CLOCKS, (Write(R, reason="Why", message="because"),),
     JobClocks(degraded_since=100.0)),
    ("degraded past the progress deadline: fail", job(R), seen(CP, started_at=START), 131.0,
     JobClocks(degraded_since=100.0),
     (Write(JobStatus.FAILED, reason="Why", message="not every replica ran for 30 s "
            "(progress deadline): because", started_at=START),),
     JobClocks(degraded_since=100.0)),
    ("pending job lost a replica: held to the progress deadline", job(),
     seen(CP, replica_lost=True), 100.0, NO_CLOCKS,
     (Write(P, reason="Why", message="because"),),
     JobClocks(pending_since=100.0, degraded_since=100.0)),
    ("running: record it with the cluster's start, degraded clock dropped", job(),
     seen(CR, started_at=START), 100.0, JobClocks(degraded_since=1.0),
     (Write(R, reason="Why", message="because", started_at=START),), NO_CLOCKS),
    ("succeeded: keep the logs, then record it", job(R), seen(CS, started_at=START), 100.0,
     NO_CLOCKS, (KeepLogs(), Write(JobStatus.SUCCEEDED, reason="Why", message="because",
                                   started_at=START)), NO_CLOCKS),
    ("failed: keep the logs, then record it", job(R), seen(CF), 100.0, NO_CLOCKS,
     (KeepLogs(), Write(JobStatus.FAILED, reason="Why", message="because")), NO_CLOCKS),
]


@pytest.mark.parametrize("row, view, observed, now, before, actions, after", ROWS,
                         ids=[row[0] for row in ROWS])
def test_decide(row, view, observed, now, before, actions, after):
    decision = decide(observed, view, now, name=NAME, clocks=before, limits=LIMITS)
    assert decision.actions == actions
    assert decision.clocks == after


def test_without_limits_nothing_times_out():
    decision = decide(seen(CP), job(), 10_000.0, name=NAME, clocks=JobClocks(pending_since=0.0))
    assert decision.actions == (Write(P, reason="Why", message="because"),)


SUBMIT_ROWS = [
    ("submitted: Pending, Submitted, its name", Submitted(SubmitResult(cluster_job_name=NAME, created=True, message="created")), 5.0,
     NO_CLOCKS, (Write(P, reason="Submitted", message="created", cluster_job_name=NAME),),
     JobClocks(pending_since=5.0)),
    ("no room yet: WaitingForCapacity, no clock", Waiting("2 of 2 replicas busy"), 5.0,
     JobClocks(pending_since=1.0),
     (Write(P, reason="WaitingForCapacity", message="2 of 2 replicas busy"),), NO_CLOCKS),
    ("refused within the timeout: retried next tick", Refused("403 quota"), 30.0,
     JobClocks(pending_since=1.0), (Retry(),), JobClocks(pending_since=1.0)),
    ("refused past the timeout: fail with the last refusal", Refused("403 quota"), 70.0,
     JobClocks(pending_since=1.0),
     (Write(JobStatus.FAILED, reason="PendingTimeout", message="the cluster job could not be "
            "created within 60 s; last refusal: 403 quota"),), JobClocks(pending_since=1.0)),
]


@pytest.mark.parametrize("row, outcome, now, before, actions, after", SUBMIT_ROWS,
                         ids=[row[0] for row in SUBMIT_ROWS])
def test_decide_submit(row, outcome, now, before, actions, after):
    decision = decide_submit(outcome, job(recorded=""), now, clocks=before, limits=LIMITS)
    assert decision.actions == actions
    assert decision.clocks == after
