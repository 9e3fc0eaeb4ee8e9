"""The experiment filters of every list: HTTP ListExps, gRPC ListExps and the admin's changelist.

The HTTP query string uses these names as they are (`?status=Running,Created&exp_type=profiling`);
gRPC's `CommonListReq` fields map onto them in `core.grpc.from_proto.list_filters`
(`statuses` -> `status`, `exp_types` -> `exp_type`, `cluster_names` -> `cluster_name`, `ids` ->
`id`, `updated_since`). `creator` and `search` have no `CommonListReq` field: HTTP and the admin.
"""
from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from accounts.models import User
from core.filters import (
    ChoiceListFilter, FalconFilterSet, IdListFilter, MultiValueFilter, PrefixSearchFilter,
    UpdatedSinceFilter,
)
from core.statuses import ExpStatus, choices

from .models import Experiment


SEARCH_HELP = ("Only the experiments whose name starts with this text, case-insensitive "
               "(`llama` matches `llama-7b` and `Llama-bench`, not `my-llama`); served by an "
               "index on the name.")


class ExperimentFilter(FalconFilterSet):
    """Experiments matching every filter given; a multi-value filter keeps any of its values.

    Filters (query names): `status` (ExpStatus values), `exp_type`, `cluster_name`, `id`
    (positive ids), each repeated or a comma list; `updated_since` (ISO 8601); `creator` (the
    creator's email or user id); `search` (a name prefix, case-insensitive: `PrefixSearchFilter`).

    Raises (from `validate`):
        ValidationFailed: a status is unknown, an id is not a positive integer, a name is over
            255 characters or `updated_since` is not a date-time; keyed by the filter's name.
    """

    status = ChoiceListFilter(choices=choices(ExpStatus),
                              help_text="Only these statuses (repeat it, or a comma list).")
    exp_type = MultiValueFilter(help_text="Only these experiment types (repeat it, or a comma "
                                          "list).")
    cluster_name = MultiValueFilter(help_text="Only these clusters (repeat it, or a comma list).")
    id = IdListFilter(help_text="Only these experiment ids (repeat it, or a comma list).")
    updated_since = UpdatedSinceFilter()
    creator = django_filters.CharFilter(method="filter_creator",
                                        help_text="Only the experiments of this creator (email "
                                                  "or user id).")
    search = PrefixSearchFilter(fields=("name",), help_text=SEARCH_HELP)

    class Meta:
        model = Experiment
        fields: list[str] = []

    def filter_creator(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        """Keep the experiments whose creator has this email or this user id.

        The users are looked up first (one small query on their unique keys), so the list
        itself filters on `creator_id` alone, served by the index on (creator, created_at, id),
        instead of joining users (which let MariaDB start from the users table and sort).
        """
        user_ids = list(User.objects.filter(Q(email=value) | Q(pk=value))
                        .values_list("pk", flat=True)[:2])
        if len(user_ids) == 1:
            return queryset.filter(creator_id=user_ids[0])
        return queryset.filter(creator_id__in=user_ids)
