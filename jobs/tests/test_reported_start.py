"""UpdateJobStatus(es) `started_at`: the job's start as its cluster reported it
(cluster-behaviours.md#cb-25), over the wire: recorded once, clamped, refused where it has no
meaning."""
from __future__ import annotations

from datetime import timedelta

import grpc
import pytest
from django.utils import timezone

from accounts.tests.factories import UserFactory
from controllers.contract import JobStatusUpdate
from core.grpc.from_proto import timestamp
from core.domain.statemachine import START_CASE_ROWS
from experiments.tests.factories import make_exp
from falcon_proto.falcon.v1 import job_pb2
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    falcon_api,
    grpc_channel,
    grpc_server,
    stubs,
)
from jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def jobs(count: int, name: str = "s") -> list[Job]:
    """`count` Pending jobs created an hour ago (so a start may lie before the server's now)."""
    user = UserFactory()
    made = [make_exp(creator=user, name=f"{name}{i}").jobs.get() for i in range(count)]
    Job.objects.filter(pk__in=[j.pk for j in made]).update(
        created_at=timezone.now() - timedelta(hours=1))
    return list(Job.objects.filter(pk__in=[j.pk for j in made]).order_by("pk"))


def test_each_item_records_its_own_start_once(falcon_api):
    """More rows than one CASE holds, each with its own start, in one call; then the first
    start wins over a later one."""
    rows = jobs(START_CASE_ROWS + 3)
    base = rows[0].created_at + timedelta(minutes=1)
    starts = {job.pk: base + timedelta(seconds=i, microseconds=i) for i, job in enumerate(rows)}
    plain = rows[-1]  # moved with the others, without a start: Running records now
    results = falcon_api.update_job_statuses(
        [JobStatusUpdate(pk, "Succeeded", started_at=start) for pk, start in starts.items()
         if pk != plain.pk] + [JobStatusUpdate(plain.pk, "Running")])
    assert [r.error for r in results] == [None] * len(rows)
    stored = dict(Job.objects.values_list("pk", "started_at"))
    assert {pk: stored[pk] for pk in starts if pk != plain.pk} == {
        pk: start for pk, start in starts.items() if pk != plain.pk}
    assert stored[plain.pk] > base + timedelta(minutes=30)  # now, not another row's start
    later = timezone.now() - timedelta(minutes=1)
    falcon_api.update_job_status(job_id=plain.pk, status="Succeeded", started_at=later)
    assert Job.objects.get(pk=plain.pk).started_at == stored[plain.pk]


def test_a_single_update_records_the_start_clamped_to_its_end(falcon_api):
    (job,) = jobs(1)
    view = falcon_api.update_job_status(job_id=job.pk, status="Failed",
                                        started_at=timezone.now() + timedelta(days=365))
    job.refresh_from_db()
    assert view.started_at == job.started_at == job.finished_at


@pytest.mark.parametrize("status", ["Pending", "Aborting"])
def test_a_start_with_a_status_that_takes_none_is_invalid_argument(stubs, status):
    (job,) = jobs(1)
    start = timestamp(timezone.now())
    with pytest.raises(grpc.RpcError) as info:
        stubs.jobs.UpdateJobStatus(job_pb2.UpdateJobStatusReq(
            id=job.pk, status=status, started_at=start), timeout=10, metadata=stubs.md)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "started_at" in info.value.details() and "Running" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        stubs.jobs.UpdateJobStatuses(job_pb2.UpdateJobStatusesReq(items=[
            job_pb2.UpdateJobStatusReq(id=job.pk, status="Running"),
            job_pb2.UpdateJobStatusReq(id=job.pk, status=status, started_at=start)]),
            timeout=10, metadata=stubs.md)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "items.started_at" in info.value.details()
    assert Job.objects.get(pk=job.pk).status == "Pending"  # nothing of the batch applied


def test_a_start_outside_a_timestamps_range_is_named_by_its_item(stubs):
    (job,) = jobs(1)
    bad = job_pb2.UpdateJobStatusReq(id=job.pk, status="Running")
    bad.started_at.seconds = 10**12
    with pytest.raises(grpc.RpcError) as info:
        stubs.jobs.UpdateJobStatuses(job_pb2.UpdateJobStatusesReq(items=[bad]), timeout=10,
                                     metadata=stubs.md)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "items[0].started_at" in info.value.details()
