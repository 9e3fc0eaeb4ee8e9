"""Job queries that read: GetJob, ListJobs (filtered by `jobs.filters`), ListJobStates."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db.models import Case, F, QuerySet, TextField, Value, When
from django.db.models.functions import Cast

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


# What the resource manager decides and submits from (ListJobStates): no timestamps, priority
# or model instances, which cost most of a ListJobs page to build and encode.
STATE_FIELDS = ("id", "experiment_id", "role", "cluster_name", "exp_type", "status", "reason",
                "message", "cluster_job_name", "artifact_path")


def job_states(*, statuses: Sequence[str], cluster_names: Sequence[str], after: int | None,
               size: int) -> tuple[list[dict[str, Any]], bool]:
    """ListJobStates: a page of jobs as the resource manager needs them, by ascending id.

    One query (`WHERE status IN (...) AND cluster_name IN (...) AND id > after ORDER BY id
    LIMIT size + 1`, the experiment joined by its primary key) of `.values()` rows: the
    `STATE_FIELDS`, `exp_name`, `exp_status`, `exp_creator_email`, `task_spec_text` (the stored JSON text, not
    parsed here) and `exp_config`, the experiment's config only for a job whose cluster job
    name is not recorded yet (only a submit reads it; it is up to 128 KiB a row).

    Args:
        statuses: keep jobs in these statuses (validated names); empty keeps all.
        cluster_names: keep jobs of these clusters; empty keeps all.
        after: the last id of the previous page, None for the first page.
        size: jobs per page (>= 1).

    Returns:
        `(rows, more)`: at most `size` rows, and whether another page follows.
    """
    qs = Job.objects.order_by("id")
    if statuses:
        qs = qs.filter(status__in=list(statuses))
    if cluster_names:
        qs = qs.filter(cluster_name__in=list(cluster_names))
    if after is not None:
        qs = qs.filter(pk__gt=after)
    rows = list(qs.values(
        *STATE_FIELDS, exp_name=F("experiment__name"), exp_status=F("experiment__status"),
        exp_creator_email=F("experiment__creator__email"),
        task_spec_text=Cast("task_spec", TextField()),
        exp_config=Case(When(cluster_job_name="", then=F("experiment__config")),
                        default=Value(""), output_field=TextField()))[: size + 1])
    return rows[:size], len(rows) > size
