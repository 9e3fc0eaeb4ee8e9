"""`falcon exp describe`: the experiment, its jobs and artifact, then its events, against the
live server."""
from __future__ import annotations

import json

import pytest

from .conftest import TASKS_YAML

pytestmark = pytest.mark.django_db(transaction=True)


def test_describe_shows_rows_then_events_in_order(logged_in, files):
    from core.observability.context import acting_as
    from experiments.services import exp_update_status
    from jobs.services import job_update_status

    created = logged_in("exp", "create", "--name", "desc", "--cluster", "c", "--type", "t",
                        "--role-to-task-spec", files("t.yaml", TASKS_YAML), "-o", "json")
    assert created.exit_code == 0, created.output
    exp = json.loads(created.stdout)
    with acting_as("service exp-controller"):
        job_update_status(job_id=exp["jobs"][0]["id"], status="Running", reason="PodsRunning")
        exp_update_status(exp_id=exp["id"], status="Running", reason="JobRunning")
    aborted = logged_in("exp", "abort", str(exp["id"]))
    assert aborted.exit_code == 0, aborted.output

    table = logged_in("exp", "describe", str(exp["id"]))
    assert table.exit_code == 0, table.output
    out = table.stdout
    # The experiment, its jobs, its artifact, then the events, in that order.
    titles = [line.strip() for line in out.splitlines()
              if line.strip() in ("jobs", "artifact", "events")]
    assert out.index("desc") < out.index("jobs") and titles == ["jobs", "artifact", "events"]
    events = out[out.index("\nevents"):]
    lines = [line for line in events.splitlines() if "job/main" in line or "experiment" in line]
    assert [("job/main" in line, "PodsRunning" in line or "JobRunning" in line
             or "AbortRequested" in line) for line in lines] == [
        (True, True), (False, True), (False, True), (True, True)]
    assert "service exp-controller" in events and "alice@example.com" in events

    as_json = json.loads(logged_in("exp", "describe", str(exp["id"]), "-o", "json").stdout)
    assert as_json["id"] == exp["id"] and as_json["jobs"][0]["role"] == "main"
    assert [(e["entity_type"], e["to_status"], e["actor"]) for e in as_json["events"]] == [
        ("job", "Running", "service exp-controller"),
        ("experiment", "Running", "service exp-controller"),
        ("experiment", "Aborting", "alice@example.com"),
        ("job", "Aborting", "alice@example.com"),
    ]

    missing = logged_in("exp", "describe", "999999")
    assert missing.exit_code != 0 and "999999" in missing.output


def test_describe_of_a_deleted_experiment_shows_its_kept_history(logged_in, files):
    from experiments.services import exp_update_status

    created = logged_in("exp", "create", "--name", "gone", "--cluster", "c", "--type", "t",
                        "--role-to-task-spec", files("t.yaml", TASKS_YAML), "-o", "json")
    exp = json.loads(created.stdout)
    assert logged_in("exp", "abort", str(exp["id"])).exit_code == 0
    exp_update_status(exp_id=exp["id"], status="Aborted", reason="AbortCompleted")
    assert logged_in("exp", "delete", str(exp["id"]), "--yes").exit_code == 0

    shown = logged_in("exp", "describe", str(exp["id"]))
    assert shown.exit_code == 0, shown.output
    assert f"experiment {exp['id']} was deleted" in shown.stderr
    assert "AbortRequested" in shown.stdout and "AbortCompleted" in shown.stdout
    as_json = json.loads(logged_in("exp", "describe", str(exp["id"]), "-o", "json").stdout)
    assert as_json["deleted"] is True
    assert [e["to_status"] for e in as_json["events"] if e["entity_type"] == "experiment"] == [
        "Aborting", "Aborted"]
