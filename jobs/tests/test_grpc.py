"""JobService over a real gRPC channel (and the job services it calls)."""
from __future__ import annotations

import json

import grpc
import pytest

from experiments.models import Experiment

from core.domain.statuses import ExpStatus
from experiments.services import exp_abort, exp_update_status
from experiments.tests.factories import make_exp
from core.grpc.errors import ERROR_CODE_KEY, ERROR_FIELDS_KEY
from falcon_proto.falcon.v1 import common_pb2, job_pb2
from falcon_site.grpc.testing import grpc_channel, grpc_server, stubs  # noqa: F401 (fixtures)
from experiments.grpc.job_servicer import JobServicer
from jobs.models import Job
from core.domain.statuses import JobStatus
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db(transaction=True)


def rpc_error(call, request, md) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, metadata=md, timeout=10)
    return info.value


def code_of(err: grpc.RpcError) -> str:
    return dict(err.trailing_metadata())[ERROR_CODE_KEY]


# -- CreateJob -------------------------------------------------------------------------------

def test_create_job_adds_a_pending_role(stubs):
    exp = make_exp(roles=("main",), config="k: v\n")
    req = job_pb2.CreateJobReq(exp_id=exp.pk, role="eval",
                               task_spec_json=json.dumps({"command": "python eval.py",
                                                          "replica": 3}))
    resp = stubs.jobs.CreateJob(req, metadata=stubs.md, timeout=10)
    job = resp.job
    assert resp.changed and resp.id == job.id
    assert (job.role, job.status, job.exp_id, job.exp_name) == (
        "eval", "Pending", exp.pk, exp.name)
    assert job.artifact_path == f"{exp.artifact_path}/eval" and job.cluster_name == "local"
    # The reply leaves out the spec and config (bounded replies); GetJob has them.
    assert not (job.task_spec_json or job.exp_config)
    job = stubs.jobs.GetJob(job_pb2.GetJobReq(id=resp.id), metadata=stubs.md, timeout=10)
    assert json.loads(job.task_spec_json)["replica"] == 3 and job.exp_config == "k: v\n"
    exp.refresh_from_db()
    assert set(exp.role_to_task_spec) == {"main", "eval"}


