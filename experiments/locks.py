"""Row locks, taken only here and always in primary-key order (decisions.md#dec-aggregate).

Locks are needed only where a rule depends on several rows: AbortExp, DeleteExp, CreateJob and
CreateArtifact read the experiment (and its jobs), then act on its rows. Callers must be inside `transaction.atomic()`.
SQLite ignores `SELECT ... FOR UPDATE` (its writers are serialised by the database lock).
"""
from __future__ import annotations

from core.errors import NotFound


def lock_experiment_with_jobs(exp_id: int):
    """Lock experiment `exp_id`, then its jobs by pk; return `(experiment, [jobs])`.

    Raises:
        NotFound: no experiment has this id.
    """
    from experiments.models import Experiment
    from jobs.models import Job

    exp = Experiment.objects.select_for_update().filter(pk=exp_id).first()
    if exp is None:
        raise NotFound(f"Experiment {exp_id} does not exist.")
    jobs = list(Job.objects.select_for_update().filter(experiment_id=exp_id).order_by("pk"))
    return exp, jobs
