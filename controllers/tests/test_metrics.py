"""A controller's Prometheus metrics: tick duration and errors, cluster calls by verb, jobs by
status, leader status; served on a real port and scraped with urllib (real gRPC API server,
real local cluster backend)."""
from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from controllers import metrics
from controllers.cluster_backends import LocalBackend
from controllers.resource_manager import ResourceManager
from controllers.runner import run_loop
from core.testing import wait_until as poll_until
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import falcon_api, grpc_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample of http://127.0.0.1:port/metrics as {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as res:
        text = res.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_resource_manager_metrics_on_its_port(falcon_api, tmp_path):
    backend = LocalBackend(tmp_path / "cluster", grace_seconds=0.5, stop_wait_seconds=0.2)
    manager = ResourceManager(falcon_api, {"local": backend})
    leading = threading.Event()
    leading.set()
    registry = CollectorRegistry()
    metrics.instrument(manager, is_leader=leading.is_set, registry=registry)
    # The controller's own collector on a registry of this test; the shared metrics (ticks,
    # calls, jobs) are read from the process's default registry, which serve() exposes.
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    before = scrape(port)
    make_exp(roles=("main",), command='echo hi > "$FALCON_ARTIFACT_PATH/out"')

    run_loop(manager, interval=0.05, stop=threading.Event(), max_ticks=1)
    after = scrape(port)
    assert value(after, "falcon_controller_tick_duration_seconds_count",
                 controller="resources") == value(
        before, "falcon_controller_tick_duration_seconds_count", controller="resources") + 1
    assert value(after, "falcon_controller_jobs", controller="resources", status="Pending") == 1
    created = value(after, "falcon_cluster_api_calls_total", controller="resources",
                    verb="create") - value(before, "falcon_cluster_api_calls_total",
                                           controller="resources", verb="create")
    assert created == 1
    assert ("falcon_controller_rows_skipped_total",
            (("controller", "resources"),)) in after

    # The leader gauge follows the elector, read at scrape time.
    from prometheus_client import generate_latest

    assert b'falcon_controller_leader{controller="resources"} 1.0' in generate_latest(registry)
    leading.clear()
    assert b'falcon_controller_leader{controller="resources"} 0.0' in generate_latest(registry)

    # A tick that raises a transient error is counted as an error.
    class Broken:
        name = "broken"

        def tick(self):
            raise ConnectionError("API server down")

    run_loop(Broken(), interval=0.01, stop=threading.Event(), max_ticks=2,
             is_transient=lambda exc: True)
    assert value(scrape(port), "falcon_controller_tick_errors_total", controller="broken") == 2

    # Later ticks see the job leave Pending.
    poll_until(lambda: value(scrape(port), "falcon_controller_jobs", controller="resources",
                             status="Pending") == 0,
               what="the job to leave Pending", every=0.1,
               tick=lambda: run_loop(manager, interval=0.05, stop=threading.Event(),
                                     max_ticks=1))


# -- every gauge equals what the API reports for the same moment ------------------------------

@pytest.fixture(scope="module")
def metrics_port() -> int:
    """One /metrics server of this process (the default registry) for the tests below."""
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    return port


def test_the_analyzer_gauges_equal_the_api_counts(
        grpc_server, metrics_port, tmp_path):  # noqa: F811
    """Two analyses wait while a third holds the only slot: the analyzer lists `pending` and
    `running` records in two calls, and neither zeroes what the other counted."""
    from analysis.tests.factories import make_finished_exp
    from controllers.analyzer.grpc_client import GrpcAnalysisRecordAPI
    from controllers.analyzer.tests.helpers import make_controller, until
    from falcon_site.grpc.testing import INTERNAL_TOKEN

    exp = make_finished_exp(exp_type="profiling")
    api = GrpcAnalysisRecordAPI(f"127.0.0.1:{grpc_server.port}", INTERNAL_TOKEN, timeout=10)
    analyzer = make_controller(api, tmp_path, limits={"offline": 1, "online": 1},
                               catalog={}, poll_seconds=0.0)
    metrics.instrument(analyzer, registry=CollectorRegistry())
    for _ in range(3):
        api.create_record(exp_id=exp.pk, analysis_type="online", command="sleep 60",
                          result_root=(tmp_path / "results").as_uri(),
                          creator_email=exp.creator.email)
    try:
        run_loop(analyzer, interval=0.0, stop=threading.Event(), max_ticks=2)
        found = scrape(metrics_port)
        pending = len(api.list_records(statuses=("pending",)))
        running = len(api.list_running())
        assert (pending, running) == (2, 1)
        assert value(found, "falcon_controller_analyses", controller="analyzer",
                     status="pending") == pending
        assert value(found, "falcon_controller_analyses", controller="analyzer",
                     status="running") == running
        # Statuses no call read are not made up (no zero for succeeded, say).
        assert ("falcon_controller_analyses",
                (("controller", "analyzer"), ("status", "succeeded"))) not in found
    finally:
        for analysis_id in analyzer.backend.list_runs():
            until(lambda: analyzer.backend.stop(analysis_id), timeout=30)
        api.close()


def test_the_exp_controller_exports_its_jobs_by_status(falcon_api, metrics_port,  # noqa: F811
                                                       monkeypatch):
    """docs/operations.md lists `falcon_controller_jobs` for every controller: the exp controller counts
    every job of the open experiments it reconciles, each status of the enum set every tick,
    summed over the pages it reads them in (one experiment per page here)."""
    monkeypatch.setattr("controllers.grpc_client.STATES_PAGE_SIZE", 1)
    from controllers.contract import ListFilter
    from controllers.exp_controller import EXP_NON_TERMINAL, ExpController
    from core.domain.statuses import JobStatus

    controller = ExpController(falcon_api, has_files=lambda url: True)
    metrics.instrument(controller, registry=CollectorRegistry())
    make_exp(roles=("main", "worker"))
    make_exp(roles=("main",))
    run_loop(controller, interval=0.0, stop=threading.Event(), max_ticks=1)
    found = scrape(metrics_port)
    jobs = falcon_api.list_jobs(ListFilter(exp_statuses=EXP_NON_TERMINAL))
    assert len(jobs) == 3
    for status in map(str, JobStatus):
        assert ("falcon_controller_jobs", (("controller", "exp"), ("status", status))) in found
        assert value(found, "falcon_controller_jobs", controller="exp", status=status) == sum(
            1 for job in jobs if job.status == status), status
