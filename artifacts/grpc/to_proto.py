"""Artifact rows -> `falcon.v1.ArtifactItem`."""
from __future__ import annotations

from falcon_proto.falcon.v1 import artifact_pb2
from core.grpc.from_proto import timestamp

from ..models import Artifact


def artifact_to_item(artifact: Artifact) -> artifact_pb2.ArtifactItem:
    """Return the message of one artifact (no extra query)."""
    return artifact_pb2.ArtifactItem(
        id=artifact.pk, exp_id=artifact.experiment_id, path=artifact.path,
        artifact_type=artifact.artifact_type, status=artifact.status, reason=artifact.reason,
        message=artifact.message, created_at=timestamp(artifact.created_at),
        updated_at=timestamp(artifact.updated_at), finished_at=timestamp(artifact.finished_at),
        file_count=artifact.file_count, total_bytes=artifact.total_bytes,
        prune_state=artifact.prune_state, pruned_at=timestamp(artifact.pruned_at),
    )
