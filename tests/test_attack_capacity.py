"""Attacks on everyone's capacity (issue item 10), each performed and shown refused.

Filters: a multi-valued list filter with 100,000 values cost minutes of CPU (duplicates were
removed by a list scan per value); every such filter, over HTTP and gRPC, now takes at most
`core.http.filters.MAX_FILTER_VALUES` values, counted before any is parsed or a row read.
"""
from __future__ import annotations

import grpc
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.testing import wait_until as poll_until
from core.http.filters import MAX_FILTER_VALUES
from falcon_proto.falcon.v1 import (
    analysis_pb2, analysis_pb2_grpc, common_pb2, experiment_pb2, job_pb2,
)
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    INTERNAL_TOKEN, falcon_api, grpc_channel, grpc_server, stubs,
)

LIMIT = MAX_FILTER_VALUES


def _tables_read(queries) -> set[str]:
    """The domain tables a request's queries touched (authentication's are left out)."""
    return {table for query in queries for table in
            ("experiments", "jobs", "artifacts", "analysis_records", "experiment_labels")
            if table in query["sql"]}


def _ids(count: int, start: int = 1) -> str:
    return ",".join(str(start + index) for index in range(count))


# -- HTTP ------------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("path, name, values", [
    ("/api/v1/exps", "id", lambda n: _ids(n)),
    ("/api/v1/exps", "cluster_name", lambda n: ",".join(f"c{i}" for i in range(n))),
    ("/api/v1/exps", "exp_type", lambda n: ",".join(f"t{i}" for i in range(n))),
    ("/api/v1/exps", "status", lambda n: ",".join(["Running"] * n)),
    ("/api/v1/exps", "label", lambda n: ",".join(["team=a"] * n)),
    ("/api/v1/analyses", "exp", lambda n: _ids(n)),
    ("/api/v1/analyses", "plugin", lambda n: ",".join(f"p{i}" for i in range(n))),
    ("/api/v1/analyses", "status", lambda n: ",".join(["running"] * n)),
    ("/api/v1/analyses", "analysis_type", lambda n: ",".join(["online"] * n)),
])
def test_http_list_filter_takes_the_limit_and_refuses_one_more(auth_api, path, name, values):
    with CaptureQueriesContext(connection) as queries:
        assert auth_api.get(path, {name: values(LIMIT)}).status_code == 200
    assert _tables_read(queries.captured_queries)  # the check below can see a read
    with CaptureQueriesContext(connection) as queries:
        res = auth_api.get(path, {name: values(LIMIT + 1)})
    assert res.status_code == 400, res.content
    body = res.json()
    assert body["code"] == "invalid"
    message = " ".join(body[name])
    assert f"{LIMIT + 1} values" in message and f"at most {LIMIT}" in message
    assert _tables_read(queries.captured_queries) == set()


@pytest.mark.django_db
def test_http_repeated_and_comma_values_count_together(auth_api):
    # 500 repeated + 501 in one comma list: 1,001 values of one filter.
    query = "&".join(f"id={i}" for i in range(1, 501)) + "&id=" + _ids(501, start=501)
    res = auth_api.get(f"/api/v1/exps?{query}")
    assert res.status_code == 400 and "id" in res.json()


@pytest.mark.django_db
def test_http_huge_id_list_is_refused_before_any_id_is_parsed(auth_api):
    with CaptureQueriesContext(connection) as queries:
        res = auth_api.get("/api/v1/exps", {"id": _ids(100_000)})
    assert res.status_code == 400
    assert "100000 values" in res.json()["id"][0]
    assert _tables_read(queries.captured_queries) == set()


@pytest.mark.django_db
def test_http_diff_ids_are_capped_too(auth_api):
    res = auth_api.get("/api/v1/exps/diff", {"ids": _ids(LIMIT + 1)})
    assert res.status_code == 400 and f"at most {LIMIT}" in res.json()["ids"][0]


# -- gRPC ------------------------------------------------------------------------------------

def _refused(call, request, metadata) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=30, metadata=metadata)
    return info.value


LIST_FIELDS = {
    "ids": lambda n: list(range(1, n + 1)),
    "exp_ids": lambda n: list(range(1, n + 1)),
    "cluster_names": lambda n: [f"c{i}" for i in range(n)],
    "exp_types": lambda n: [f"t{i}" for i in range(n)],
    "statuses": lambda n: ["Succeeded"] * n,
}


