"""Job rows -> `falcon.v1.JobItem`, and `jobs.selectors.job_states` rows -> `JobState`.

`task_spec_json` is strict JSON (RFC 8259): a stored spec holding a number JSON cannot carry
(an overflowing `1e400` reads back as infinity) raises `ValueError` here instead of sending
`Infinity`, which JSON parsers of other languages refuse; the list skips such a row
(`core.grpc.paging.keyset_page`). A `JobState` carries the stored text as it is and the
spec's `image`, read from it here: a spec that is not strict JSON, not an object or whose
image is not a string raises `ValueError`, and ListJobStates skips that row.
"""
from __future__ import annotations

import json

import orjson

from falcon_proto.falcon.v1 import job_pb2
from core.grpc.from_proto import timestamp

from ..models import Job


def job_to_item(job: Job, *, with_experiment: bool = True,
                specs: bool = True) -> job_pb2.JobItem:
    """Return the message of one job.

    Args:
        job: the job, with `experiment` already joined when `with_experiment` (the selectors
            `job_get` / `job_list` / `job_get_summary` join it), so no query is made here.
        with_experiment: fill `exp_name`, `exp_status` and, with `specs`, `exp_config` (the
            resource manager needs them); False inside an ExpItem, which carries them itself.
        specs: fill `task_spec_json` and `exp_config` (GetJob, ListJobs); the write RPCs leave
            them empty so that their reply stays small whatever their size.
    """
    item = job_pb2.JobItem(
        id=job.pk, exp_id=job.experiment_id, role=job.role, cluster_name=job.cluster_name,
        exp_type=job.exp_type, artifact_path=job.artifact_path, priority=job.priority,
        status=job.status, reason=job.reason, message=job.message,
        cluster_job_name=job.cluster_job_name,
        created_at=timestamp(job.created_at), updated_at=timestamp(job.updated_at),
        started_at=timestamp(job.started_at), finished_at=timestamp(job.finished_at),
        aborting_at=timestamp(job.aborting_at), aborted_at=timestamp(job.aborted_at),
    )
    if specs:
        item.task_spec_json = json.dumps(job.task_spec, sort_keys=True, allow_nan=False)
    if with_experiment:
        exp = job.experiment
        item.exp_name, item.exp_status = exp.name, exp.status
        if specs:
            item.exp_config = exp.config
    return item


def spec_image(text: str) -> str:
    """Return the image of a stored TaskSpec's JSON text ("" when it names none), read as
    `TaskSpec.from_json` reads it.

    Raises:
        ValueError: the text is not strict JSON, not an object, or its image not a string.
    """
    value = orjson.loads(text)
    if type(value) is not dict:
        raise ValueError(f"a TaskSpec must be a JSON object; got {type(value).__name__}")
    image = value.get("image") or ""
    if type(image) is not str:
        raise ValueError(f"TaskSpec field image must be a string; got {image!r}")
    return image


def job_state_to_item(row: dict, *, submit_specs_only: bool = False) -> job_pb2.JobState:
    """Return the `JobState` of one `jobs.selectors.job_states` row.

    Args:
        row: the row.
        submit_specs_only: send the task spec's text only for a job whose cluster job name is
            not recorded yet (the one a submit reads it for), as the config; every job gets
            its `image` either way (ListJobStatesReq.submit_specs_only).

    Raises:
        TypeError, ValueError: a value its field cannot hold, a spec that cannot be read
            (`spec_image`): the list skips the row.
    """
    text = row["task_spec_text"]
    return job_pb2.JobState(
        id=row["id"], exp_id=row["experiment_id"], exp_name=row["exp_name"],
        exp_status=row["exp_status"], exp_type=row["exp_type"], role=row["role"],
        cluster_name=row["cluster_name"], status=row["status"], reason=row["reason"],
        message=row["message"], cluster_job_name=row["cluster_job_name"],
        artifact_path=row["artifact_path"],
        task_spec_json="" if submit_specs_only and row["cluster_job_name"] else text,
        exp_config=row["exp_config"] or "", exp_creator_email=row["exp_creator_email"] or "",
        image=spec_image(text))
