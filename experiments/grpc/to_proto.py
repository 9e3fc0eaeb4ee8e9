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