def test_create_job_errors(stubs):
    exp = make_exp(roles=("main",))
    spec = json.dumps({"command": "x"})
    err = rpc_error(stubs.jobs.CreateJob,
                    job_pb2.CreateJobReq(exp_id=exp.pk, role="main", task_spec_json=spec),
                    stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "main" in err.details()

    err = rpc_error(stubs.jobs.CreateJob,
                    job_pb2.CreateJobReq(exp_id=exp.pk, role="Bad_Role", task_spec_json=spec),
                    stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert set(json.loads(dict(err.trailing_metadata())[ERROR_FIELDS_KEY])) == {"role"}

    err = rpc_error(stubs.jobs.CreateJob,
                    job_pb2.CreateJobReq(exp_id=exp.pk, role="eval",
                                         task_spec_json=json.dumps({"replica": 0})),
                    stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "task_spec.replica" in err.details() and "task_spec.command" in err.details()

    err = rpc_error(stubs.jobs.CreateJob,
                    job_pb2.CreateJobReq(exp_id=exp.pk, role="eval", task_spec_json="[1"),
                    stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "task_spec_json" in err.details()

    err = rpc_error(stubs.jobs.CreateJob,
                    job_pb2.CreateJobReq(exp_id=exp.pk + 9, role="eval", task_spec_json=spec),
                    stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND

    err = rpc_error(stubs.jobs.CreateJob, job_pb2.CreateJobReq(role="eval", task_spec_json=spec),
                    stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "exp_id" in err.details()
    assert Job.objects.filter(experiment=exp).count() == 1


@pytest.mark.parametrize("exp_status", ["Aborting", "Succeeded"])
def test_create_job_refused_when_exp_is_aborting_or_terminal(stubs, exp_status):
    exp = make_exp()
    if exp_status == "Aborting":
        exp_abort(exp_id=exp.pk, actor=exp.creator)
    else:
        exp_update_status(exp_id=exp.pk, status=exp_status)
    err = rpc_error(stubs.jobs.CreateJob,
                    job_pb2.CreateJobReq(exp_id=exp.pk, role="late",
                                         task_spec_json=json.dumps({"command": "x"})),
                    stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and exp_status in err.details()
    assert not Job.objects.filter(role="late").exists()


# -- UpdateJobStatus / GetJob / DeleteJob ------------------------------------------------------

def test_update_job_status_records_cluster_job_name(stubs):
    job = make_exp().jobs.get()
    req = job_pb2.UpdateJobStatusReq(id=job.pk, status="Running", reason="AllTasksRunning",
                                     cluster_job_name="falcon-1-main")
    resp = stubs.jobs.UpdateJobStatus(req, metadata=stubs.md, timeout=10)
    assert resp.changed and resp.job.status == "Running" and resp.job.HasField("started_at")
    assert resp.job.cluster_job_name == "falcon-1-main" and resp.job.exp_status == "Created"
    again = stubs.jobs.UpdateJobStatus(job_pb2.UpdateJobStatusReq(id=job.pk, status="Running"),
                                       metadata=stubs.md, timeout=10)
    assert not again.changed and again.job.cluster_job_name == "falcon-1-main"


def test_update_job_status_errors(stubs):
    job = make_exp().jobs.get()
    job_update_status(job_id=job.pk, status=JobStatus.RUNNING)
    err = rpc_error(stubs.jobs.UpdateJobStatus,
                    job_pb2.UpdateJobStatusReq(id=job.pk, status="Succeeded", expected="Pending"),
                    stubs.md)
    assert err.code() == grpc.StatusCode.ABORTED and code_of(err) == "transition_race"
    err = rpc_error(stubs.jobs.UpdateJobStatus,
                    job_pb2.UpdateJobStatusReq(id=job.pk, status="Pending"), stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert code_of(err) == "invalid_transition"
    err = rpc_error(stubs.jobs.UpdateJobStatus,
                    job_pb2.UpdateJobStatusReq(id=job.pk, status="Created"), stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "status" in err.details()
    err = rpc_error(stubs.jobs.UpdateJobStatus,
                    job_pb2.UpdateJobStatusReq(id=job.pk + 50, status="Running"), stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND


def test_get_job_carries_the_experiment_fields(stubs):
    exp = make_exp(config="seed: 1\n")
    job = exp.jobs.get()
    item = stubs.jobs.GetJob(job_pb2.GetJobReq(id=job.pk), metadata=stubs.md, timeout=10)
    assert (item.exp_name, item.exp_status, item.exp_config) == (exp.name, "Created",
                                                                "seed: 1\n")
    assert json.loads(item.task_spec_json)["command"] == "echo hello"
    err = rpc_error(stubs.jobs.GetJob, job_pb2.GetJobReq(id=job.pk + 50), stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND and code_of(err) == "not_found"


def test_delete_job_only_when_terminal(stubs):
    job = make_exp(roles=("a", "b")).jobs.get(role="a")
    err = rpc_error(stubs.jobs.DeleteJob, job_pb2.DeleteJobReq(id=job.pk), stubs.md)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "Pending" in err.details()
    job_update_status(job_id=job.pk, status=JobStatus.FAILED)
    resp = stubs.jobs.DeleteJob(job_pb2.DeleteJobReq(id=job.pk), metadata=stubs.md, timeout=10)
    assert resp.changed and resp.id == job.pk and not resp.HasField("job")
    assert not Job.objects.filter(pk=job.pk).exists()
    err = rpc_error(stubs.jobs.DeleteJob, job_pb2.DeleteJobReq(id=job.pk), stubs.md)
    assert err.code() == grpc.StatusCode.NOT_FOUND


# -- ListJobs --------------------------------------------------------------------------------

def list_ids(stubs, **filters) -> list[int]:
    ids, token = [], ""
    while True:
        resp = stubs.jobs.ListJobs(common_pb2.CommonListReq(page_token=token, **filters),
                                   metadata=stubs.md, timeout=10)
        ids.extend(job.id for job in resp.jobs)
        token = resp.next_page_token
        if not token:
            return ids


def test_list_jobs_pages_without_gaps_or_duplicates(stubs):
    exps = [make_exp(name=f"p{i}", roles=("a", "b", "c")) for i in range(3)]  # 9 jobs
    expected = sorted(Job.objects.values_list("id", flat=True))
    pages, token, seen = 0, "", []
    while True:
        resp = stubs.jobs.ListJobs(common_pb2.CommonListReq(page_size=4, page_token=token),
                                   metadata=stubs.md, timeout=10)
        pages += 1
        seen.extend(job.id for job in resp.jobs)
        token = resp.next_page_token
        if not token:
            break
        # a row inserted while paging lands in a later page, never shifts this one
        if pages == 1:
            make_exp(name="late", roles=("z",))
    late = Job.objects.get(role="z").pk
    assert pages == 3 and seen == expected + [late]
    assert len(exps) == 3


def test_list_jobs_filters(stubs):
    a = make_exp(name="a", cluster_name="c1", exp_type="profiling", roles=("x", "y"))
    b = make_exp(name="b", cluster_name="c2", exp_type="benchmark", roles=("x",))
    ax, ay = a.jobs.get(role="x").pk, a.jobs.get(role="y").pk
    bx = b.jobs.get().pk
    job_update_status(job_id=ax, status=JobStatus.RUNNING)
    exp_update_status(exp_id=b.pk, status=ExpStatus.RUNNING)

    assert list_ids(stubs) == [ax, ay, bx]
    assert list_ids(stubs, statuses=["Running"]) == [ax]
    assert list_ids(stubs, statuses=["Pending"], exp_statuses=["Created"]) == [ay]
    assert list_ids(stubs, exp_statuses=["Running"]) == [bx]
    assert list_ids(stubs, cluster_names=["c1"]) == [ax, ay]
    assert list_ids(stubs, exp_types=["benchmark"]) == [bx]
    assert list_ids(stubs, exp_ids=[a.pk]) == [ax, ay]
    assert list_ids(stubs, ids=[ay, bx]) == [ay, bx]
    assert list_ids(stubs, exp_ids=[a.pk], statuses=["Succeeded"]) == []
    err = rpc_error(stubs.jobs.ListJobs, common_pb2.CommonListReq(exp_statuses=["Pending"]),
                    stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "exp_statuses" in err.details()


def test_list_jobs_page_is_one_query_and_carries_the_experiment(django_assert_num_queries):
    for i in range(2):
        make_exp(name=f"q{i}", roles=("a", "b"), config=f"n: {i}\n")
    with django_assert_num_queries(1):
        resp = JobServicer().ListJobs(common_pb2.CommonListReq(page_size=3), None)
    assert [job.exp_config for job in resp.jobs] == ["n: 0\n", "n: 0\n", "n: 1\n"]
    assert all(job.exp_name and job.exp_status == "Created" for job in resp.jobs)


def test_list_jobs_page_ends_early_under_the_byte_budget():
    from core.grpc.paging import keyset_page
    from jobs.grpc.to_proto import job_to_item
    from jobs.selectors import job_list

    big = "x" * 120_000
    for i in range(4):
        make_exp(name=f"big{i}", config=big)
    page = keyset_page(job_list(), page_size=10, page_token="", to_message=job_to_item,
                       byte_budget=280_000)
    assert len(page.items) == 2 and page.next_page_token
    rest = keyset_page(job_list(), page_size=10, page_token=page.next_page_token,
                       to_message=job_to_item, byte_budget=280_000)
    assert [j.id for j in page.items + rest.items] == sorted(
        Job.objects.values_list("id", flat=True))
    assert Experiment.objects.count() == 4
