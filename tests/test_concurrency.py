"""Races between separate connections: guarded transitions and user auto-registration.

Each thread has its own Django connection (connections are thread-local), so these run the real
database's locking: on MariaDB under REPEATABLE READ (decisions.md#auth-4), on SQLite with its
database lock.
"""
from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from rest_framework.test import APIClient

from accounts.models import User
from experiments.services import exp_abort
from experiments.tests.factories import make_exp
from core.errors import InvalidTransition
from jobs.models import Job
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db(transaction=True)


def race(*calls):
    """Run each call in its own thread, released together; return results or exceptions."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i, call):
        try:
            barrier.wait()
            results[i] = call()
        except Exception as exc:  # the loser's error is the result under test
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_two_writers_on_one_transition_exactly_one_wins():
    for attempt in range(10):
        exp = make_exp(name=f"race{attempt}")
        job = exp.jobs.get()
        job_update_status(job_id=job.pk, status="Running")
        outcomes = race(lambda: job_update_status(job_id=job.pk, status="Succeeded"),
                        lambda: job_update_status(job_id=job.pk, status="Failed"))
        winners = [o for o in outcomes if isinstance(o, tuple) and o[1]]
        losers = [o for o in outcomes if isinstance(o, InvalidTransition)]
        assert len(winners) == 1 and len(losers) == 1, outcomes
        assert Job.objects.get(pk=job.pk).status == winners[0][0].status


def test_repeated_transition_by_two_writers_changes_once():
    exp = make_exp()
    job = exp.jobs.get()
    outcomes = race(lambda: job_update_status(job_id=job.pk, status="Running"),
                    lambda: job_update_status(job_id=job.pk, status="Running"))
    assert sorted(o[1] for o in outcomes) == [False, True], outcomes


def test_abort_racing_a_job_update_leaves_a_consistent_state():
    for attempt in range(5):
        exp = make_exp(name=f"abort{attempt}")
        job = exp.jobs.get()
        outcomes = race(lambda: exp_abort(exp_id=exp.pk, actor=exp.creator),
                        lambda: job_update_status(job_id=job.pk, status="Running"))
        assert not isinstance(outcomes[0], Exception), outcomes
        status = Job.objects.get(pk=job.pk).status
        # Either the update came first (then abort moved Running to Aborting), or the abort
        # came first and the late Running update was refused.
        assert status == "Aborting", (status, outcomes)


def test_two_first_requests_of_a_new_user_make_one_row(token_for):
    token = token_for("newcomer@example.com")

    def request():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return client.get("/api/v1/auth/whoami").status_code

    for _ in range(3):
        User.objects.filter(email="newcomer@example.com").delete()
        assert race(request, request, request) == [200, 200, 200]
        assert User.objects.filter(email="newcomer@example.com").count() == 1


def _abort_vs_job_update_rounds(rounds: int, pairs_per_round: int, roles=("a", "b", "c")):
    """Race `exp_abort` against `job_update_status` on one of its jobs, many pairs at once.

    Returns every exception that reached a caller other than the expected refusals of a lost
    transition race (a job update arriving after the abort moved the job to Aborting).
    """
    from core.errors import FalconError

    unexpected: list = []
    for round_no in range(rounds):
        exps = [make_exp(name=f"dl{round_no}-{i}", roles=roles) for i in range(pairs_per_round)]
        calls = []
        for i, exp in enumerate(exps):
            jobs = list(exp.jobs.order_by("pk"))
            job = jobs[(round_no + i) % len(jobs)]
            target = "Running" if (round_no + i) % 2 else "Succeeded"
            calls.append(lambda exp=exp: exp_abort(exp_id=exp.pk, actor=exp.creator))
            calls.append(lambda job=job, target=target: job_update_status(job_id=job.pk,
                                                                          status=target))
        outcomes = race(*calls)
        for outcome in outcomes:
            if isinstance(outcome, InvalidTransition):
                continue  # the abort won: Aborting -> Running/Succeeded is refused, as it should
            if isinstance(outcome, Exception) and not (
                    isinstance(outcome, FalconError) and "finished" in str(outcome)):
                unexpected.append(outcome)
        for exp, abort_outcome in zip(exps, outcomes[::2]):
            if isinstance(abort_outcome, Exception):
                continue
            statuses = set(Job.objects.filter(experiment=exp).values_list("status", flat=True))
            assert statuses <= {"Aborting", "Succeeded"}, statuses
    return unexpected


def test_abort_racing_job_updates_never_deadlocks_to_a_caller():
    """AbortExp against UpdateJobStatus of one of its jobs: one lock order, retried deadlocks.

    On MariaDB 300 pairs race (in rounds of 10 at once); no error other than a refused
    transition reaches a caller. SQLite serialises writers, so fewer rounds show the same rule.
    """
    mariadb = connection.vendor == "mysql"
    rounds = 30 if mariadb else 3
    assert _abort_vs_job_update_rounds(rounds, 10) == []
