"""ListJobStates: the resource manager's lean read of a tick."""
from __future__ import annotations

import dataclasses

import grpc
import pytest

from controllers.contract import ListFilter, skipped_of
from core.domain.statuses import JobStatus
from core.domain.taskspec import EMPTY, TaskSpec
from experiments.services import exp_abort
from experiments.tests.factories import make_exp
from falcon_proto.falcon.v1 import job_pb2
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    falcon_api,
    grpc_channel,
    grpc_server,
    stubs,
)
from jobs.models import Job
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db(transaction=True)

OPEN = tuple(s for s in JobStatus if s in ("Pending", "Running", "Aborting"))
# What ListJobStates leaves out of a JobView (see the RPC's comment).
NOT_SENT = {"priority", "created_at", "updated_at", "started_at", "aborting_at"}
# What ListJobStates sends and ListJobs does not: the creator, whose capacity share a job takes,
# and the spec's image apart from the spec.
ONLY_STATES = {"creator", "image"}


def test_each_job_reads_as_list_jobs_reads_it_without_the_unsent_fields(falcon_api):
    """Awkward values survive: unicode and quotes in the spec and config, envs, several roles,
    an experiment in another status."""
    spec_envs = {"A": "x \"quoted\" ü", "B": "2"}
    exps = [make_exp(name="lean_1.x", roles=("main", "worker"), envs=spec_envs,
                     config='lr: 0.1\nname: "ü"\n'),
            make_exp(name="plain")]
    full = {v.id: v for v in falcon_api.list_jobs(ListFilter(statuses=OPEN))}
    lean = falcon_api.list_job_states(ListFilter(statuses=OPEN))
    assert [v.id for v in lean] == sorted(full) and len(lean) == 3
    for view in lean:
        expected = full[view.id]
        for field in dataclasses.fields(view):
            if field.name not in NOT_SENT | ONLY_STATES:
                assert getattr(view, field.name) == getattr(expected, field.name), field.name
    assert lean[0].task_spec.envs == spec_envs and lean[0].config == exps[0].config
    creators = {job.pk: exp.creator.email for exp in exps for job in exp.jobs.all()}
    assert {view.id: view.creator for view in lean} == creators


def test_the_config_is_sent_only_for_jobs_still_to_submit(falcon_api):
    submitted, waiting = (Job.objects.get(experiment=make_exp(name=n, config=f"{n}: 1\n"))
                          for n in ("submitted", "waiting"))
    job_update_status(job_id=submitted.pk, status="Pending", cluster_job_name="falcon-1")
    views = {v.id: v for v in falcon_api.list_job_states(ListFilter(statuses=OPEN))}
    assert views[submitted.pk].config == "" and views[submitted.pk].cluster_job_name == "falcon-1"
    assert views[waiting.pk].config == "waiting: 1\n"


def test_the_task_spec_is_sent_only_for_jobs_still_to_submit_and_the_image_for_all(
        falcon_api, stubs):
    """A submit still gets its spec and config; a job whose cluster job name is recorded gets
    neither, but its image (what a tick reads of the spec: a pending Pod's pull messages)."""
    submitted, waiting = (Job.objects.get(experiment=make_exp(
        name=n, config=f"{n}: 1\n", image=f"registry.example/{n}:1", envs={"K": n}))
        for n in ("submitted", "waiting"))
    job_update_status(job_id=submitted.pk, status="Pending", cluster_job_name="falcon-1")
    views = {v.id: v for v in falcon_api.list_job_states(ListFilter(statuses=OPEN))}
    sent, unsent = views[waiting.pk], views[submitted.pk]
    assert sent.task_spec == TaskSpec.from_json(Job.objects.get(pk=waiting.pk).task_spec)
    assert sent.task_spec.envs == {"K": "waiting"} and sent.config == "waiting: 1\n"
    assert sent.image == sent.task_image == "registry.example/waiting:1"
    assert unsent.task_spec is EMPTY and unsent.config == ""
    assert unsent.image == unsent.task_image == "registry.example/submitted:1"
    # The RPC itself: a client that does not ask (one before `submit_specs_only`) still gets
    # every job's spec; one that asks gets the submitted job's spec text empty.
    for only in (False, True):
        resp = stubs.jobs.ListJobStates(job_pb2.ListJobStatesReq(
            statuses=list(OPEN), submit_specs_only=only), metadata=stubs.md, timeout=10)
        items = {item.id: item for item in resp.jobs}
        assert items[waiting.pk].task_spec_json and items[waiting.pk].exp_config
        assert bool(items[submitted.pk].task_spec_json) is not only
        assert not items[submitted.pk].exp_config
        assert items[submitted.pk].image == "registry.example/submitted:1"


