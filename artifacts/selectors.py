"""Artifact queries that read: GetArtifact, ListArtifacts (filtered by `artifacts.filters`)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet

from core.errors import NotFound

from .filters import ArtifactFilter
from .models import Artifact


def artifact_get(*, artifact_id: int) -> Artifact:
    """GetArtifact: return artifact `artifact_id`.

    Raises:
        NotFound: no artifact has this id.
    """
    artifact = Artifact.objects.filter(pk=artifact_id).first()
    if artifact is None:
        raise NotFound(f"Artifact {artifact_id} does not exist.")
    return artifact


def artifact_list(*, filters: Mapping[str, Any] | None = None) -> QuerySet[Artifact]:
    """ListArtifacts: the artifacts matching every filter given, by id.

    Args:
        filters: validated values by `ArtifactFilter` name, as `ArtifactFilter.validate` or
            `core.grpc.from_proto.list_filters` return them: `{"status": ["Created"],
            "exp_status": [...], "cluster_name": [...], "exp_type": [...], "id": [...],
            "exp_id": [...], "updated_since": datetime}`; the experiment's fields are joined
            in the same query.

    Raises:
        ValueError: `filters` names a filter `ArtifactFilter` does not declare.
    """
    return ArtifactFilter.apply(Artifact.objects.order_by("id"), filters or {})
