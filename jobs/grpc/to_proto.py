"""Job rows -> `falcon.v1.JobItem`.

`task_spec_json` is strict JSON (RFC 8259): a stored spec holding a number JSON cannot carry
(an overflowing `1e400` reads back as infinity) raises `ValueError` here instead of sending
`Infinity`, which JSON parsers of other languages refuse; the list skips such a row
(`core.grpc.paging.keyset_page`).
"""
from __future__ import annotations

import json

from falcon_proto.falcon.v1 import job_pb2
from core.grpc.from_proto import timestamp

from ..models import Job


def job_to_item(job: Job, *, with_experiment: bool = True) -> job_pb2.JobItem:
    """Return the message of one job.

    Args:
        job: the job, with `experiment` already joined when `with_experiment` (the selectors
            `job_get` / `job_list` join it), so no query is made here.
        with_experiment: fill `exp_name`, `exp_status` and `exp_config` (the resource manager
            needs them); False inside an ExpItem, which carries them itself.
    """
    item = job_pb2.JobItem(
        id=job.pk, exp_id=job.experiment_id, role=job.role, cluster_name=job.cluster_name,
        exp_type=job.exp_type, task_spec_json=json.dumps(job.task_spec, sort_keys=True, allow_nan=False),
        artifact_path=job.artifact_path, priority=job.priority, status=job.status,
        reason=job.reason, message=job.message, cluster_job_name=job.cluster_job_name,
        created_at=timestamp(job.created_at), updated_at=timestamp(job.updated_at),
        started_at=timestamp(job.started_at), finished_at=timestamp(job.finished_at),
        aborting_at=timestamp(job.aborting_at), aborted_at=timestamp(job.aborted_at),
    )
    if with_experiment:
        exp = job.experiment
        item.exp_name, item.exp_status, item.exp_config = exp.name, exp.status, exp.config
    return item
