"""Where experiments write their artifacts: a local directory (`file://`) or GCS (`gs://`).

One module per store (`local.py`, `gcs.py`) over the shared interface and URL helpers
(`base.py`); this package picks the store for a URL. No Django imports: controllers use it
without settings. Callers import from `artifacts.store`, whose names are re-exported here.
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit

from artifacts.store.base import (
    DEFAULT_LIST_LIMIT,
    GCS_TIMEOUT_SECONDS,
    ArtifactStore,
    FilePage,
    OpenFile,
    StoredFile,
    artifact_logs_url,
    gcs_etag,
    job_log_url,
    local_etag,
    local_path,
    replica_log_url,
    split_gs_url,
)
from artifacts.store.gcs import GCSArtifactStore
from artifacts.store.local import LocalArtifactStore

__all__ = [
    "DEFAULT_LIST_LIMIT", "GCS_TIMEOUT_SECONDS", "ArtifactStore", "FilePage", "GCSArtifactStore",
    "LocalArtifactStore", "OpenFile", "StoredFile", "artifact_logs_url", "fetch_tree",
    "gcs_etag", "job_log_url", "local_etag", "local_path", "replica_log_url", "split_gs_url",
    "store_for",
]

_GCS_STORES: dict[str, GCSArtifactStore] = {}


def store_for(url: str) -> ArtifactStore:
    """Return the store that serves `url`: `LocalArtifactStore` for file://, GCS for gs://.

    Raises:
        ValueError: the URL's scheme is neither `file` nor `gs`; the message names the URL.
    """
    scheme = urlsplit(url).scheme
    if scheme == "file":
        return LocalArtifactStore()
    if scheme == "gs":
        # One client per emulator setting: a client holds an HTTP session worth reusing across
        # ticks, and tests switch STORAGE_EMULATOR_HOST between emulators.
        key = os.environ.get("STORAGE_EMULATOR_HOST", "")
        if key not in _GCS_STORES:
            _GCS_STORES[key] = GCSArtifactStore()
        return _GCS_STORES[key]
    raise ValueError(f"Unsupported artifact URL {url!r}: use file:///absolute/path or "
                     "gs://bucket/prefix.")


def fetch_tree(url: str, dest: str | os.PathLike) -> int:
    """Copy every file under the folder `url` (file:// or gs://) into the local folder `dest`;
    return how many (`ArtifactStore.fetch_tree` of `store_for(url)`)."""
    return store_for(url).fetch_tree(url, dest)