@pytest.mark.parametrize("rpc, fields", [
    ("exps.ListExps", ("ids", "cluster_names", "exp_types", "statuses", "labels")),
    ("jobs.ListJobs", ("ids", "exp_ids", "cluster_names", "exp_types", "statuses")),
    ("artifacts.ListArtifacts", ("ids", "exp_ids", "cluster_names", "exp_types", "statuses")),
])
def test_grpc_list_filter_takes_the_limit_and_refuses_one_more(stubs, rpc, fields):
    group, method = rpc.split(".")
    call = getattr(getattr(stubs, group), method)
    values = dict(LIST_FIELDS, labels=lambda n: ["team=a"] * n)
    for field in fields:
        make = values[field]
        call(common_pb2.CommonListReq(**{field: make(LIMIT)}), timeout=30, metadata=stubs.md)
        err = _refused(call, common_pb2.CommonListReq(**{field: make(LIMIT + 1)}), stubs.md)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (rpc, field)
        assert field in err.details() and f"at most {LIMIT}" in err.details(), err.details()


def test_grpc_hundred_thousand_ids_are_refused_at_once(stubs):
    # The reported attack: 100,000 ids (85-150 s of CPU each before, 16 calls blocked the API).
    err = _refused(stubs.exps.ListExps, common_pb2.CommonListReq(ids=range(1, 100_001)),
                   stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ids" in err.details() and "100000 values" in err.details()
    # The server still answers the next call.
    stubs.exps.ListExps(common_pb2.CommonListReq(), timeout=30, metadata=stubs.md)


def test_grpc_state_reads_cap_their_repeated_fields(stubs):
    stubs.jobs.ListJobStates(job_pb2.ListJobStatesReq(
        statuses=["Pending"] * LIMIT, cluster_names=["c1"] * LIMIT), timeout=30,
        metadata=stubs.md)
    for request, field in ((job_pb2.ListJobStatesReq(statuses=["Pending"] * (LIMIT + 1)),
                            "statuses"),
                           (job_pb2.ListJobStatesReq(cluster_names=["c"] * (LIMIT + 1)),
                            "cluster_names")):
        err = _refused(stubs.jobs.ListJobStates, request, stubs.md)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.details()
    stubs.exps.ListExpStates(experiment_pb2.ListExpStatesReq(statuses=["Running"] * LIMIT),
                             timeout=30, metadata=stubs.md)
    err = _refused(stubs.exps.ListExpStates,
                   experiment_pb2.ListExpStatesReq(statuses=["Running"] * (LIMIT + 1)), stubs.md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "statuses" in err.details()


def test_grpc_analysis_records_cap_statuses(grpc_channel):
    from core.grpc.channel import auth_metadata

    records = analysis_pb2_grpc.AnalysisRecordServiceStub(grpc_channel)
    md = auth_metadata(INTERNAL_TOKEN)
    records.ListAnalysisRecords(analysis_pb2.ListAnalysisRecordsReq(
        statuses=["running"] * LIMIT), timeout=30, metadata=md)
    err = _refused(records.ListAnalysisRecords, analysis_pb2.ListAnalysisRecordsReq(
        statuses=["running"] * (LIMIT + 1)), md)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "statuses" in err.details()


# -- Analyzer: one user's backlog -------------------------------------------------------------

class _StubBackend:
    """An analysis backend whose runs live until the test finishes them; `started` records
    every start, and `changed` is notified on each, so the test waits on events."""

    name = "stub"

    def __init__(self):
        import threading

        self.changed = threading.Condition()
        self.started: list[str] = []
        self.alive: dict[str, bool] = {}

    def run_name(self, analysis_id):
        from controllers.analyzer.backends.base import run_name_for

        return run_name_for(analysis_id)

    def start(self, spec):
        from controllers.analyzer.backends.base import StartResult

        with self.changed:
            self.started.append(spec.analysis_id)
            self.alive[spec.analysis_id] = True
            self.changed.notify_all()
        return StartResult(run_name=self.run_name(spec.analysis_id), adopted=False)

    def observe(self, analysis_ids):
        from controllers.analyzer.backends.base import MISSING_STATE, RunState

        with self.changed:
            return {aid: (MISSING_STATE if aid not in self.alive else
                          RunState(phase="running", alive=True) if self.alive[aid] else
                          RunState(phase="failed", reason="Stopped", message="finished"))
                    for aid in analysis_ids}

    def stop(self, analysis_id):
        with self.changed:
            self.alive.pop(analysis_id, None)
        return True

    def list_runs(self):
        with self.changed:
            return list(self.alive)

    def read_log(self, *args, **kwargs):
        return b""

    def finish(self, analysis_id):
        with self.changed:
            self.alive[analysis_id] = False

    def wait_started(self, count: int, deadline: float = 30.0) -> list[str]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.started) >= count, deadline), \
                f"{count} runs not started: {self.started}"
            return list(self.started)


