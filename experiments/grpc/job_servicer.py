"""JobService (falcon.v1): parse the request, call the service or selector, map the result.

No business rules here: they are in `jobs.services` / `jobs.selectors`, and in
`experiments.services.job_create`, which adds a row to an experiment under its row lock. The
servicer lives with the experiment, the aggregate root, so the jobs app never imports
experiments. Domain errors propagate to `falcon_site.grpc.interceptors`, which maps them to gRPC
status codes once.
"""
from __future__ import annotations

from jobs import selectors, services
from jobs.filters import JobFilter
from jobs.grpc.to_proto import job_state_to_item, job_to_item
from core.grpc.from_proto import (
    datetime_of,
    json_value,
    list_filters,
    optional,
    repeated_values,
    require_choice,
    require_id,
    status_changes,
)
from core.grpc.paging import (
    decode_page_token,
    encode_page_token,
    fill_page,
    keyset_page,
    page_size_of,
)
from core.domain.statuses import JobStatus
from experiments.services import job_create
from falcon_proto.falcon.v1 import common_pb2, job_pb2, job_pb2_grpc


# ListJobStates pages: 1,000 jobs by default, at most 5,000 (a page of 5,000 jobs without
# configs is about 2 MiB; the byte budget of `fill_page` ends a page early beyond 8 MiB).
STATES_PAGE_SIZE = 1000
STATES_MAX_PAGE_SIZE = 5000


def _item(job_id: int) -> job_pb2.JobItem:
    return job_to_item(selectors.job_get(job_id=job_id))


def _summary(job_id: int) -> job_pb2.JobItem:
    """The write replies' job: no task spec or experiment config (GetJob has them)."""
    return job_to_item(selectors.job_get_summary(job_id=job_id), specs=False)


class JobServicer(job_pb2_grpc.JobServiceServicer):
    """JobService over the service layer."""

    def CreateJob(self, request, context):
        """CreateJob -> `experiments.services.job_create` (open experiments, new role only)."""
        job = job_create(exp_id=require_id(request.exp_id, "exp_id"), role=request.role,
                                  task_spec=json_value(request.task_spec_json, "task_spec_json"))
        return job_pb2.JobCommonResp(job=_summary(job.pk), changed=True, id=job.pk)

    def UpdateJobStatus(self, request, context):
        """UpdateJobStatus -> `services.job_update_status` (guarded transition)."""
        job_id = require_id(request.id)
        expected = optional(request, "expected")
        job, changed = services.job_update_status(
            job_id=job_id, status=require_choice(request.status, "status", list(JobStatus)),
            reason=optional(request, "reason"), message=optional(request, "message"),
            expected=None if expected is None else require_choice(expected, "expected",
                                                                  list(JobStatus)),
            cluster_job_name=optional(request, "cluster_job_name"),
            started_at=datetime_of(request, "started_at"))
        return job_pb2.JobCommonResp(job=_summary(job.pk), changed=changed, id=job.pk)

    def UpdateJobStatuses(self, request, context):
        """UpdateJobStatuses -> `services.job_update_statuses`: one guarded transition per item,
        one result per item (a refused item never fails the call)."""
        outcomes = services.job_update_statuses(status_changes(
            request.items, JobStatus, extra_fields=("cluster_job_name",), with_start=True))
        return job_pb2.UpdateJobStatusesResp(results=[
            job_pb2.UpdateJobStatusResult(
                id=o.pk, changed=o.changed, status=o.status,
                error_code=o.error.code if o.error else "",
                error_message=o.error.message if o.error else "")
            for o in outcomes])

    def GetJob(self, request, context):
        """GetJob -> `selectors.job_get`."""
        return _item(require_id(request.id))

    def ListJobs(self, request, context):
        """ListJobs -> `selectors.job_list`, one keyset page (the expController's input).

        The filters are `JobFilter`'s (`list_filters` maps the request's fields onto them). A
        row that cannot be encoded is skipped and reported in `skipped` (`keyset_page`).
        """
        filters = list_filters(request, JobFilter, rpc="ListJobs")
        page = keyset_page(selectors.job_list(filters=filters), page_size=request.page_size,
                           page_token=request.page_token, to_message=job_to_item, rpc="ListJobs")
        return job_pb2.ListJobsResp(
            jobs=page.items, next_page_token=page.next_page_token,
            skipped=[common_pb2.SkippedRow(id=job.pk, exp_id=job.experiment_id)
                     for job in page.skipped])

    def ListJobStates(self, request, context):
        """ListJobStates -> `selectors.job_states`: a page of jobs with only the fields the
        resource manager reads (the experiment's config only for jobs not yet submitted, and
        their task spec too when the request says `submit_specs_only`).

        A row that cannot be encoded is skipped and reported in `skipped` (`fill_page`).

        Raises:
            ValidationFailed: an unknown status, or a bad `page_size` / `page_token`.
        """
        statuses = repeated_values(request.statuses, "statuses", choices=JobStatus)
        size = page_size_of(request.page_size, default=STATES_PAGE_SIZE,
                            maximum=STATES_MAX_PAGE_SIZE)
        rows, more = selectors.job_states(statuses=statuses,
                                          cluster_names=repeated_values(
                                              request.cluster_names, "cluster_names"),
                                          after=decode_page_token(request.page_token),
                                          size=size)
        only = request.submit_specs_only
        page = fill_page(rows, size,
                         to_message=lambda row: job_state_to_item(row, submit_specs_only=only),
                         token_of=lambda row: encode_page_token(row["id"]), rpc="ListJobStates",
                         id_of=lambda row: row["id"], kind_of=lambda row: "Job", more=more)
        return job_pb2.ListJobStatesResp(
            jobs=page.items, next_page_token=page.next_page_token,
            skipped=[common_pb2.SkippedRow(id=row["id"], exp_id=row["experiment_id"])
                     for row in page.skipped])

    def DeleteJob(self, request, context):
        """DeleteJob -> `services.job_delete` (terminal jobs only)."""
        job_id = require_id(request.id)
        services.job_delete(job_id=job_id)
        return job_pb2.JobCommonResp(changed=True, id=job_id)
