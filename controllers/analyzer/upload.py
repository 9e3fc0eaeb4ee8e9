"""Whole-object uploads to GCS that a retry can never duplicate or clobber (docs/analyzer.md,
"Outputs in GCS").

An analysis writes `output.log` many times while it runs and `{plugin}.jsonl` at its end. A GCS
object cannot be appended to, so each write replaces the whole object. google-cloud-storage
retries an upload safely only when it carries a generation precondition (a blind retry after a
reply lost in a connection reset could overwrite a newer object); so every write here does:

- `if_generation_match=G`: 0 when the object must not exist yet, or the generation this writer
  last wrote or deliberately replaces (an object a previous attempt of the same analysis left);
- `retry=DEFAULT_RETRY` of google-cloud-storage, bounded by `deadline` seconds: 429, 5xx,
  connection resets and timeouts are retried with its exponential back-off;
- a 412 PreconditionFailed (the generation moved) is resolved by the object's CRC32C: equal to
  the local content means an earlier try of this very write was committed before its reply was
  lost, which is success; different means another writer: `UploadConflict`, never overwritten
  silently.

Django-free, like the runner that uses it.
"""
from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from contextlib import contextmanager

GCS_DEADLINE_SECONDS = 120.0
GCS_CALL_TIMEOUT_SECONDS = 60.0


class UploadConflict(RuntimeError):
    """The object changed under this writer (another writer): not overwritten."""


def crc32c_of(path: str | os.PathLike) -> str:
    """The CRC32C of the file at `path`, base64 of its 4 big-endian bytes (the GCS `crc32c`
    object field's form)."""
    import google_crc32c

    checksum = google_crc32c.Checksum()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            checksum.update(chunk)
    return base64.b64encode(checksum.digest()).decode()


class ObjectWriter:
    """Writes one GCS object again and again, each time whole, under generation preconditions.

    Args:
        bucket: a `google.cloud.storage.Bucket`.
        name: the object's name (e.g. `analysis/12/an-3/output.log`).
        deadline: seconds one `put` may spend retrying (429, 5xx, resets), in all.
        timeout: seconds of each HTTP call.

    Attributes:
        generation: the generation this writer last wrote, None before the first `put`.
    """

    def __init__(self, bucket, name: str, *, deadline: float = GCS_DEADLINE_SECONDS,
                 timeout: float = GCS_CALL_TIMEOUT_SECONDS):
        self.bucket = bucket
        self.name = name
        self.deadline = float(deadline)
        self.timeout = float(timeout)
        self.generation: int | None = None

    def _retry(self):
        from google.cloud.storage.retry import DEFAULT_RETRY

        return DEFAULT_RETRY.with_timeout(self.deadline)

    def put(self, path: str | os.PathLike) -> int:
        """Replace the object by the file at `path`; return the generation written.

        The first put replaces deliberately whatever a previous attempt left (its generation
        is read first; 0 when there is none); later puts replace only this writer's last
        generation.

        Raises:
            UploadConflict: the object was changed by another writer (CRC32C differs).
            google.api_core.exceptions.RetryError: the deadline passed while GCS answered 429,
                5xx or reset the connection.
            google.api_core.exceptions.GoogleAPICallError: a status that is not retried (403,
                404 no bucket).
        """
        from google.api_core.exceptions import PreconditionFailed

        if self.generation is None:
            current = self.bucket.get_blob(self.name, timeout=self.timeout, retry=self._retry())
            self.generation = int(current.generation) if current is not None else 0
        with _private_copy(path) as private:
            return self._put(private)

    def _put(self, path: str) -> int:
        from google.api_core.exceptions import PreconditionFailed

        blob = self.bucket.blob(self.name)
        try:
            blob.upload_from_filename(str(path), if_generation_match=self.generation,
                                      timeout=self.timeout, retry=self._retry())
            self.generation = int(blob.generation)
            return self.generation
        except PreconditionFailed:
            pass
        current = self.bucket.get_blob(self.name, timeout=self.timeout, retry=self._retry())
        if current is not None and current.crc32c == crc32c_of(path):
            # A try whose reply was lost was committed: this content is there.
            self.generation = int(current.generation)
            return self.generation
        found = "no object" if current is None else f"generation {current.generation}"
        raise UploadConflict(
            f"gs://{self.bucket.name}/{self.name} changed under this writer (expected "
            f"generation {self.generation}, found {found} with other content); not "
            "overwritten")


@contextmanager
def _private_copy(path: str | os.PathLike) -> Iterator[str]:
    """Copy `path`, opened without following a link in its last component, to a private
    temporary file: the script of a run writes its results file and could swap it for a link
    to a secret between a check and the upload's (and a retry's) own open by name."""
    import shutil
    import tempfile

    from core.processes.safefs import open_regular

    with os.fdopen(open_regular(path), "rb") as src, \
            tempfile.NamedTemporaryFile(prefix=".falcon-upload-") as tmp:
        shutil.copyfileobj(src, tmp, 1 << 20)
        tmp.flush()
        yield tmp.name


def writer_for(url: str, **kwargs) -> ObjectWriter:
    """An `ObjectWriter` for the object `gs://bucket/name`, on the artifact store's client
    (`STORAGE_EMULATOR_HOST` honoured).

    Raises:
        ValueError: `url` is not a gs://bucket/object URL.
    """
    from urllib.parse import urlsplit

    from artifacts.store import store_for

    parts = urlsplit(url)
    bucket, name = parts.netloc, parts.path.lstrip("/")
    if parts.scheme != "gs" or not bucket or not name or name.endswith("/"):
        raise ValueError(f"{url!r} is not a gs://bucket/object URL.")
    client = store_for(url).client
    return ObjectWriter(client.bucket(bucket), name, **kwargs)
