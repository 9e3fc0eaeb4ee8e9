"""The chaos script's own parts: its seeded fault schedule and its checks, on synthetic data.

`scripts/chaos_k8s.py` is a tool, not part of the suite (a run takes minutes of controllers
under SIGKILL); what it decides from a run must still be right, or a passing run proves
nothing. Here: the schedule is reproducible from its seed, holds every fault of the issue
"Controllers act only on what they know", bounded and never overlapping itself; and each
check names what it must (a healthy Job deleted, an analysis failed by an outage, a Pod created
twice) and nothing else. `--help` answers without a cluster, a database or Django.
"""
from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "chaos_k8s.py"


def load():
    spec = importlib.util.spec_from_file_location("chaos_k8s", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


chaos = load()


def test_the_schedule_is_seeded_bounded_and_holds_every_fault():
    first = chaos.build_schedule(random.Random(7), 40.0, exps_n=20)
    assert first == chaos.build_schedule(random.Random(7), 40.0, exps_n=20)  # --seed replays
    assert first != chaos.build_schedule(random.Random(8), 40.0, exps_n=20)
    assert first == sorted(first, key=lambda e: e.at)
    kinds = {e.kind for e in first}
    assert set(chaos.FAULT_KINDS) <= kinds and {"kill", "create"} <= kinds
    assert sorted(e.target for e in first if e.kind == "create") == sorted(
        str(i) for i in range(20))
    for seed in range(30):
        events = chaos.build_schedule(random.Random(seed), 40.0, exps_n=20)
        created = {e.target: e.at for e in events if e.kind == "create"}
        for e in events:
            if e.kind in chaos.FAULT_KINDS:
                low, high = chaos.FAULT_SECONDS[e.kind]
                assert 0 < e.duration <= high and e.end <= 39.0, e
            elif e.kind == "kill":
                assert e.target in chaos.KILLABLE and 0 <= e.duration <= 1.0
            elif e.kind == "abort":
                assert e.at >= created[e.target]
        for kind in chaos.FAULT_KINDS:
            windows = [e for e in events if e.kind == kind]
            for before, after in zip(windows, windows[1:]):
                assert after.at >= before.end, (kind, before, after)  # never overlapping
        outages = [e.target for e in events if e.kind == "pod_list_outage"]
        assert set(outages) <= {"500", "410"}


def test_a_delete_counts_as_healthy_only_when_it_removed_a_pending_or_running_job():
    job_of = {"falcon-1-a": 1, "falcon-2-a": 2, "falcon-3-a": 3, "falcon-4-a": 4}
    history = {
        1: [(10.0, "Pending"), (12.0, "Running")],                 # never ended
        2: [(10.0, "Pending"), (15.0, "Aborting"), (16.0, "Aborted")],
        3: [(10.0, "Pending"), (20.0, "Failed")],                  # pending timeout, then delete
        4: [(10.0, "Pending")],
    }
    deletes = [
        ("falcon-1-a", 13.0, 200),   # Running: healthy work deleted
        ("falcon-2-a", 15.5, 200),   # Aborting: the user asked
        ("falcon-3-a", 19.0, 200),   # before its failure was recorded: healthy
        ("falcon-3-a", 20.5, 200),   # after: fine
        ("falcon-4-a", 11.0, 404),   # already gone: nothing deleted
        ("falcon-4-a", 11.0, 500),   # refused: nothing deleted
        ("unknown-job", 11.0, 200),  # not a Falcon Job
    ]
    problems = chaos.healthy_job_deletes(deletes, job_of, history)
    assert problems == ["healthy Job falcon-1-a deleted: falcon job 1 was Running",
                        "healthy Job falcon-3-a deleted: falcon job 3 was Pending"]


def test_an_analysis_counts_as_failed_by_an_outage_by_its_reason_or_its_stored_exit():
    Outcome = chaos.AnalysisOutcome
    records = [
        Outcome("an-ok", "succeeded", "", 1, {"exit_code": 0, "reason": "", "attempt": 1}),
        Outcome("an-ran-and-failed", "failed", "NonZeroExit", 1,
                {"exit_code": 3, "reason": "NonZeroExit", "attempt": 1}),
        Outcome("an-refused", "failed", "StartFailed", 1, None),
        Outcome("an-collected", "failed", "PodDeleted", 1,
                {"exit_code": 0, "reason": "", "attempt": 1}),
        Outcome("an-vanished", "failed", "PodDisappeared", 2, None),
        Outcome("an-lost", "failed", "RunLost", 3, None),
        Outcome("an-lied", "failed", "Evicted", 1, {"exit_code": 0, "reason": "", "attempt": 1}),
        Outcome("an-cancelled", "cancelled", "", 1, None),
    ]
    problems = chaos.outage_failures(records)
    assert [p.split()[1] for p in problems] == ["an-refused", "an-collected", "an-vanished",
                                                "an-lost", "an-lied"]
    assert "its run stored no exit status" in problems[0]
    assert '"exit_code": 0' in problems[1]


def test_a_name_created_twice_is_a_duplicate_even_after_the_first_was_removed():
    def event(kind, res, name):
        return (1, kind, res, "ns", {"metadata": {"name": name}})

    events = [event("ADDED", "pods", "analysis-an-1"), event("MODIFIED", "pods", "analysis-an-1"),
              event("DELETED", "pods", "analysis-an-1"), event("ADDED", "pods", "analysis-an-1"),
              event("ADDED", "pods", "analysis-an-2"), event("ADDED", "jobs", "analysis-an-2")]
    assert chaos.duplicate_creates(events, "pods") == ["pods analysis-an-1 created 2 times"]
    assert chaos.duplicate_creates(events, "jobs") == []


def test_help_answers_without_a_cluster():
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "--seed" in done.stdout and "pod_post_outage" in done.stdout
