"""What every artifact store shares: URL helpers, the file records, the `ArtifactStore` interface.

The exp controller asks a store whether an artifact path really holds files before it marks the
Artifact Succeeded (it succeeds only when all its jobs succeeded and files exist under its path:
docs/architecture.md, State machines); the local cluster backend turns `file://` URLs into paths
for `FALCON_ARTIFACT_PATH`. No Django imports: controllers use this without settings.

An artifact path is a directory-like prefix: "files under it" means files below `<path>/`.
A file named exactly like the path, an empty directory, GCS "folder" placeholder objects (names
ending in '/') and a missing path or bucket all count as "no files".
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

from core.processes import safefs

DEFAULT_LIST_LIMIT = 1000
# Client-side timeout for every GCS call, seconds (cluster-behaviours.md#cb-16: no call may block
# forever).
GCS_TIMEOUT_SECONDS = 30.0


def local_path(url: str) -> Path:
    """Return the filesystem path of a `file://` URL.

    Accepts `file:///abs/path` and `file://localhost/abs/path`; percent-escapes are decoded
    (so `Path.as_uri()` output round-trips).

    Raises:
        ValueError: `url` is not a `file://` URL, or names a remote host.
    """
    parts = urlsplit(url)
    if parts.scheme != "file":
        raise ValueError(f"{url!r} is not a file:// URL.")
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"{url!r} names host {parts.netloc!r}; file:// URLs must be local "
                         "(file:///absolute/path).")
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise ValueError(f"{url!r} has no absolute path; use file:///absolute/path.")
    return Path(path)


def split_gs_url(url: str) -> tuple[str, str]:
    """Split `gs://bucket/some/prefix` into `("bucket", "some/prefix/")`.

    The prefix ends with '/' (or is "" for the whole bucket) so that `runs/1` does not match
    `runs/10`.

    Raises:
        ValueError: `url` is not a `gs://` URL or has no bucket.
    """
    parts = urlsplit(url)
    if parts.scheme != "gs":
        raise ValueError(f"{url!r} is not a gs:// URL.")
    if not parts.netloc:
        raise ValueError(f"{url!r} has no bucket; use gs://bucket/prefix.")
    prefix = parts.path.strip("/")
    return parts.netloc, f"{prefix}/" if prefix else ""


@dataclass(frozen=True)
class StoredFile:
    """One file under an artifact path.

    Attributes:
        name: the relative POSIX path under the artifact path, e.g. `main/trace.json`.
        size: bytes.
        modified: last modification time (UTC), None when the store does not say.
        etag: a strong validator of this version of the file (RFC 9110 8.8.3, quotes
            included): another content under the same name has another one
            (`local_etag`, `gcs_etag`); "" when the store cannot say.
    """

    name: str
    size: int
    modified: datetime | None
    etag: str = ""


def local_etag(st: os.stat_result) -> str:
    """The ETag of a local file version: its size, modification time (ns) and inode.

    Not a content hash: hashing every file of a listing (gigabytes of traces) per request
    costs far more than it saves. A rewrite changes the time (and `put_file`'s rename the
    inode), so the same name from another experiment or another run never shares it; a
    rewrite that keeps size, nanosecond time and inode is the one case it misses.
    """
    return f'"{st.st_size:x}-{st.st_mtime_ns:x}-{st.st_ino:x}"'


def gcs_etag(generation: int | None) -> str:
    """The ETag of a GCS object version: its generation, which every write changes."""
    return f'"g{generation}"' if generation else ""


@dataclass(frozen=True)
class FilePage:
    """One page of `ArtifactStore.list_page`: the files, and where the next page starts.

    Attributes:
        files: up to `limit` files, sorted by name.
        next_after: the name to pass as `after` for the next page; None on the last page.
    """

    files: list[StoredFile]
    next_after: str | None


class OpenFile:
    """A stored file opened for reading: its size when opened, and ranged reads of it.

    The local store holds the descriptor it opened (no link followed), so every read of a
    download reads that file even if the name is swapped meanwhile; GCS reads the object by
    name. Close it (or use it as a context manager).
    """

    def __init__(self, size: int, read, close=lambda: None, etag: str = ""):
        self.size, self.etag = size, etag
        self._read, self._close = read, close

    def read(self, offset: int, limit: int) -> bytes:
        """Return up to `limit` bytes from byte `offset`."""
        return self._read(offset, limit)

    def close(self) -> None:
        """Release the file; a second call does nothing (a descriptor is closed once)."""
        close, self._close = self._close, (lambda: None)
        close()

    def __enter__(self) -> "OpenFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def artifact_logs_url(artifact_path: str) -> str:
    """Return the folder holding the logs of an experiment's replicas: `<artifact path>.logs`.

    A sibling of the artifact folder, not inside it: logs never make an artifact look as if it
    held files (an artifact succeeds only when its jobs wrote some), and listing an artifact's
    files does not mix in the logs. The prefix `<path>.logs/` never matches `<path>/`.
    """
    return f"{artifact_path.rstrip('/')}.logs"


def replica_log_url(artifact_path: str, role: str, index: int) -> str:
    """Return where the output (stdout and stderr) of replica `index` of `role` is kept once
    the replica ended: `<experiment's artifact path>.logs/<role>/replica-<index>.log`."""
    return f"{artifact_logs_url(artifact_path)}/{role}/replica-{index}.log"


def job_log_url(job_artifact_path: str, role: str, index: int) -> str:
    """`replica_log_url` from a job's artifact path, which is `<experiment's path>/<role>`
    (CreateExp writes it so; the cluster backends only see the job's path). A path not ending
    in `/<role>` is taken as the experiment's path itself."""
    path = job_artifact_path.rstrip("/")
    suffix = f"/{role}"
    exp_path = path[:-len(suffix)] if path.endswith(suffix) else path
    return replica_log_url(exp_path, role, index)


class ArtifactStore(ABC):
    """The questions controllers ask about an artifact path, and the analyzer's output files."""

    scheme: str = ""

    @abstractmethod
    def list_page(self, url: str, *, after: str | None = None,
                  limit: int = DEFAULT_LIST_LIMIT) -> FilePage:
        """Return up to `limit` files under `url` whose names sort after `after`.

        Names are relative POSIX paths sorted by code point, so a listing can be resumed from
        the last name seen whatever was added or removed meanwhile (keyset paging; GCS's
        `startOffset` does the same on the server).

        Raises:
            ValueError: `url` is not of this store's scheme, or `limit` < 1.
        """

    def summarize(self, url: str) -> tuple[int, int]:
        """Return `(file count, total bytes)` of everything under `url`: an artifact's manifest.

        Reads every page of `list_page`; a missing path gives (0, 0).
        """
        count = total = 0
        after = None
        while True:
            page = self.list_page(url, after=after, limit=DEFAULT_LIST_LIMIT)
            count += len(page.files)
            total += sum(f.size for f in page.files)
            if page.next_after is None:
                return count, total
            after = page.next_after

    @abstractmethod
    def download(self, url: str, dest: str | os.PathLike, *, chunk_bytes: int = 1 << 20) -> int:
        """Copy the file at `url` to the local file `dest`, resuming a partial copy.

        When `dest` exists and is shorter than the stored file, only the missing bytes are
        fetched (a ranged read from its size on) and appended; when it is longer it is fetched
        again from the start. Returns the number of bytes transferred.

        Raises:
            FileNotFoundError: no file at `url`.
        """

    @abstractmethod
    def has_files(self, url: str) -> bool:
        """Return True when at least one file exists anywhere under `url`.

        Raises:
            ValueError: `url` is not of this store's scheme.
        """

    @abstractmethod
    def list_files(self, url: str, limit: int = DEFAULT_LIST_LIMIT) -> list[tuple[str, int]]:
        """Return up to `limit` files under `url` as `(relative POSIX path, size in bytes)`.

        Paths are relative to `url`, sorted by name; a missing path gives [].

        Raises:
            ValueError: `url` is not of this store's scheme, or `limit` < 1.
        """

    @abstractmethod
    def find_first(self, url: str, accept: Callable[[str], bool]) -> str | None:
        """Return the relative POSIX path of the first file under `url` that `accept` takes,
        None when none does (a missing path holds none).

        Lazy: the listing stops at the first match, so an artifact holding a matching file
        costs a page or so whatever its size; one without reads its whole listing once.

        Raises:
            ValueError: `url` is not of this store's scheme.
        """

    # Objects: single files by URL, used by the Data Analyzer for its outputs
    # ({root}/analysis/{exp-id}/{analysis-id}/{plugin}.jsonl and output.log).

    @abstractmethod
    def size_of(self, url: str) -> int | None:
        """Return the size in bytes of the file at `url`, or None when there is none."""

    @abstractmethod
    def read_range(self, url: str, offset: int = 0, limit: int | None = None) -> bytes:
        """Return up to `limit` bytes (None: all) of the file at `url`, from byte `offset`.

        Raises:
            FileNotFoundError: no file at `url`.
            ValueError: `url` is not of this store's scheme, or `offset` < 0.
        """

    def size_in(self, root_url: str, name: str) -> int | None:
        """Return the size of the file `name` (relative, `/`-separated) below the folder
        `root_url`, None when there is none; the local store follows no link on the way.

        Raises:
            core.processes.safefs.UnsafeName: `name` is absolute or has a `..` (or empty) component.
        """
        safefs.name_parts(name)
        return self.size_of(f"{root_url.rstrip('/')}/{name}")

    def read_in(self, root_url: str, name: str, offset: int = 0,
                limit: int | None = None) -> bytes:
        """`read_range` of the file `name` below the folder `root_url` (see `size_in`).

        Raises:
            core.processes.safefs.UnsafeName: as `size_in`.
            FileNotFoundError: no regular file there (a link is none).
        """
        safefs.name_parts(name)
        return self.read_range(f"{root_url.rstrip('/')}/{name}", offset, limit)

    def open_in(self, root_url: str, name: str) -> OpenFile | None:
        """Open the file `name` below the folder `root_url` for ranged reads; None when there
        is none (see `size_in`).

        Raises:
            core.processes.safefs.UnsafeName: as `size_in`.
        """
        size = self.size_in(root_url, name)
        if size is None:
            return None
        url = f"{root_url.rstrip('/')}/{name}"
        return OpenFile(size, lambda offset, limit: self.read_range(url, offset, limit))

    @abstractmethod
    def put_file(self, path: str | os.PathLike, url: str) -> None:
        """Store the local file `path` at `url`, replacing what was there as a whole.

        A reader never sees a half-written file: the local store writes a temporary file and
        renames it, GCS replaces an object atomically. `path` is opened without following a
        link in its last component (a task's output named by a link to a secret is not
        copied).

        Raises:
            FileNotFoundError: `path` is missing, a link, or not a regular file.
        """

    @abstractmethod
    def delete_tree(self, url: str) -> int:
        """Remove every file under the folder `url`; return how many were removed (0 if none)."""

    @abstractmethod
    def fetch_tree(self, url: str, dest: str | os.PathLike) -> int:
        """Copy every file under the folder `url` into the local folder `dest`, keeping the
        relative paths (the analyzer's scratch copy of an artifact); return how many.

        A missing folder copies nothing (0). Relative paths that would leave `dest` ('..') are
        refused.

        Raises:
            ValueError: `url` is not of this store's scheme, or names a path outside `dest`.
            OSError: a file cannot be read or written.
        """


def inside(dest: str | os.PathLike, rel: str) -> Path:
    """Return `dest/rel`, refusing a relative path that leaves `dest` (ValueError)."""
    try:
        safefs.name_parts(rel)
    except safefs.UnsafeName as exc:
        raise ValueError(f"{rel!r} is outside the destination folder {dest}: {exc}") from None
    root = Path(dest).resolve()
    target = (root / rel).resolve()
    if root != target and root not in target.parents:
        raise ValueError(f"{rel!r} is outside the destination folder {root}")
    return target


def copy_from_fd(fd: int, dest: str | os.PathLike) -> None:
    """Write the open file `fd` to the new file `dest` (refusing a link there)."""
    import shutil

    with os.fdopen(fd, "rb") as src, \
            os.fdopen(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o666), "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)


def check_offset(offset: int) -> None:
    if offset < 0:
        raise ValueError(f"offset must be >= 0; got {offset}.")


def check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be >= 1; got {limit}.")



def resume_copy(size: int | None, url: str, dest: str | os.PathLike, read_range,
                 chunk_bytes: int) -> int:
    """Append the bytes of `url` that `dest` lacks, `chunk_bytes` per ranged read.

    Args:
        size: the stored file's size in bytes, None when there is no file.
        url: the stored file.
        dest: the local file (its folder is created).
        read_range: `(url, offset, limit) -> bytes`.
        chunk_bytes: bytes per read.

    Returns the number of bytes transferred (0 when `dest` was complete).
    """
    if size is None:
        raise FileNotFoundError(f"no file at {url}")
    target = Path(dest)
    target.parent.mkdir(parents=True, exist_ok=True)
    have = target.stat().st_size if target.is_file() else 0
    if have > size:  # not a prefix of this file: fetch it again
        target.unlink()
        have = 0
    moved = 0
    with open(target, "ab") as fh:
        while have < size:
            data = read_range(url, have, min(chunk_bytes, size - have))
            if not data:
                break
            fh.write(data)
            have += len(data)
            moved += len(data)
    return moved
