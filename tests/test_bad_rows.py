"""One bad row never stops anything: the gRPC lists skip a row they cannot encode (and say so),
and both controllers skip an item they cannot handle and go on with the others.

The bad rows are planted straight in the database, as an old version, a manual fix or a bug
could leave them: a `priority` beyond the proto's int32 (SQLite only: MariaDB's column is 32-bit
and refuses the value itself) and a task spec holding a number JSON cannot carry (`1e400` reads
back as infinity), which both databases store.
"""
from __future__ import annotations

import logging

import pytest
from django.db import connection

from artifacts.models import Artifact
from controllers.cluster_backends.base import (
    ClusterBackend, ClusterJobState, ClusterJobStatus, SubmitResult,
)
from controllers.contract import ListFilter, skipped_of
from controllers.exp_controller import ExpController
from controllers.resource_manager import ResourceManager
from core.grpc.paging import keyset_page
from core.observability.logs import ContextFilter
from experiments.models import Experiment
from experiments.tests.factories import make_exp
from falcon_proto.falcon.v1 import common_pb2
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    falcon_api, grpc_channel, grpc_server, stubs,
)
from jobs.models import Job
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db(transaction=True)

ON_MARIADB = connection.vendor == "mysql"
VARIANTS = [
    pytest.param("priority", marks=pytest.mark.skipif(
        ON_MARIADB, reason="MariaDB's priority column is 32-bit: it refuses 2**31 itself, so "
                           "this row cannot exist there (the json variant runs instead)")),
    "json",
]
# Valid JSON text (both databases' JSON checks accept it), but 1e400 overflows to infinity.
BAD_SPEC = '{"command": "true", "replica": 1e400}'


def plant(model, pk: int, variant: str) -> None:
    """Give row `pk` a value the gRPC mapper cannot encode, bypassing every validation."""
    if variant == "priority":
        assert model.objects.filter(pk=pk).update(priority=2**31) == 1
        return
    column = "role_to_task_spec" if model is Experiment else "task_spec"
    value = '{"main": %s}' % BAD_SPEC if model is Experiment else BAD_SPEC
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {qn(model._meta.db_table)} SET {qn(column)} = %s "
                       f"WHERE {qn('id')} = %s", [value, pk])


def job_of(exp) -> Job:
    return Job.objects.get(experiment=exp)


def list_all(call, md, **filters):
    """Every page of a list RPC (pages of 2 rows): the items and the skipped rows."""
    items, skipped, token = [], [], ""
    while True:
        resp = call(common_pb2.CommonListReq(page_size=2, page_token=token, **filters),
                    metadata=md, timeout=10)
        items.extend(resp.exps if hasattr(resp, "exps") else
                     resp.jobs if hasattr(resp, "jobs") else resp.artifacts)
        skipped.extend((row.id, row.exp_id) for row in resp.skipped)
        token = resp.next_page_token
        if not token:
            return items, skipped


@pytest.mark.parametrize("variant", VARIANTS)
def test_lists_skip_a_row_they_cannot_encode_and_go_on(stubs, caplog, variant):
    exps = [make_exp(name=f"e{i}") for i in range(5)]
    bad_exp, bad_job_exp = exps[1], exps[3]
    plant(Experiment, bad_exp.pk, variant)
    bad_job = job_of(bad_job_exp)
    plant(Job, bad_job.pk, variant)
    caplog.set_level(logging.ERROR, logger="falcon.grpc.paging")

    items, skipped = list_all(stubs.exps.ListExps, stubs.md)
    assert [e.id for e in items] == [e.pk for e in exps if e is not bad_exp]
    assert skipped == [(bad_exp.pk, bad_exp.pk)]

    items, skipped = list_all(stubs.jobs.ListJobs, stubs.md)
    assert [j.id for j in items] == [job_of(e).pk for e in exps if e is not bad_job_exp]
    assert skipped == [(bad_job.pk, bad_job_exp.pk)]

    log = caplog.text
    assert f"ListExps: skipped Experiment {bad_exp.pk}, which cannot be encoded" in log
    assert f"ListJobs: skipped Job {bad_job.pk}, which cannot be encoded" in log
    assert "ValueError" in log and "1 skipped row(s)" in log


