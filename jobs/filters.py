"""The job filters of every list: gRPC ListJobs and the admin's changelist.

gRPC's `CommonListReq` fields map onto these names in `core.grpc.from_proto.list_filters`
(`statuses` -> `status`, `exp_statuses` -> `exp_status`, `cluster_names` -> `cluster_name`,
`exp_types` -> `exp_type`, `ids` -> `id`, `exp_ids` -> `exp_id`, `updated_since`).
"""
from __future__ import annotations

from core.http.filters import (
    ChoiceListFilter, FalconFilterSet, IdListFilter, MultiValueFilter, SearchFilter,
    UpdatedSinceFilter,
)
from core.domain.statuses import ExpStatus, JobStatus, choices

from .models import Job


class JobFilter(FalconFilterSet):
    """Jobs matching every filter given; a multi-value filter keeps any of its values.

    Filters: `status` (JobStatus values), `exp_status` (ExpStatus values: the experiment's),
    `cluster_name`, `exp_type`, `id`, `exp_id` (positive ids), each repeated or a comma list;
    `updated_since` (a date-time); `search` (every term in the experiment's name or the role).

    Raises (from `validate`):
        ValidationFailed: a status is unknown, an id is not a positive integer, a name is over
            255 characters or `updated_since` is not a date-time; keyed by the filter's name.
    """

    status = ChoiceListFilter(choices=choices(JobStatus), help_text="Only these job statuses.")
    exp_status = ChoiceListFilter(field_name="experiment__status", choices=choices(ExpStatus),
                                  help_text="Only jobs whose experiment is in these statuses.")
    cluster_name = MultiValueFilter(help_text="Only jobs on these clusters.")
    exp_type = MultiValueFilter(help_text="Only jobs of experiments of these types.")
    id = IdListFilter(help_text="Only these job ids.")
    exp_id = IdListFilter(field_name="experiment_id", help_text="Only the jobs of these "
                                                                "experiments.")
    updated_since = UpdatedSinceFilter()
    search = SearchFilter(fields=("experiment__name", "role"),
                          help_text="Every term in the experiment's name or the role.")

    class Meta:
        model = Job
        fields: list[str] = []
