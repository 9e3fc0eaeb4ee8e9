"""Artifact queries that read (seed 000, 3.3.1): GetArtifact, ListArtifacts."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import QuerySet

from core.errors import NotFound

from .models import Artifact


def artifact_get(*, artifact_id: int) -> Artifact:
    """GetArtifact: return one artifact. Raises NotFound."""
    artifact = Artifact.objects.filter(pk=artifact_id).first()
    if artifact is None:
        raise NotFound(f"Artifact {artifact_id} does not exist.")
    return artifact


def artifact_list(*, statuses: Iterable[str] | None = None, ids: Iterable[int] | None = None,
                  exp_ids: Iterable[int] | None = None,
                  updated_since: datetime | None = None,
                  exp_statuses: Iterable[str] | None = None,
                  cluster_names: Iterable[str] | None = None,
                  exp_types: Iterable[str] | None = None) -> QuerySet[Artifact]:
    """ListArtifacts: artifacts matching every filter given, by id.

    Args:
        statuses: keep artifacts in these statuses.
        ids, exp_ids: keep these artifacts / the artifacts of these experiments.
        updated_since: keep artifacts updated at or after this instant.
        exp_statuses, cluster_names, exp_types: keep artifacts whose experiment's status,
            cluster or type is one of these (joined in the same query).
    """
    qs = Artifact.objects.order_by("id")
    if statuses:
        qs = qs.filter(status__in=list(statuses))
    if ids:
        qs = qs.filter(pk__in=list(ids))
    if exp_ids:
        qs = qs.filter(experiment_id__in=list(exp_ids))
    if updated_since:
        qs = qs.filter(updated_at__gte=updated_since)
    if exp_statuses:
        qs = qs.filter(experiment__status__in=list(exp_statuses))
    if cluster_names:
        qs = qs.filter(experiment__cluster_name__in=list(cluster_names))
    if exp_types:
        qs = qs.filter(experiment__exp_type__in=list(exp_types))
    return qs
