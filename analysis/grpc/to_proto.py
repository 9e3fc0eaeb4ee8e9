"""AnalysisRecord rows -> `falcon.v1.AnalysisRecord`, and awaiting triples -> `ExpAwaiting`."""
from __future__ import annotations

from core.grpc.from_proto import timestamp
from falcon_proto.falcon.v1 import analysis_pb2

from ..models import AnalysisRecord
from ..selectors import AwaitingTriple


def record_to_proto(record: AnalysisRecord, *, with_script: bool = False
                    ) -> analysis_pb2.AnalysisRecord:
    """Return the message of one record.

    Args:
        record: from `analysis.selectors` (experiment, artifact and creator joined: no query).
        with_script: include `script_content` (GetAnalysisRecord with `with_script`); every
            message carries `script_bytes`.
    """
    return analysis_pb2.AnalysisRecord(
        analysis_id=record.analysis_id, name=record.name, exp_id=record.experiment_id,
        analysis_type=record.analysis_type, plugin_name=record.plugin_name,
        status=record.status, result_path=record.result_path, error_message=record.message,
        command=record.command,
        script_content=record.script_content if with_script else "",
        script_bytes=record.script_bytes, script_name=record.script_name,
        artifact_id=record.artifact_id,
        artifact_path=record.artifact.path, artifact_type=record.artifact.artifact_type,
        creator_email=record.creator.email, attempts=record.attempts,
        cluster_object_name=record.cluster_object_name, reason=record.reason,
        created_at=timestamp(record.created_at), updated_at=timestamp(record.updated_at),
        started_at=timestamp(record.started_at), finished_at=timestamp(record.finished_at),
    )


def awaiting_to_proto(triple: AwaitingTriple) -> analysis_pb2.ExpAwaiting:
    """Return the message of one piece of offline work (experiment, artifact, plugin)."""
    exp, artifact = triple.experiment, triple.artifact
    return analysis_pb2.ExpAwaiting(
        exp_id=exp.pk, exp_name=exp.name, exp_type=exp.exp_type,
        creator_email=exp.creator.email, artifact_id=artifact.pk, artifact_path=artifact.path,
        artifact_type=artifact.artifact_type, plugin_name=triple.plugin_name,
        finished_at=timestamp(exp.finished_at))