def test_list_artifacts_skips_a_row_whose_mapping_raises(stubs, monkeypatch, caplog):
    from experiments.grpc import artifact_servicer

    exps = [make_exp(name=f"a{i}") for i in range(3)]
    bad = Artifact.objects.get(experiment=exps[1])
    real = artifact_servicer.artifact_to_item

    def mapper(artifact):
        if artifact.pk == bad.pk:
            raise TypeError("cannot map this one")
        return real(artifact)

    monkeypatch.setattr(artifact_servicer, "artifact_to_item", mapper)
    items, skipped = list_all(stubs.artifacts.ListArtifacts, stubs.md)
    assert [a.exp_id for a in items] == [exps[0].pk, exps[2].pk]
    assert skipped == [(bad.pk, exps[1].pk)]
    assert f"ListArtifacts: skipped Artifact {bad.pk}, which cannot be encoded: TypeError: " \
           "cannot map this one" in caplog.text


def test_keyset_page_token_moves_past_skipped_rows():
    exps = [make_exp(name=f"k{i}") for i in range(4)]

    def mapper(exp):
        if exp.pk in (exps[1].pk, exps[2].pk):
            raise ValueError("bad")
        return common_pb2.SkippedRow(id=exp.pk, exp_id=exp.pk)

    page = keyset_page(Experiment.objects.all(), page_size=3, page_token="", to_message=mapper)
    assert [m.id for m in page.items] == [exps[0].pk]
    assert [row.pk for row in page.skipped] == [exps[1].pk, exps[2].pk]
    rest = keyset_page(Experiment.objects.all(), page_size=3, page_token=page.next_page_token,
                       to_message=mapper)
    assert [m.id for m in rest.items] == [exps[3].pk] and not rest.next_page_token


class ThreeLists:
    """The gRPC client without ListExpStates: the exp controller reads with ListExps,
    ListJobs and ListArtifacts, which carry priorities and task specs."""

    list_exp_states = None
    list_exp_state_pages = None

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("variant", VARIANTS)
def test_exp_controller_tick_skips_bad_rows_and_decides_the_others(falcon_api, caplog, variant):
    """With the three list calls (a client without ListExpStates) the rows that cannot be
    sent are skipped and their experiments are not decided."""
    caplog.handler.addFilter(ContextFilter())
    api = ThreeLists(falcon_api)
    running = make_exp(name="running")
    bad_exp = make_exp(name="bad-exp")
    bad_job_exp = make_exp(name="bad-job")
    failed = make_exp(name="failed")
    for exp in (running, bad_exp):
        job_update_status(job_id=job_of(exp).pk, status="Running")
    for exp in (bad_job_exp, failed):
        job_update_status(job_id=job_of(exp).pk, status="Failed", reason="Boom", message="x")
    plant(Experiment, bad_exp.pk, variant)
    plant(Job, job_of(bad_job_exp).pk, variant)

    stats = ExpController(api, has_files=lambda url: False).tick()

    status = dict(Experiment.objects.values_list("name", "status"))
    assert status == {"running": "Running", "failed": "Failed",
                      # Not decided: the first is unreadable; the second would look like an
                      # experiment without jobs (NoJobs -> Failed) if decided without its job.
                      "bad-exp": "Created", "bad-job": "Created"}
    assert Artifact.objects.get(experiment=bad_job_exp).status == "Created"
    assert stats.skipped == 2
    assert f"exp {bad_exp.pk}: skipped this tick" in caplog.text
    assert (f"exp bad-job (id {bad_job_exp.pk}): skipped this tick: job "
            f"{job_of(bad_job_exp).pk} of it could not be read") in caplog.text
    # Each line carries the id of the experiment it is about as a field (core.observability.logs).
    skipped = {r.exp_id for r in caplog.records if "skipped this tick" in r.getMessage()
               and r.name == "falcon.controllers.exp"}
    assert skipped == {bad_exp.pk, bad_job_exp.pk}
    # And it keeps going, tick after tick.
    assert ExpController(api, has_files=lambda url: False).tick().skipped == 2


@pytest.mark.parametrize("variant", VARIANTS)
def test_exp_controller_decides_rows_whose_unused_columns_cannot_be_sent(falcon_api, variant):
    """ListExpStates carries only what a decision needs (no priority, no task spec): the
    experiments the three lists had to skip are decided from all their jobs."""
    bad_exp = make_exp(name="bad-exp")
    bad_job_exp = make_exp(name="bad-job")
    job_update_status(job_id=job_of(bad_exp).pk, status="Running")
    job_update_status(job_id=job_of(bad_job_exp).pk, status="Failed", reason="Boom",
                      message="x")
    plant(Experiment, bad_exp.pk, variant)
    plant(Job, job_of(bad_job_exp).pk, variant)

    stats = ExpController(falcon_api, has_files=lambda url: False).tick()

    assert dict(Experiment.objects.values_list("name", "status")) == {
        "bad-exp": "Running", "bad-job": "Failed"}
    assert stats.skipped == 0 and stats.failed == 0


