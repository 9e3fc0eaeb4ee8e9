"""Experiment queries that read (seed 000, 3.3.1): GetExp, ListExps."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Prefetch, Q, QuerySet

from core.errors import NotFound
from jobs.models import Job

from .models import Experiment


def exp_queryset() -> QuerySet[Experiment]:
    """Experiments with creator, artifact and jobs loaded in a constant number of queries."""
    return (Experiment.objects.select_related("creator", "artifact")
            .prefetch_related(Prefetch("jobs", queryset=Job.objects.order_by("role"))))


def exp_summary_queryset() -> QuerySet[Experiment]:
    """Experiments with creator and artifact joined, `config` deferred and jobs not loaded.

    A page of these costs one query and stays small whatever the configs' sizes (a config may
    be 1 MiB): the shape of ListExps over gRPC, where callers fetch jobs with ListJobs.
    """
    return Experiment.objects.select_related("creator", "artifact").defer("config")


def exp_get(*, exp_id: int) -> Experiment:
    """GetExp: return one experiment with its jobs and artifact.

    Raises:
        NotFound: no experiment has this id.
    """
    exp = exp_queryset().filter(pk=exp_id).first()
    if exp is None:
        raise NotFound(f"Experiment {exp_id} does not exist.")
    return exp


def exp_list(*, statuses: Iterable[str] | None = None, exp_type: str | None = None,
             cluster_name: str | None = None, creator: str | None = None,
             search: str | None = None, ids: Iterable[int] | None = None,
             updated_since: datetime | None = None,
             exp_types: Iterable[str] | None = None,
             cluster_names: Iterable[str] | None = None,
             queryset: QuerySet[Experiment] | None = None) -> QuerySet[Experiment]:
    """ListExps: experiments matching every filter given, newest first.

    Args:
        queryset: the experiments to filter (default `exp_queryset()`).
        statuses: keep these statuses only.
        exp_type, cluster_name: exact matches.
        creator: the creator's email or user id.
        search: case-insensitive substring of the name.
        ids: keep these ids only.
        updated_since: keep rows updated at or after this instant.
        exp_types, cluster_names: keep rows whose value is one of these (gRPC CommonListReq).
    """
    qs = exp_queryset() if queryset is None else queryset
    if statuses:
        qs = qs.filter(status__in=list(statuses))
    if exp_type:
        qs = qs.filter(exp_type=exp_type)
    if cluster_name:
        qs = qs.filter(cluster_name=cluster_name)
    if exp_types:
        qs = qs.filter(exp_type__in=list(exp_types))
    if cluster_names:
        qs = qs.filter(cluster_name__in=list(cluster_names))
    if creator:
        qs = qs.filter(Q(creator__email=creator) | Q(creator_id=creator))
    if search:
        qs = qs.filter(name__icontains=search)
    if ids:
        qs = qs.filter(pk__in=list(ids))
    if updated_since:
        qs = qs.filter(updated_at__gte=updated_since)
    return qs
