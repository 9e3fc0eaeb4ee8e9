"""What the exp controller decides from scripted job states: every rule that moves an
experiment, its artifact and its sibling jobs (docs/architecture.md, State machines)."""
from __future__ import annotations

import pytest

from controllers.contract import ArtifactView, ExpView, JobView
from core.domain.taskspec import EMPTY
from controllers.exp_controller import Update, decide, job_status_to_exp_status


def exp(status="Running", message=""):
    return ExpView(id=1, name="e", status=status, cluster_name="local", exp_type="profiling",
                   artifact_path="file:///a/1-e", message=message)


def job(id, status, role=None, reason="", message=""):
    return JobView(id=id, exp_id=1, exp_name="e", exp_status="Running", role=role or f"r{id}",
                   cluster_name="local", exp_type="profiling", task_spec=EMPTY, artifact_path="",
                   config="", status=status, reason=reason, message=message)


def artifact(status="Created", reason="", message=""):
    return ArtifactView(id=7, exp_id=1, path="file:///a/1-e", artifact_type="profiling",
                        status=status, reason=reason, message=message)


def statuses(updates):
    return [(u.kind, u.id, u.status) for u in updates]


def test_all_succeeded_with_files_succeeds_artifact_then_exp():
    ups = decide(exp(), [job(1, "Succeeded"), job(2, "Succeeded")], artifact(), lambda p: True)
    assert statuses(ups) == [("artifact", 7, "Succeeded"), ("exp", 1, "Succeeded")]


def test_all_succeeded_without_files_fails_saying_so():
    ups = decide(exp(), [job(1, "Succeeded")], artifact(), lambda p: False)
    assert statuses(ups) == [("artifact", 7, "Failed"), ("exp", 1, "Failed")]
    assert all(u.reason == "ArtifactEmpty" and "FALCON_ARTIFACT_PATH" in u.message for u in ups)


def test_reentry_after_artifact_succeeded_finishes_exp_without_rechecking():
    def boom(path):
        raise AssertionError("the store is not asked again")

    ups = decide(exp(), [job(1, "Succeeded")], artifact("Succeeded"), boom)
    assert statuses(ups) == [("exp", 1, "Succeeded")]
    ups = decide(exp(), [job(1, "Succeeded")], artifact("Failed", "ArtifactEmpty", "none"), boom)
    assert statuses(ups) == [("exp", 1, "Failed")] and ups[0].reason == "ArtifactEmpty"


def test_one_failed_role_fails_exp_and_aborts_the_others():
    ups = decide(exp(), [job(1, "Failed", "worker", "Error", "exit code 1: boom"),
                         job(2, "Running"), job(3, "Pending"), job(4, "Succeeded")],
                 artifact(), lambda p: True)
    assert statuses(ups) == [("job", 2, "Aborting"), ("job", 3, "Aborting"),
                             ("artifact", 7, "Failed"), ("exp", 1, "Failed")]
    assert ups[-1].reason == "Error" and "role worker failed: exit code 1: boom" in ups[-1].message


def test_aborted_job_without_exp_abort_aborts_exp():
    ups = decide(exp(), [job(1, "Aborted", "main", "Aborted", "deleted")], artifact(),
                 lambda p: True)
    assert statuses(ups) == [("artifact", 7, "Failed"), ("exp", 1, "Aborting"),
                             ("exp", 1, "Aborted")]


def test_aborting_exp_waits_for_its_jobs_then_aborts():
    assert decide(exp("Aborting"), [job(1, "Aborted"), job(2, "Aborting")], artifact(),
                  lambda p: True) == []
    ups = decide(exp("Aborting"), [job(1, "Aborted"), job(2, "Succeeded")], artifact(),
                 lambda p: True)
    assert statuses(ups) == [("artifact", 7, "Failed"), ("exp", 1, "Aborted")]
    assert ups[0].reason == "Aborted" and ups[0].message


@pytest.mark.parametrize("jobs,expected", [
    (["Pending"], "Created"),
    (["Pending", "Pending"], "Created"),
    (["Running", "Pending"], "Created"),
    (["Succeeded", "Pending"], "Created"),
    (["Running", "Running", "Pending"], "Created"),
    (["Running", "Running"], "Running"),
    (["Succeeded", "Running"], "Running"),
])
def test_job_status_to_exp_status(jobs, expected):
    assert job_status_to_exp_status(jobs) == expected


def test_pending_and_running_map_through_job_status_to_exp_status():
    # One role still waits for the cluster: the experiment stays Created, with the summary.
    ups = decide(exp("Created"), [job(1, "Running"), job(2, "Pending")], artifact(),
                 lambda p: True)
    assert statuses(ups) == [("exp", 1, "Created")]
    assert ups[0].message == "1 Pending, 1 Running"
    ups = decide(exp("Created"), [job(1, "Running"), job(2, "Running")], artifact(),
                 lambda p: True)
    assert statuses(ups) == [("exp", 1, "Running")]
    # A Running experiment whose role went back to Pending (a replica restarts) stays Running.
    # Nothing new: no write.
    assert decide(exp("Running", "1 Pending, 1 Running"), [job(1, "Running"), job(2, "Pending")],
                  artifact(), lambda p: True) == []


def test_experiment_without_jobs_fails():
    ups = decide(exp("Created"), [], artifact(), lambda p: True)
    assert statuses(ups) == [("artifact", 7, "Failed"), ("exp", 1, "Failed")]


def test_update_is_a_plain_value():
    assert Update("exp", 1, "Running") == Update("exp", 1, "Running")


def test_an_aborting_experiment_without_jobs_ends_aborted_not_stuck():
    """Aborting may only end Aborted: with no job left, the no-jobs rule must not try Failed."""
    ups = decide(exp(status="Aborting"), [], artifact(), lambda p: True)
    assert statuses(ups) == [("artifact", 7, "Failed"), ("exp", 1, "Aborted")]
    assert ups[-1].message == "aborted (no jobs)"
