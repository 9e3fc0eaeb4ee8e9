"""Job queries that read: GetJob, ListJobs (filtered by `jobs.filters`)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet

from core.errors import NotFound

from .filters import JobFilter
from .models import Job


def job_get(*, job_id: int) -> Job:
    """GetJob: return job `job_id` with its experiment joined.

    Raises:
        NotFound: no job has this id.
    """
    job = Job.objects.select_related("experiment").filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"Job {job_id} does not exist.")
    return job


def job_get_summary(*, job_id: int) -> Job:
    """The job the write RPCs answer with (CreateJob, UpdateJobStatus): its experiment joined
    without config or task specs, and its own task spec not loaded, so the reply stays small
    however large the spec is. GetJob has everything.

    Raises:
        NotFound: no job has this id.
    """
    job = (Job.objects.select_related("experiment")
           .defer("task_spec", "experiment__config", "experiment__role_to_task_spec")
           .filter(pk=job_id).first())
    if job is None:
        raise NotFound(f"Job {job_id} does not exist.")
    return job


def job_list(*, filters: Mapping[str, Any] | None = None) -> QuerySet[Job]:
    """ListJobs: the jobs matching every filter given, by id (the expController's input).

    The experiment is joined in the same query (its name, config and status are needed by the
    controllers), so a list costs one query whatever its size.

    Args:
        filters: validated values by `JobFilter` name, as `JobFilter.validate` or
            `core.grpc.from_proto.list_filters` return them: `{"status": ["Running"],
            "exp_status": [...], "cluster_name": [...], "exp_type": [...], "id": [...],
            "exp_id": [...], "updated_since": datetime}`.

    Raises:
        ValueError: `filters` names a filter `JobFilter` does not declare.
    """
    qs = Job.objects.select_related("experiment").order_by("id")
    return JobFilter.apply(qs, filters or {})
