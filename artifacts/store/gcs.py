"""The `gs://` store: artifacts in Google Cloud Storage (google-cloud-storage, imported on use)."""
from __future__ import annotations

import os
from collections.abc import Callable
from urllib.parse import urlsplit

from artifacts.store.base import (
    ArtifactStore,
    DEFAULT_LIST_LIMIT,
    FilePage,
    GCS_TIMEOUT_SECONDS,
    OpenFile,
    StoredFile,
    check_limit,
    check_offset,
    gcs_etag,
    inside,
    resume_copy,
    split_gs_url,
)
from core.processes import safefs


class GCSArtifactStore(ArtifactStore):
    """Artifacts in Google Cloud Storage, addressed by `gs://bucket/prefix` URLs.

    Uses google-cloud-storage. When `STORAGE_EMULATOR_HOST` is set (e.g. `http://127.0.0.1:4443`
    for fake-gcs-server), the client talks to that emulator with anonymous credentials; otherwise
    it uses Application Default Credentials. The client is created on first use, so building a
    store never does network I/O.
    """

    scheme = "gs"

    def __init__(self, client=None, timeout: float = GCS_TIMEOUT_SECONDS):
        """Args:
            client: a `google.cloud.storage.Client`; None builds one from the environment.
            timeout: seconds for each HTTP call to GCS.
        """
        self._client = client
        self.timeout = timeout

    @property
    def client(self):
        """Return the storage client, creating it on first use."""
        if self._client is None:
            from google.cloud import storage

            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                # Emulators need no credentials, and ADC lookup would fail or pick up real ones.
                self._client = storage.Client(
                    project=os.environ.get("GOOGLE_CLOUD_PROJECT", "falcon-local"),
                    credentials=AnonymousCredentials())
            else:
                self._client = storage.Client()
        return self._client

    def _blobs(self, url: str, page_size: int):
        """Yield `(relative path, size)` of objects under `url`, skipping folder placeholders."""
        from google.api_core.exceptions import NotFound

        bucket, prefix = split_gs_url(url)
        try:
            # Objects come back in lexicographic name order, so results are sorted by name.
            for blob in self.client.list_blobs(bucket, prefix=prefix, page_size=page_size,
                                               timeout=self.timeout):
                if blob.name.endswith("/"):
                    continue
                yield blob.name[len(prefix):], int(blob.size or 0)
        except NotFound:
            # A missing bucket holds no files. Other errors (network, 5xx, 403) propagate so
            # the caller retries on its next tick instead of failing the artifact.
            return

    def has_files(self, url: str) -> bool:
        """Return True when an object (not a folder placeholder) exists under `url`."""
        return next(self._blobs(url, page_size=100), None) is not None

    def find_first(self, url: str, accept: Callable[[str], bool]) -> str | None:
        """The first object under `url` (folder placeholders skipped) that `accept` takes
        (see `ArtifactStore.find_first`); pages are fetched only until it is found."""
        return next((rel for rel, _size in self._blobs(url, page_size=1000) if accept(rel)),
                    None)

    def list_page(self, url: str, *, after: str | None = None,
                  limit: int = DEFAULT_LIST_LIMIT) -> FilePage:
        """List one page of objects under `url` (see `ArtifactStore.list_page`).

        Uses the JSON API's `startOffset` (inclusive, so the name `after` itself is skipped)
        and asks for one more object than `limit` to know whether a next page exists.
        """
        from google.api_core.exceptions import NotFound

        check_limit(limit)
        bucket, prefix = split_gs_url(url)
        rows: list[StoredFile] = []
        more = False
        try:
            blobs = self.client.list_blobs(
                bucket, prefix=prefix, page_size=min(limit + 1, 1000),
                start_offset=(prefix + after) if after else None, timeout=self.timeout)
            for blob in blobs:
                rel = blob.name[len(prefix):]
                if blob.name.endswith("/") or (after is not None and rel <= after):
                    continue
                if len(rows) >= limit:
                    more = True
                    break
                rows.append(StoredFile(rel, int(blob.size or 0), blob.updated,
                                       gcs_etag(blob.generation)))
        except NotFound:
            return FilePage([], None)
        return FilePage(rows, rows[-1].name if more else None)

    def download(self, url: str, dest: str | os.PathLike, *, chunk_bytes: int = 8 << 20) -> int:
        """Copy the object at `url` to `dest`, resuming with ranged reads (see
        `ArtifactStore.download`)."""
        return resume_copy(self.size_of(url), url, dest, self.read_range, chunk_bytes)

    def list_files(self, url: str, limit: int = DEFAULT_LIST_LIMIT) -> list[tuple[str, int]]:
        """List objects under `url` (see `ArtifactStore.list_files`)."""
        check_limit(limit)
        out: list[tuple[str, int]] = []
        for item in self._blobs(url, page_size=min(limit + 10, 1000)):
            out.append(item)
            if len(out) >= limit:
                break
        return out


    def open_in(self, root_url: str, name: str) -> OpenFile | None:
        """Open the object `name` below the prefix `root_url`: its size and generation read
        once, and every read pinned to that generation, so a download never mixes two
        versions (an object rewritten meanwhile reads as gone).

        Raises:
            core.processes.safefs.UnsafeName: as `size_in`.
        """
        from google.api_core.exceptions import NotFound, RequestRangeNotSatisfiable

        safefs.name_parts(name)
        url = f"{root_url.rstrip('/')}/{name}"
        current = self._blob(url)
        try:
            current.reload(timeout=self.timeout)
        except NotFound:
            return None
        pinned = current.bucket.blob(current.name, generation=current.generation)

        def read(offset: int, limit: int) -> bytes:
            if limit == 0:
                return b""
            try:
                return pinned.download_as_bytes(start=offset, end=offset + limit - 1,
                                                timeout=self.timeout)
            except NotFound:
                raise FileNotFoundError(f"{url} changed while it was read") from None
            except RequestRangeNotSatisfiable:
                return b""

        return OpenFile(int(current.size or 0), read, etag=gcs_etag(current.generation))

    def _blob(self, url: str):
        parts = urlsplit(url)
        if parts.scheme != "gs" or not parts.netloc or not parts.path.strip("/"):
            raise ValueError(f"{url!r} is not a gs://bucket/object URL.")
        return self.client.bucket(parts.netloc).blob(parts.path.lstrip("/"))

    def size_of(self, url: str) -> int | None:
        """Return the object's size in bytes, None when there is no such object."""
        blob = self._blob(url)
        if not blob.exists(timeout=self.timeout):
            return None
        blob.reload(timeout=self.timeout)
        return int(blob.size or 0)

    def read_range(self, url: str, offset: int = 0, limit: int | None = None) -> bytes:
        """Read a byte range of the object (an HTTP Range request)."""
        from google.api_core.exceptions import NotFound, RequestRangeNotSatisfiable

        check_offset(offset)
        if limit == 0:
            return b""
        end = None if limit is None else offset + limit - 1
        try:
            return self._blob(url).download_as_bytes(start=offset, end=end, timeout=self.timeout)
        except NotFound:
            raise FileNotFoundError(f"no object at {url}") from None
        except RequestRangeNotSatisfiable:
            return b""  # offset at or past the end

    def put_file(self, path: str | os.PathLike, url: str) -> None:
        """Upload `path` as the object `url` (a GCS object is replaced as a whole), read from
        a descriptor opened without following a link."""
        with os.fdopen(safefs.open_regular(path), "rb") as fh:
            self._blob(url).upload_from_file(fh, size=os.fstat(fh.fileno()).st_size,
                                             timeout=self.timeout)

    def delete_tree(self, url: str) -> int:
        """Delete every object under the prefix `url`; return how many were deleted."""
        from google.api_core.exceptions import NotFound

        bucket, prefix = split_gs_url(url)
        count = 0
        for blob in self.client.list_blobs(bucket, prefix=prefix, timeout=self.timeout):
            try:
                blob.delete(timeout=self.timeout)
                count += 1
            except NotFound:
                pass
        return count

    def fetch_tree(self, url: str, dest: str | os.PathLike) -> int:
        """Download every object under the prefix `url` into `dest` (see
        `ArtifactStore.fetch_tree`); folder placeholders are skipped."""
        bucket, prefix = split_gs_url(url)
        count = 0
        for rel, _size in self._blobs(url, page_size=1000):
            target = inside(dest, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            self.client.bucket(bucket).blob(prefix + rel).download_to_filename(
                str(target), timeout=self.timeout)
            count += 1
        return count