def test_a_submitted_job_whose_spec_cannot_be_read_is_skipped_and_named(falcon_api):
    """The server reads the image of a spec it does not send: a spec that is not one skips
    the row, as the client skipped it when it read the spec itself."""
    from tests.test_bad_rows import plant

    exps = [make_exp(name=f"s{i}") for i in range(3)]
    bad = Job.objects.get(experiment=exps[1])
    job_update_status(job_id=bad.pk, status="Pending", cluster_job_name="falcon-x")
    plant(Job, bad.pk, "json")
    views = falcon_api.list_job_states(ListFilter(statuses=OPEN))
    assert [v.exp_id for v in views] == [exps[0].pk, exps[2].pk]
    assert [(r.id, r.exp_id) for r in skipped_of(views)] == [(bad.pk, exps[1].pk)]


def test_statuses_and_clusters_filter_and_pages_follow_in_id_order(stubs):
    exps = [make_exp(name=f"p{i}") for i in range(5)]
    jobs = [Job.objects.get(experiment=e) for e in exps]
    exp_abort(exp_id=exps[1].pk, actor=exps[1].creator)   # its job is Aborting
    job_update_status(job_id=jobs[2].pk, status="Failed")  # terminal: not listed
    Job.objects.filter(pk=jobs[3].pk).update(cluster_name="other")
    seen, token = [], ""
    while True:
        resp = stubs.jobs.ListJobStates(job_pb2.ListJobStatesReq(
            statuses=["Pending", "Aborting"], cluster_names=["local"], page_size=1,
            page_token=token), metadata=stubs.md, timeout=10)
        assert len(resp.jobs) <= 1
        seen.extend((j.id, j.status) for j in resp.jobs)
        token = resp.next_page_token
        if not token:
            break
    assert seen == [(jobs[0].pk, "Pending"), (jobs[1].pk, "Aborting"), (jobs[4].pk, "Pending")]


@pytest.mark.parametrize("request_fields,field", [
    ({"statuses": ["Sleeping"]}, "Sleeping"),
    ({"page_size": 5001}, "page_size"),
    ({"page_size": -1}, "page_size"),
    ({"page_token": "not-a-token"}, "page_token"),
])
def test_bad_requests_are_invalid_argument_naming_the_field(stubs, request_fields, field):
    with pytest.raises(grpc.RpcError) as info:
        stubs.jobs.ListJobStates(job_pb2.ListJobStatesReq(**request_fields),
                                 metadata=stubs.md, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in info.value.details()


def test_a_task_spec_json_cannot_carry_is_skipped_and_named(falcon_api):
    from tests.test_bad_rows import plant

    exps = [make_exp(name=f"s{i}") for i in range(3)]
    bad = Job.objects.get(experiment=exps[1])
    plant(Job, bad.pk, "json")
    views = falcon_api.list_job_states(ListFilter(statuses=OPEN))
    assert [v.exp_id for v in views] == [exps[0].pk, exps[2].pk]
    assert [(r.id, r.exp_id) for r in skipped_of(views)] == [(bad.pk, exps[1].pk)]


def test_other_filters_are_refused_by_the_client(falcon_api):
    with pytest.raises(ValueError, match="statuses and cluster_names"):
        falcon_api.list_job_states(ListFilter(statuses=OPEN, exp_ids=(1,)))
