"""End to end: a real `manage.py runcontroller analyzer --no-leader-election` process talking
gRPC to AnalysisRecordService (an in-memory double behind a real gRPC server), real runs.

Covers the client (`GrpcAnalysisRecordAPI`: paging, ALREADY_EXISTS with its id), and recovery:
the controller is killed with SIGKILL mid-run and restarted; it re-attaches to the live run
(exactly one runner of that analysis exists) and re-creates a missing one after the back-off,
counting attempts.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from controllers.analyzer.backends.base import run_name_for
from controllers.analyzer.contract import AlreadyExists
from controllers.analyzer.grpc_client import GrpcAnalysisRecordAPI

from .fake_records import FakeRecordAPI, serve_fake
from .helpers import artifact, runner_pids, until

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def record_server():
    api = FakeRecordAPI()
    server, port = serve_fake(api)
    yield api, port
    server.stop(0)


def test_grpc_client_pages_and_already_exists(record_server, tmp_path):
    api, port = record_server
    client = GrpcAnalysisRecordAPI(f"127.0.0.1:{port}", "token", timeout=5)
    for _ in range(1203):
        api.add()
    assert len(client.list_records(statuses=("pending",))) == 1203  # two pages of 1000
    made = client.create_record(exp_id=3, analysis_type="offline", plugin_name="p",
                                artifact_id=7, result_root="file:///tmp/r")
    assert made.result_path == f"file:///tmp/r/analysis/3/{made.analysis_id}/"
    with pytest.raises(AlreadyExists) as info:
        client.create_record(exp_id=3, analysis_type="offline", plugin_name="p",
                             artifact_id=7, result_root="file:///tmp/r")
    assert info.value.analysis_id == made.analysis_id
    updated = client.update_record(made.analysis_id, expected_status="pending",
                                   status="running", attempts=1)
    assert (updated.status, updated.attempts) == ("running", 1)
    assert [r.analysis_id for r in client.list_running()] == [made.analysis_id]
    client.close()


def start_controller(tmp_path: Path, port: int) -> subprocess.Popen:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("plugins: []\n")
    env = dict(os.environ, FALCON_GRPC_TARGET=f"127.0.0.1:{port}",
               FALCON_PLUGIN_CATALOG=str(catalog),
               FALCON_ANALYZER_STATE_DIR=str(tmp_path / "state"),
               FALCON_ANALYSIS_ROOT=(tmp_path / "results").as_uri(),
               FALCON_ANALYSIS_POLL_SECONDS="0.2", FALCON_ANALYSIS_BACKOFF_SECONDS="0.5",
               FALCON_ANALYSIS_MAX_ATTEMPTS="3", PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runcontroller", "analyzer",
         "--no-leader-election", "--interval", "0.1", "--addr", "127.0.0.1:0"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "ctl.log", "ab"))


def test_controller_killed_mid_run_reattaches_then_recreates_lost_run(record_server, tmp_path):
    api, port = record_server
    art = artifact(tmp_path)
    api.artifact_paths[1] = art
    rec = api.create_record(exp_id=1, analysis_type="online",
                            command="echo first; sleep 3; echo last",
                            result_root=(tmp_path / "results").as_uri())
    name = run_name_for(rec.analysis_id)
    ctl = start_controller(tmp_path, port)
    try:
        until(lambda: api.get_record(rec.analysis_id).status == "running", timeout=30)
        until(lambda: runner_pids(name), timeout=10)
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait(5)
        assert len(runner_pids(name)) == 1  # the run outlives its controller
        ctl = start_controller(tmp_path, port)
        until(lambda: api.get_record(rec.analysis_id).status == "succeeded", timeout=30,
              every=0.1, tick=lambda: len(runner_pids(name)) <= 1 or pytest.fail(
                  "two runners of one analysis"))
        done = api.get_record(rec.analysis_id)
        assert done.attempts == 1  # re-attached, never started again
        log = (Path(done.result_path.removeprefix("file://")) / "output.log").read_text()
        assert log.count("first") == 1 and "last" in log

        # A running record whose run is gone (e.g. the controller died between marking it
        # running and starting it): started again after the back-off, attempts counted.
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait(5)
        lost = api.add(status="running", attempts=1, command="echo again",
                       artifact_path=art,
                       result_path=(tmp_path / "results" / "lost").as_uri() + "/")
        ctl = start_controller(tmp_path, port)
        until(lambda: api.get_record(lost.analysis_id).status == "succeeded", timeout=30)
        assert api.get_record(lost.analysis_id).attempts == 2
    finally:
        ctl.kill()
        ctl.wait(5)
