"""ListExps query parameters, parsed by django-filter and applied by `selectors.exp_list`."""
from __future__ import annotations

import django_filters

from core.statuses import ExpStatus, choices

from ..models import Experiment
from ..selectors import exp_list


class ExpFilter(django_filters.FilterSet):
    """`?status=Running&status=Created&exp_type=&cluster_name=&creator=` (creator: email or id)."""

    status = django_filters.MultipleChoiceFilter(choices=choices(ExpStatus))
    exp_type = django_filters.CharFilter()
    cluster_name = django_filters.CharFilter()
    creator = django_filters.CharFilter(help_text="The creator's email or user id.")

    class Meta:
        model = Experiment
        fields = ["status", "exp_type", "cluster_name", "creator"]

    def filter_queryset(self, queryset):
        data = self.form.cleaned_data
        return exp_list(queryset=queryset, statuses=data.get("status"),
                        exp_type=data.get("exp_type"), cluster_name=data.get("cluster_name"),
                        creator=data.get("creator"))
