"""Job queries that read (seed 000, 3.3.1): GetJob, ListJobs."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import QuerySet

from core.errors import NotFound

from .models import Job


def job_get(*, job_id: int) -> Job:
    """GetJob: return one job. Raises NotFound."""
    job = Job.objects.select_related("experiment").filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"Job {job_id} does not exist.")
    return job


def job_list(*, statuses: Iterable[str] | None = None, cluster_names: Iterable[str] | None = None,
             exp_type: str | None = None, ids: Iterable[int] | None = None,
             exp_ids: Iterable[int] | None = None,
             exp_statuses: Iterable[str] | None = None,
             updated_since: datetime | None = None,
             exp_types: Iterable[str] | None = None) -> QuerySet[Job]:
    """ListJobs: jobs matching every filter given, by id (the expController's input, seed 3.2.3).

    The experiment is joined in the same query (its name, config and status are needed by the
    controllers), so a list costs one query whatever its size.

    Args:
        statuses, cluster_names, exp_types: keep jobs whose value is one of these.
        exp_type: keep jobs of this experiment type.
        ids, exp_ids: keep these jobs / the jobs of these experiments.
        exp_statuses: keep jobs whose experiment is in one of these statuses.
        updated_since: keep jobs updated at or after this instant.
    """
    qs = Job.objects.select_related("experiment").order_by("id")
    if statuses:
        qs = qs.filter(status__in=list(statuses))
    if cluster_names:
        qs = qs.filter(cluster_name__in=list(cluster_names))
    if exp_type:
        qs = qs.filter(exp_type=exp_type)
    if exp_types:
        qs = qs.filter(exp_type__in=list(exp_types))
    if ids:
        qs = qs.filter(pk__in=list(ids))
    if exp_ids:
        qs = qs.filter(experiment_id__in=list(exp_ids))
    if exp_statuses:
        qs = qs.filter(experiment__status__in=list(exp_statuses))
    if updated_since:
        qs = qs.filter(updated_at__gte=updated_since)
    return qs