@pytest.fixture
def running_analyzer(tmp_path):
    """A running analyzer controller loop (`controllers.runner.run_loop`) over the in-memory
    record API and `_StubBackend`; yields `(make(max_running_per_user, online_slots),)`."""
    import threading

    from controllers.analyzer.controller import AnalyzerConfig, AnalyzerController
    from controllers.analyzer.tests.fake_records import FakeRecordAPI
    from controllers.runner import run_loop

    stop = threading.Event()
    threads = []

    def make(*, slots: int, per_user: int | None):
        api, backend = FakeRecordAPI(), _StubBackend()
        controller = AnalyzerController(api, backend, {}, AnalyzerConfig(
            result_root=(tmp_path / "results").as_uri(), limits={"offline": 1, "online": slots},
            poll_seconds=3600, max_running_per_user=per_user))
        controller.tick()  # recovery done before the loop runs
        thread = threading.Thread(target=run_loop, args=(controller,), kwargs=dict(
            interval=0.01, stop=stop, wake=controller.wake), daemon=True)
        threads.append(thread)

        def create(user: str):
            """What CreateAnalysis does: create the pending record, queue it, wake the loop."""
            record = api.create_record(exp_id=1, analysis_type="online", command="true",
                                       result_root=(tmp_path / "results").as_uri(),
                                       creator_email=user)
            controller.enqueue(record)
            controller.wake.set()
            return record.analysis_id

        return controller, backend, create, thread.start

    yield make
    stop.set()
    for thread in threads:
        if thread.is_alive():
            thread.join(timeout=30)


def test_one_users_backlog_does_not_delay_anothers_next_analysis(running_analyzer):
    # The reported attack: eight queued analyses of one user delayed another's by 63 s.
    controller, backend, create, start = running_analyzer(slots=2, per_user=2)
    a = [create("a@example.com") for _ in range(8)]
    start()
    assert backend.wait_started(2) == a[:2]
    b = create("b@example.com")  # behind a's six waiting analyses in time
    backend.finish(a[0])         # the next free slot ...
    assert backend.wait_started(3)[2] == b  # ... is b's, not a[2]'s
    backend.finish(a[1])
    assert backend.wait_started(4)[3] == a[2]
    assert controller.queues.pending("online") == a[3:]


def test_a_user_alone_runs_at_most_its_cap_and_leaves_the_rest_free(running_analyzer):
    controller, backend, create, start = running_analyzer(slots=2, per_user=None)  # cap: 1
    a = [create("a@example.com") for _ in range(8)]
    start()
    assert backend.wait_started(1) == a[:1]
    b = create("b@example.com")
    assert backend.wait_started(2) == [a[0], b]  # at once: a's backlog holds one slot only
    assert controller.queues.held("online") == [a[0], b]
    assert controller.queues.pending("online") == a[1:]


# -- Local cluster: one user's replicas (CB-23) -----------------------------------------------

