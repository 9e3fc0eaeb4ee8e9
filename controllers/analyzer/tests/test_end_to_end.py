"""End to end: a real `manage.py runcontroller analyzer --no-leader-election` process talking
gRPC to the API server's real AnalysisRecordService (`falcon_site.grpc.testing`, in this process,
over the test database), real runs.

Covers the client (`GrpcAnalysisRecordAPI`: paging, ALREADY_EXISTS with its id), and recovery:
the controller is killed with SIGKILL mid-run and restarted; it re-attaches to the live run
(exactly one runner of that analysis exists) and re-creates a missing one after the back-off,
counting attempts. tests/test_analyzer_e2e.py drives the whole analyzer over HTTP as well.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.models import AnalysisRecord, new_analysis_id
from analysis.services import analysis_record_create, analysis_record_update
from analysis.tests.factories import make_finished_exp
from artifacts.store import local_path
from controllers.analyzer.backends.base import run_name_for
from controllers.analyzer.contract import AlreadyExists, existing_analysis_id
from controllers.analyzer.grpc_client import GrpcAnalysisRecordAPI
from falcon_site.grpc.testing import INTERNAL_TOKEN, grpc_server  # noqa: F401  (fixture)

from .helpers import runner_pids, until

ROOT = Path(__file__).resolve().parents[3]
ANALYZER_TOKEN = "analyzer-e2e-token-0123456789abcdef0123456789"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def exp(tmp_path):
    """A Succeeded experiment whose artifact folder holds one file."""
    exp = make_finished_exp(exp_type="profiling")
    folder = local_path(exp.artifact_path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trace.json").write_text("{}")
    return exp


def test_grpc_client_pages_and_already_exists(grpc_server, exp, tmp_path):  # noqa: F811
    client = GrpcAnalysisRecordAPI(f"127.0.0.1:{grpc_server.port}", INTERNAL_TOKEN, timeout=10)
    root = (tmp_path / "r").as_uri()
    AnalysisRecord.objects.bulk_create(AnalysisRecord(
        analysis_id=new_analysis_id(), name="bulk", experiment=exp, artifact=exp.artifact,
        creator=exp.creator, analysis_type="online", status="pending", command="true",
        result_path=f"{root}/bulk/") for _ in range(1203))
    assert len(client.list_records(statuses=("pending",))) == 1203  # two pages of 1000
    made = client.create_record(exp_id=exp.pk, analysis_type="offline", plugin_name="p",
                                command="p", artifact_id=exp.artifact.pk, result_root=root,
                                creator_email=exp.creator.email)
    assert made.result_path == f"{root}/analysis/{exp.pk}/{made.analysis_id}/"
    with pytest.raises(AlreadyExists) as info:
        client.create_record(exp_id=exp.pk, analysis_type="offline", plugin_name="p",
                             command="p", artifact_id=exp.artifact.pk, result_root=root,
                             creator_email=exp.creator.email)
    assert existing_analysis_id(info.value) == made.analysis_id
    updated = client.update_record(made.analysis_id, expected_status="pending",
                                   status="running", attempts=1)
    assert (updated.status, updated.attempts) == ("running", 1)
    assert [r.analysis_id for r in client.list_running()] == [made.analysis_id]
    client.close()


def start_controller(tmp_path: Path, port: int) -> subprocess.Popen:
    """A `runcontroller analyzer` subprocess against the API server on `port` (no plugins)."""
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("plugins: []\n")
    env = dict(os.environ, FALCON_GRPC_TARGET=f"127.0.0.1:{port}",
               FALCON_INTERNAL_TOKEN=INTERNAL_TOKEN, FALCON_ANALYZER_TOKEN=ANALYZER_TOKEN,
               DATABASE_URL=f"sqlite:///{tmp_path / 'never-opened.sqlite3'}",
               FALCON_PLUGIN_CATALOG=str(catalog),
               FALCON_ANALYZER_STATE_DIR=str(tmp_path / "state"),
               FALCON_ANALYSIS_ROOT=(tmp_path / "results").as_uri(),
               FALCON_ANALYSIS_POLL_SECONDS="0.2", FALCON_ANALYSIS_BACKOFF_SECONDS="0.5",
               FALCON_ANALYSIS_MAX_ATTEMPTS="3", PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runcontroller", "analyzer",
         "--no-leader-election", "--interval", "0.1", "--addr", "127.0.0.1:0"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "ctl.log", "ab"))


def status_of(analysis_id: str) -> str:
    """The record's status in the database."""
    return AnalysisRecord.objects.get(pk=analysis_id).status


def test_controller_killed_mid_run_reattaches_then_recreates_lost_run(
        grpc_server, exp, tmp_path):  # noqa: F811
    root = (tmp_path / "results").as_uri()
    rec = analysis_record_create(exp_id=exp.pk, analysis_type="online",
                                 command="echo first; sleep 3; echo last", result_root=root,
                                 creator_email=exp.creator.email)
    name = run_name_for(rec.analysis_id)
    ctl = start_controller(tmp_path, grpc_server.port)
    try:
        until(lambda: status_of(rec.analysis_id) == "running", timeout=30)
        until(lambda: runner_pids(name), timeout=10)
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait(5)
        assert len(runner_pids(name)) == 1  # the run outlives its controller
        ctl = start_controller(tmp_path, grpc_server.port)
        until(lambda: status_of(rec.analysis_id) == "succeeded", timeout=30,
              every=0.1, tick=lambda: len(runner_pids(name)) <= 1 or pytest.fail(
                  "two runners of one analysis"))
        done = AnalysisRecord.objects.get(pk=rec.analysis_id)
        assert done.attempts == 1  # re-attached, never started again
        log = (local_path(done.result_path) / "output.log").read_text()
        assert log.count("first") == 1 and "last" in log

        # A running record whose run is gone (e.g. the controller died between marking it
        # running and starting it): started again after the back-off, attempts counted.
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait(5)
        lost = analysis_record_create(exp_id=exp.pk, analysis_type="online",
                                      command="echo again", result_root=root,
                                      creator_email=exp.creator.email)
        analysis_record_update(lost.analysis_id, {"status": "running", "attempts": 1},
                               expected_status="pending")
        ctl = start_controller(tmp_path, grpc_server.port)
        until(lambda: status_of(lost.analysis_id) == "succeeded", timeout=30)
        assert AnalysisRecord.objects.get(pk=lost.analysis_id).attempts == 2
    finally:
        ctl.kill()
        ctl.wait(5)
    assert not (tmp_path / "never-opened.sqlite3").exists()  # records through gRPC only
