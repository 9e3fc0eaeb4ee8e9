"""`GrpcFalconAPI` against a real in-process API server: views, paging, rebuilt errors."""
from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone

import grpc
import pytest
from django.core.exceptions import ImproperlyConfigured

from controllers.contract import ArtifactView, ExpView, FalconAPI, JobView, ListFilter
from core.domain.taskspec import TaskSpec
from controllers.grpc_client import GrpcFalconAPI, from_settings
from experiments.models import Experiment
from core.domain.statuses import ExpStatus
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp
from core.errors import (
    Conflict, InvalidTransition, NotFound, TransitionRace, ValidationFailed,
)
from core.grpc.errors import ApiCallFailed, ApiUnavailable, Unauthenticated
from falcon_proto.falcon.v1 import common_pb2, experiment_pb2, job_pb2
from falcon_site.grpc.testing import INTERNAL_TOKEN, falcon_api, grpc_server  # noqa: F401
from jobs.models import Job
from core.domain.statuses import JobStatus
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db(transaction=True)


def test_client_satisfies_the_falcon_api_protocol(falcon_api):
    api: FalconAPI = falcon_api  # a type checker verifies the Protocol; check the names here
    for name in ("list_exps", "list_jobs", "list_artifacts", "update_exp_status",
                 "update_job_status", "update_artifact_status"):
        assert callable(getattr(api, name))


def test_list_calls_follow_every_page(falcon_api):
    exps = [make_exp(name=f"e{i}", roles=("a", "b"), config=f"i: {i}\n") for i in range(5)]
    views = falcon_api.list_exps(ListFilter(extra={"page_size": 2}))
    assert [v.id for v in views] == [e.pk for e in exps]
    assert all(isinstance(v, ExpView) and v.status == "Created" for v in views)
    assert views[0].updated_at and views[0].updated_at.tzinfo is not None

    jobs = falcon_api.list_jobs(ListFilter(extra={"page_size": 3}))
    assert [j.id for j in jobs] == sorted(Job.objects.values_list("id", flat=True))
    assert len(jobs) == 10 and len({j.id for j in jobs}) == 10
    first = jobs[0]
    assert isinstance(first, JobView)
    assert (first.exp_id, first.exp_name, first.exp_status, first.config) == (
        exps[0].pk, "e0", "Created", "i: 0\n")
    assert first.task_spec == TaskSpec(command="echo hello")
    assert first.task_spec.to_json() == {"command": "echo hello", "replica": 1, "image": "",
                                         "device_type": "", "device_topo": "",
                                         "device_count": None, "envs": {}}

    arts = falcon_api.list_artifacts(ListFilter(extra={"page_size": 4}))
    assert [a.exp_id for a in arts] == [e.pk for e in exps]
    assert all(isinstance(a, ArtifactView) and a.status == "Created" for a in arts)


def test_statuses_arrive_as_the_status_enums(falcon_api):
    """Every view a list call returns carries its statuses as the enums of core.domain.statuses, so a
    controller compares and passes on `JobStatus.RUNNING`, never a bare string."""
    from core.domain.statuses import ArtifactStatus

    make_exp(name="enums", roles=("a",))
    [exp] = falcon_api.list_exps(ListFilter())
    [job] = falcon_api.list_jobs(ListFilter())
    [art] = falcon_api.list_artifacts(ListFilter())
    [state] = falcon_api.list_exp_states((ExpStatus.CREATED,))
    [job_state] = falcon_api.list_job_states(ListFilter(statuses=(JobStatus.PENDING,)))
    assert type(exp.status) is ExpStatus and type(state.exp.status) is ExpStatus
    assert type(job.status) is JobStatus and type(job.exp_status) is ExpStatus
    assert type(job_state.status) is JobStatus and type(state.jobs[0].status) is JobStatus
    assert type(art.status) is ArtifactStatus and type(state.artifact.status) is ArtifactStatus
    updated = falcon_api.update_job_status(job_id=job.id, status=JobStatus.RUNNING)
    assert type(updated.status) is JobStatus


def test_list_filters_reach_the_server(falcon_api):
    a = make_exp(name="a", cluster_name="c1", roles=("x", "y"))
    b = make_exp(name="b", cluster_name="c2")
    exp_update_status(exp_id=b.pk, status=ExpStatus.RUNNING)
    job_update_status(job_id=a.jobs.get(role="x").pk, status=JobStatus.RUNNING)

    assert [v.id for v in falcon_api.list_exps(ListFilter(statuses=("Running",)))] == [b.pk]
    assert [j.role for j in falcon_api.list_jobs(
        ListFilter(statuses=("Pending",), exp_statuses=("Created",)))] == ["y"]
    assert [j.exp_id for j in falcon_api.list_jobs(ListFilter(cluster_names=("c2",)))] == [b.pk]
    assert [v.exp_id for v in falcon_api.list_artifacts(
        ListFilter(exp_statuses=("Running",)))] == [b.pk]
    Experiment.objects.filter(pk=a.pk).update(updated_at=datetime(2020, 1, 1,
                                                                  tzinfo=timezone.utc))
    since = datetime.now(timezone.utc) - timedelta(hours=1)
    assert [v.id for v in falcon_api.list_exps(ListFilter(updated_since=since))] == [b.pk]
    with pytest.raises(ValueError, match="search"):
        falcon_api.list_exps(ListFilter(extra={"search": "a"}))