def test_exp_controller_skips_an_experiment_whose_handling_raises(falcon_api, caplog):
    exps = [make_exp(name=f"h{i}") for i in range(3)]
    for exp in exps:
        job_update_status(job_id=job_of(exp).pk, status="Running")

    class OneBadWrite:
        # No batch write: the controller writes each experiment with its own call.
        update_exp_statuses = None

        def __getattr__(self, name):
            return getattr(falcon_api, name)

        def update_exp_status(self, **kwargs):
            if kwargs["exp_id"] == exps[1].pk:
                raise KeyError("not a FalconError")
            return falcon_api.update_exp_status(**kwargs)

    stats = ExpController(OneBadWrite(), has_files=lambda url: False).tick()
    assert [Experiment.objects.get(pk=e.pk).status for e in exps] == [
        "Running", "Created", "Running"]
    assert stats.skipped == 1 and stats.applied == 2
    assert f"exp h1 (id {exps[1].pk}): skipped the rest of this tick's updates: KeyError" \
        in caplog.text


class FakeBackend(ClusterBackend):
    """A cluster with no jobs yet, whose `observe` and `submit` fail for chosen jobs."""

    name = "fake"

    def __init__(self, bad_observe=(), bad_submit=()):
        self.bad_observe, self.bad_submit = set(bad_observe), set(bad_submit)
        self.observe_calls: list[list[int]] = []
        self.submitted: list[int] = []

    def observe(self, jobs):
        self.observe_calls.append([j.id for j in jobs])
        out = {}
        for job in jobs:
            if job.id in self.bad_observe:
                raise KeyError(f"replica (state of job {job.id} is corrupt)")
            out[job.id] = ClusterJobState(name=self.cluster_job_name(job),
                                          status=ClusterJobStatus.MISSING)
        return out

    def submit(self, job):
        if job.id in self.bad_submit:
            raise TypeError(f"cannot build the cluster job of job {job.id}")
        self.submitted.append(job.id)
        return SubmitResult(cluster_job_name=self.cluster_job_name(job), created=True)

    def delete(self, job):
        return True

    def validate(self, task_spec):
        return {}


@pytest.mark.parametrize("variant", VARIANTS)
def test_resource_manager_tick_skips_bad_jobs_and_serves_the_others(falcon_api, caplog, variant):
    caplog.handler.addFilter(ContextFilter())
    jobs = [job_of(make_exp(name=f"r{i}")) for i in range(6)]
    unreadable, bad_observe, bad_submit = jobs[1], jobs[3], jobs[4]
    plant(Job, unreadable.pk, variant)
    backend = FakeBackend(bad_observe=[bad_observe.pk], bad_submit=[bad_submit.pk])

    stats = ResourceManager(falcon_api, {"local": backend}).tick()

    # ListJobStates carries no priority: a job whose priority cannot be sent is served (as
    # the exp controller decides rows whose unused columns cannot be sent).
    served = variant == "priority"
    good = sorted([jobs[0].pk, jobs[2].pk, jobs[5].pk] + ([unreadable.pk] if served else []))
    assert sorted(backend.submitted) == good
    rows = {j.pk: j for j in Job.objects.all()}
    assert [pk for pk, j in rows.items() if j.reason == "Submitted"] == good
    assert all(rows[j.pk].status == "Pending" and not rows[j.pk].cluster_job_name
               for j in (bad_observe, bad_submit))
    assert stats.skipped == (2 if served else 3)
    if served:
        return
    log = caplog.text
    assert f"job {unreadable.pk} (exp {unreadable.experiment_id}): skipped this tick" in log
    assert f"job {bad_observe.pk}, role main): skipped this tick: cannot read its cluster " \
           "state: KeyError" in log
    assert f"job {bad_submit.pk}, role main): skipped this tick: cannot handle it: TypeError" \
        in log
    # Each line carries the ids of the job it is about as fields (core.observability.logs).
    skipped = {(r.exp_id, r.job_id) for r in caplog.records
               if "skipped this tick" in r.getMessage()}
    assert skipped == {(j.experiment_id, j.pk) for j in (unreadable, bad_observe, bad_submit)}
    # The batch was split around the bad job, not read once per job.
    assert len(backend.observe_calls) < 2 * len(jobs)


def test_a_list_that_meets_only_bad_rows_still_answers(falcon_api):
    exp = make_exp(name="only")
    plant(Job, job_of(exp).pk, "json")
    jobs = falcon_api.list_jobs(ListFilter())
    assert list(jobs) == [] and [(r.id, r.exp_id) for r in skipped_of(jobs)] == [
        (job_of(exp).pk, exp.pk)]
