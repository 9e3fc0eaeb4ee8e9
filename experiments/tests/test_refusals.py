"""AbortExp's and DeleteExp's state rules, row by row, as the services state them once.

`exp_abort`, `exp_delete`, the files module's delete and the admin's confirmation pages all
read `exp_abort_refusal` and `exp_delete_refusal`; these rows pin what each answers.
"""
from __future__ import annotations

import pytest

from core.errors import Conflict
from core.domain.statuses import ExpStatus, JobStatus
from experiments.models import Experiment
from experiments.services import exp_abort_refusal, exp_delete_refusal

S, R, F = JobStatus.SUCCEEDED, JobStatus.RUNNING, JobStatus.FAILED

ABORT_ROWS = [
    # status, job statuses, refused with (None: the abort goes ahead or is a no-op)
    (ExpStatus.CREATED, [], None),
    (ExpStatus.CREATED, [JobStatus.PENDING], None),
    (ExpStatus.RUNNING, [R, S], None),
    (ExpStatus.RUNNING, [S, S], "has finished: all its 2 job(s) succeeded"),
    (ExpStatus.RUNNING, [S, F], None),
    (ExpStatus.ABORTING, [S], None),
    (ExpStatus.ABORTED, [], None),
    (ExpStatus.SUCCEEDED, [S], "already Succeeded; only Created or Running"),
    (ExpStatus.FAILED, [F], "already Failed; only Created or Running"),
]


@pytest.mark.parametrize("status, jobs, refused", ABORT_ROWS)
def test_abort_refusal(status, jobs, refused):
    answer = exp_abort_refusal(exp=Experiment(pk=7, status=status), job_statuses=jobs)
    if refused is None:
        assert answer is None
    else:
        assert isinstance(answer, Conflict)
        assert answer.message.startswith("Experiment 7 ")
        assert refused in answer.message


DELETE_ROWS = [
    (ExpStatus.CREATED, "Abort it first"),
    (ExpStatus.RUNNING, "Abort it first"),
    (ExpStatus.ABORTING, "It is being aborted: wait until it is Aborted"),
    (ExpStatus.ABORTED, None),
    (ExpStatus.SUCCEEDED, None),
    (ExpStatus.FAILED, None),
]


@pytest.mark.parametrize("status, refused", DELETE_ROWS)
def test_delete_refusal(status, refused):
    answer = exp_delete_refusal(exp=Experiment(pk=7, status=status))
    if refused is None:
        assert answer is None
    else:
        assert isinstance(answer, Conflict)
        assert f"Experiment 7 is {status}; only Succeeded, Failed or Aborted" in answer.message
        assert refused in answer.message
