"""Row locks, taken only here and in ONE order (decisions.md#dec-aggregate).

Every transaction that touches an experiment together with its jobs or its artifact locks, in
this order and only by primary key: the experiment row, then its jobs in ascending id, then its
artifact. A job or artifact is then written by primary key (`filter(pk__in=[locked ids])`), never
by `experiment_id` or `status`: a range scan of a secondary index also locks index entries and
gaps of other experiments' rows, and those locks, taken in another order than a single-row
UPDATE's, are what deadlocked AbortExp against UpdateJobStatus on MariaDB.

Single-row writers (UpdateJobStatus, UpdateArtifactStatus, UpdateExpStatus) touch one row by
primary key and lock nothing else, so they cannot close a cycle with this order. The rare
deadlock or lock-wait timeout left is retried by `core.database.db.retry_on_lock_conflict`.

Callers must be inside `transaction.atomic()`. SQLite ignores `SELECT ... FOR UPDATE` (its
writers are serialised by the database lock).
"""
from __future__ import annotations

from core.errors import NotFound


def lock_experiment_with_jobs(exp_id: int):
    """Lock experiment `exp_id`, then its jobs by primary key; return `(experiment, [jobs])`.

    The job ids are read without a lock once the experiment is locked (no job can be added to
    it meanwhile: CreateJob locks the experiment first), then exactly those rows are locked by
    primary key, in ascending order.

    Raises:
        NotFound: no experiment has this id.
    """
    from experiments.models import Experiment
    from jobs.models import Job

    exp = Experiment.objects.select_for_update().filter(pk=exp_id).first()
    if exp is None:
        raise NotFound(f"Experiment {exp_id} does not exist.")
    job_ids = list(Job.objects.filter(experiment_id=exp_id).values_list("pk", flat=True))
    jobs = (list(Job.objects.select_for_update().filter(pk__in=job_ids).order_by("pk"))
            if job_ids else [])
    return exp, jobs


def lock_artifact_ids(exp_id: int) -> list[int]:
    """Lock the artifact of experiment `exp_id` (after its jobs) by primary key; return its ids.

    Call after `lock_experiment_with_jobs`, in the same transaction.
    """
    from artifacts.models import Artifact

    ids = list(Artifact.objects.filter(experiment_id=exp_id).values_list("pk", flat=True))
    if ids:
        list(Artifact.objects.select_for_update().filter(pk__in=ids).order_by("pk")
             .values_list("pk", flat=True))
    return ids
