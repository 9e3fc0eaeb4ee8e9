"""Experiment rows -> `falcon.v1.ExpItem`.

`role_to_task_spec_json` is strict JSON, as in `jobs.grpc.to_proto`.
"""
from __future__ import annotations

import json

from artifacts.grpc.to_proto import artifact_to_item
from falcon_proto.falcon.v1 import experiment_pb2
from core.grpc.from_proto import timestamp
from jobs.grpc.to_proto import job_to_item

from ..models import Experiment


def exp_to_item(exp: Experiment, *, detail: bool = True,
                specs: bool = True) -> experiment_pb2.ExpItem:
    """Return the message of one experiment.

    Args:
        exp: from `selectors.exp_get` (detail), `selectors.exp_summary_queryset` (list) or
            `selectors.exp_get_summary` (write replies), so creator, artifact and, for detail,
            jobs are already loaded: no query is made here.
        detail: include `config` and `jobs` (GetExp); ListExps and the write RPCs leave them
            empty, as documented in experiment.proto.
        specs: include `role_to_task_spec_json` (GetExp, ListExps); the write RPCs leave it
            empty so that their reply stays small whatever the specs' size.
    """
    item = experiment_pb2.ExpItem(
        id=exp.pk, name=exp.name, creator_id=exp.creator_id, creator_email=exp.creator.email,
        cluster_name=exp.cluster_name, exp_type=exp.exp_type,
        artifact_path=exp.artifact_path, priority=exp.priority, status=exp.status,
        reason=exp.reason, message=exp.message, created_at=timestamp(exp.created_at),
        updated_at=timestamp(exp.updated_at), started_at=timestamp(exp.started_at),
        finished_at=timestamp(exp.finished_at), aborting_at=timestamp(exp.aborting_at),
        aborted_at=timestamp(exp.aborted_at), labels=exp.labels or {},
        cloned_from=exp.cloned_from,
    )
    if specs:
        item.role_to_task_spec_json = json.dumps(exp.role_to_task_spec, sort_keys=True,
                                                 allow_nan=False)
    artifact = getattr(exp, "artifact", None)  # the reverse one-to-one raises when absent
    if artifact is not None:
        item.artifact.CopyFrom(artifact_to_item(artifact))
    if detail:
        item.config = exp.config
        item.jobs.extend(job_to_item(job, with_experiment=False) for job in exp.jobs.all())
    return item


def exp_state_to_item(row: dict) -> experiment_pb2.ExpState:
    """Return the `ExpState` of one `selectors.exp_states` row (its jobs and artifact in it).

    Args:
        row: a `selectors.STATE_EXP_FIELDS` dict with `jobs` (`STATE_JOB_FIELDS` dicts) and
            `artifact` (a `STATE_ARTIFACT_FIELDS` dict or None).

    Raises:
        TypeError, ValueError: a value its field cannot hold (the list skips the row).
    """
    artifact = row["artifact"]
    return experiment_pb2.ExpState(
        id=row["id"], name=row["name"], status=row["status"], reason=row["reason"],
        message=row["message"], cluster_name=row["cluster_name"], exp_type=row["exp_type"],
        artifact_path=row["artifact_path"],
        jobs=[experiment_pb2.ExpStateJob(id=j["id"], role=j["role"], status=j["status"],
                                         reason=j["reason"], message=j["message"])
              for j in row["jobs"]],
        artifact=None if artifact is None else experiment_pb2.ExpStateArtifact(
            id=artifact["id"], path=artifact["path"], artifact_type=artifact["artifact_type"],
            status=artifact["status"], reason=artifact["reason"],
            message=artifact["message"]))