class _Cluster:
    """A resource manager over the real gRPC API and a real `LocalBackend` with small limits;
    each job's command records that it started, then runs until `release` exists."""

    def __init__(self, falcon_api, tmp_path, *, max_replicas: int, per_user: int):
        from controllers.cluster_backends import LocalBackend
        from controllers.resource_manager import ResourceManager

        self.state_dir = tmp_path / "state"
        self.starts, self.release = tmp_path / "starts", tmp_path / "release"
        self.starts.mkdir()
        self.backend = LocalBackend(self.state_dir, grace_seconds=0.5, stop_wait_seconds=0.2,
                                    max_replicas=max_replicas, max_replicas_per_user=per_user)
        self.manager = ResourceManager(falcon_api, {"local": self.backend})

    def job(self, user, *, replica: int = 1, name: str = "cap"):
        from experiments.tests.factories import make_exp

        command = (f'touch "{self.starts}/$FALCON_JOB_ID-$FALCON_REPLICA_INDEX"; '
                   f'while [ ! -e "{self.release}" ]; do sleep 0.02; done')
        return make_exp(creator=user, name=name, command=command, replica=replica).jobs.get()

    def started_jobs(self) -> set[int]:
        return {int(path.name.split("-")[0]) for path in self.starts.iterdir()}

    def row(self, job):
        from jobs.models import Job

        return Job.objects.get(pk=job.pk)

    def tick_until(self, check, what: str, deadline: float = 30.0):
        """Tick until `check()` is true (a state the platform reaches, not a time)."""
        return poll_until(check, timeout=max(deadline, 60.0), what=what,
                          tick=self.manager.tick)

    def stop(self):
        import json
        import os
        import signal

        self.release.touch()
        for manifest in self.state_dir.glob("*/manifest.json"):
            for rec in json.loads(manifest.read_text())["replicas"].values():
                try:
                    os.killpg(rec["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def local_cluster(falcon_api, tmp_path):
    clusters = []

    def make(**limits):
        clusters.append(_Cluster(falcon_api, tmp_path, **limits))
        return clusters[-1]

    yield make
    for cluster in clusters:
        cluster.stop()


@pytest.mark.django_db(transaction=True)
def test_a_1024_replica_job_fails_at_once_and_another_users_job_runs(local_cluster):
    # The reported attack: `replica: 1024` on the local cluster delayed a one-replica run
    # from 5.7 s to 49 s while 1024 processes were started.
    from accounts.tests.factories import UserFactory

    cluster = local_cluster(max_replicas=4, per_user=2)
    big = cluster.job(UserFactory(), replica=1024, name="big")
    small = cluster.job(UserFactory(), name="small")
    cluster.manager.tick()
    big_row, small_row = cluster.row(big), cluster.row(small)
    assert (big_row.status, big_row.reason) == ("Failed", "ClusterRejected")
    assert "1024 replicas" in big_row.message and "FALCON_LOCAL_MAX_REPLICAS" in big_row.message
    assert not (cluster.state_dir / "manifest.json").exists()
    assert not any(path.name.startswith(f"falcon-{big.experiment_id}-")
                   for path in cluster.state_dir.iterdir())  # nothing of it was created
    assert (small_row.status, small_row.reason) == ("Pending", "Submitted")
    cluster.tick_until(lambda: cluster.row(small).status == "Running", "the small job runs")
    # Running: its replica's process runs; the command's first line may not have yet (this
    # read came too early under load once).
    poll_until(cluster.started_jobs, what="the small job's replica to write its start")
    assert cluster.started_jobs() == {small.pk}


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_one_user_waits_pending_and_does_not_block_another(local_cluster):
    from accounts.tests.factories import UserFactory

    cluster = local_cluster(max_replicas=4, per_user=2)
    alice, bob = UserFactory(), UserFactory()
    burst = [cluster.job(alice, name=f"burst-{n}") for n in range(6)]
    late = cluster.job(bob, name="late")  # created after the whole burst
    cluster.manager.tick()
    rows = [cluster.row(job) for job in burst]
    assert [row.reason for row in rows] == ["Submitted"] * 2 + ["WaitingForCapacity"] * 4
    assert (cluster.row(late).status, cluster.row(late).reason) == ("Pending", "Submitted")
    waiting = rows[2]
    assert waiting.status == "Pending" and not waiting.cluster_job_name
    assert "FALCON_LOCAL_MAX_REPLICAS_PER_USER" in waiting.message
    assert "2 of at most 2 for this user" in waiting.message
    cluster.tick_until(lambda: cluster.started_jobs() == {burst[0].pk, burst[1].pk, late.pk},
                       "the admitted jobs start")
    for _ in range(3):  # level-triggered: more ticks start nothing more
        cluster.manager.tick()
    assert cluster.started_jobs() == {burst[0].pk, burst[1].pk, late.pk}
    assert all(cluster.row(job).reason == "WaitingForCapacity" for job in burst[2:])


@pytest.mark.django_db(transaction=True)
def test_waiting_jobs_start_in_their_turn_when_capacity_frees(local_cluster):
    from accounts.tests.factories import UserFactory

    cluster = local_cluster(max_replicas=2, per_user=2)
    alice = UserFactory()
    jobs = [cluster.job(alice, name=f"q-{n}") for n in range(4)]
    cluster.manager.tick()
    assert [cluster.row(job).reason for job in jobs] == \
        ["Submitted", "Submitted", "WaitingForCapacity", "WaitingForCapacity"]
    assert "2 of at most 2 replicas run" in cluster.row(jobs[2]).message
    cluster.release.touch()  # the first two finish ...
    cluster.tick_until(lambda: cluster.row(jobs[1]).status == "Succeeded"
                       and cluster.row(jobs[0]).status == "Succeeded", "the first two finish")
    # ... and the waiting ones are admitted, oldest first, then run to the end.
    cluster.tick_until(lambda: all(cluster.row(job).status == "Succeeded" for job in jobs),
                       "the waiting jobs run")
    assert cluster.started_jobs() == {job.pk for job in jobs}


@pytest.mark.django_db(transaction=True)
def test_a_job_over_the_per_user_limit_fails_naming_that_limit(local_cluster):
    from accounts.tests.factories import UserFactory

    cluster = local_cluster(max_replicas=8, per_user=2)
    job = cluster.job(UserFactory(), replica=3)
    cluster.manager.tick()
    row = cluster.row(job)
    assert (row.status, row.reason) == ("Failed", "ClusterRejected")
    assert "FALCON_LOCAL_MAX_REPLICAS_PER_USER" in row.message and "3 replicas" in row.message


@pytest.mark.django_db
def test_http_more_query_parameters_than_django_reads_is_a_400(auth_api):
    # Repeated keys past DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000) are refused by Django before
    # the view reads one (the request's total size; a comma list is counted by the filter).
    res = auth_api.get("/api/v1/exps?" + "&".join(f"id={i}" for i in range(1, 1_202)))
    assert res.status_code == 400
