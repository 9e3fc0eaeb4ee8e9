"""The artifact filters of every list: gRPC ListArtifacts and the admin's changelist.

gRPC's `CommonListReq` fields map onto these names in `core.grpc.from_proto.list_filters`
(`statuses` -> `status`, `exp_statuses` -> `exp_status`, `cluster_names` -> `cluster_name`,
`exp_types` -> `exp_type`, `ids` -> `id`, `exp_ids` -> `exp_id`, `updated_since`).
`artifact_type` and `search` have no `CommonListReq` field: the admin.
"""
from __future__ import annotations

from core.http.filters import (
    ChoiceListFilter, FalconFilterSet, IdListFilter, MultiValueFilter, SearchFilter,
    UpdatedSinceFilter,
)
from core.domain.statuses import ArtifactStatus, ExpStatus, choices

from .models import Artifact


class ArtifactFilter(FalconFilterSet):
    """Artifacts matching every filter given; a multi-value filter keeps any of its values.

    Filters: `status` (ArtifactStatus values), `exp_status` (ExpStatus values),
    `cluster_name`, `exp_type` (the experiment's), `artifact_type`, `id`, `exp_id` (positive
    ids), each repeated or a comma list; `updated_since` (a date-time); `search` (every term in
    the experiment's name or the path).

    Raises (from `validate`):
        ValidationFailed: a status is unknown, an id is not a positive integer, a name is over
            255 characters or `updated_since` is not a date-time; keyed by the filter's name.
    """

    status = ChoiceListFilter(choices=choices(ArtifactStatus),
                              help_text="Only these artifact statuses.")
    exp_status = ChoiceListFilter(field_name="experiment__status", choices=choices(ExpStatus),
                                  help_text="Only artifacts whose experiment is in these "
                                            "statuses.")
    cluster_name = MultiValueFilter(field_name="experiment__cluster_name",
                                    help_text="Only artifacts of experiments on these clusters.")
    exp_type = MultiValueFilter(field_name="experiment__exp_type",
                                help_text="Only artifacts of experiments of these types.")
    artifact_type = MultiValueFilter(help_text="Only artifacts of these types.")
    id = IdListFilter(help_text="Only these artifact ids.")
    exp_id = IdListFilter(field_name="experiment_id", help_text="Only the artifacts of these "
                                                                "experiments.")
    updated_since = UpdatedSinceFilter()
    search = SearchFilter(fields=("experiment__name", "path"), max_length=512,
                          help_text="Every term in the experiment's name or the path.")

    class Meta:
        model = Artifact
        fields: list[str] = []