def test_updates_return_fresh_views(falcon_api):
    exp = make_exp()
    job = exp.jobs.get()
    view = falcon_api.update_job_status(job_id=job.pk, status="Running", reason="Started",
                                        cluster_job_name="falcon-x")
    assert (view.status, view.reason, view.cluster_job_name) == ("Running", "Started",
                                                                "falcon-x")
    assert view.started_at is not None
    exp_view = falcon_api.update_exp_status(exp_id=exp.pk, status="Running", message="go")
    assert (exp_view.status, exp_view.message) == ("Running", "go")
    art = falcon_api.update_artifact_status(artifact_id=exp.artifact.pk, status="Failed",
                                            reason="NoFiles", message="path is empty")
    assert (art.status, art.reason, art.message) == ("Failed", "NoFiles", "path is empty")
    again = falcon_api.update_job_status(job_id=job.pk, status="Running")
    assert again.reason == "Started" and again.cluster_job_name == "falcon-x"


def test_errors_are_rebuilt_as_domain_errors(falcon_api):
    exp = make_exp()
    job = exp.jobs.get()
    with pytest.raises(NotFound, match=str(job.pk + 99)):
        falcon_api.update_job_status(job_id=job.pk + 99, status="Running")
    with pytest.raises(InvalidTransition) as info:
        falcon_api.update_exp_status(exp_id=exp.pk, status="Aborted")
    assert info.value.code == "invalid_transition"
    with pytest.raises(ValidationFailed) as info:
        falcon_api.update_artifact_status(artifact_id=exp.artifact.pk, status="Done")
    assert set(info.value.errors) == {"status"}
    with pytest.raises(ValidationFailed) as info:
        falcon_api.list_exps(ListFilter(exp_ids=(exp.pk,)))
    assert set(info.value.errors) == {"exp_ids"}

    job_update_status(job_id=job.pk, status=JobStatus.RUNNING)
    with pytest.raises(TransitionRace):
        falcon_api.call(falcon_api.jobs.UpdateJobStatus,
                        job_pb2.UpdateJobStatusReq(id=job.pk, status="Failed",
                                                   expected="Pending"))
    exp_update_status(exp_id=exp.pk, status=ExpStatus.SUCCEEDED)
    with pytest.raises(Conflict) as info:
        falcon_api.call(falcon_api.exps.AbortExp, experiment_pb2.AbortExpReq(id=exp.pk))
    assert type(info.value) is Conflict and "Succeeded" in info.value.message


def test_bad_token_is_unauthenticated(grpc_server):
    with GrpcFalconAPI(f"127.0.0.1:{grpc_server.port}", "not-the-token") as api:
        with pytest.raises(Unauthenticated) as info:
            api.list_exps(ListFilter())
    assert info.value.status_code == grpc.StatusCode.UNAUTHENTICATED
    assert not info.value.retryable


def test_unreachable_server_is_retryable_within_the_deadline():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = datetime.now()
    with GrpcFalconAPI(f"127.0.0.1:{port}", INTERNAL_TOKEN, timeout=1.0) as api:
        with pytest.raises(ApiUnavailable) as info:
            api.list_jobs(ListFilter())
    assert info.value.retryable and isinstance(info.value, ApiCallFailed)
    assert datetime.now() - started < timedelta(seconds=5)


def test_from_settings(settings, grpc_server):
    settings.FALCON_GRPC_TARGET = f"127.0.0.1:{grpc_server.port}"
    with from_settings() as api:
        assert api.list_exps(ListFilter()) == []
        assert api.target == settings.FALCON_GRPC_TARGET
    settings.FALCON_INTERNAL_TOKEN = ""
    with pytest.raises(ImproperlyConfigured):
        GrpcFalconAPI.from_settings()


def test_constructor_checks_its_arguments():
    with pytest.raises(ValueError):
        GrpcFalconAPI("127.0.0.1:1", "")
    with pytest.raises(ValueError):
        GrpcFalconAPI("127.0.0.1:1", "t", timeout=0)


def test_list_request_keeps_every_filter():
    from controllers.grpc_client import list_request

    since = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    req = list_request(ListFilter(statuses=("Pending",), exp_statuses=("Created",),
                                  cluster_names=("c",), exp_types=("t",), ids=(1, 2),
                                  exp_ids=(3,), updated_since=since, extra={"page_size": 7}))
    assert isinstance(req, common_pb2.CommonListReq)
    assert (list(req.statuses), list(req.exp_statuses), list(req.cluster_names),
            list(req.exp_types), list(req.ids), list(req.exp_ids), req.page_size) == (
        ["Pending"], ["Created"], ["c"], ["t"], [1, 2], [3], 7)
    assert req.updated_since.ToDatetime(tzinfo=timezone.utc) == since


def test_a_job_state_view_is_the_view_its_fields_make():
    """`job_state_view` builds its views without `JobView.__init__` (`job_view_of`): each
    holds every field and nothing else, equal to the one `__init__` makes, and frozen."""
    import dataclasses

    from controllers.grpc_client import job_state_view
    from falcon_proto.falcon.v1 import job_pb2

    for spec in ("", '{"command": "true", "image": "img:2", "envs": {"A": "1"}}'):
        item = job_pb2.JobState(
            id=7, exp_id=3, exp_name="e", exp_status="Running", exp_type="t", role="main",
            cluster_name="c", status="Running", reason="R", message="m",
            cluster_job_name="" if spec else "falcon-3-e-main", artifact_path="a",
            task_spec_json=spec, exp_config="k: 1\n" if spec else "",
            exp_creator_email="u@example.com", image="img:2")
        view = job_state_view(item)
        names = [f.name for f in dataclasses.fields(JobView)]
        assert sorted(vars(view)) == sorted(names)
        assert view == JobView(**{name: getattr(view, name) for name in names})
        assert view.task_image == "img:2" and view.status == JobStatus.RUNNING
        assert dataclasses.replace(view, reason="S").reason == "S"
        with pytest.raises(dataclasses.FrozenInstanceError):
            view.reason = "S"  # type: ignore[misc]
