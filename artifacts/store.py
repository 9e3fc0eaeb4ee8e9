"""Where experiments write their artifacts: a local directory (`file://`) or GCS (`gs://`).

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
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote, urlsplit

from core import safefs

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
            core.safefs.UnsafeName: `name` is absolute or has a `..` (or empty) component.
        """
        safefs.name_parts(name)
        return self.size_of(f"{root_url.rstrip('/')}/{name}")

    def read_in(self, root_url: str, name: str, offset: int = 0,
                limit: int | None = None) -> bytes:
        """`read_range` of the file `name` below the folder `root_url` (see `size_in`).

        Raises:
            core.safefs.UnsafeName: as `size_in`.
            FileNotFoundError: no regular file there (a link is none).
        """
        safefs.name_parts(name)
        return self.read_range(f"{root_url.rstrip('/')}/{name}", offset, limit)

    def open_in(self, root_url: str, name: str) -> OpenFile | None:
        """Open the file `name` below the folder `root_url` for ranged reads; None when there
        is none (see `size_in`).

        Raises:
            core.safefs.UnsafeName: as `size_in`.
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


def _inside(dest: str | os.PathLike, rel: str) -> Path:
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


def _copy_from_fd(fd: int, dest: str | os.PathLike) -> None:
    """Write the open file `fd` to the new file `dest` (refusing a link there)."""
    import shutil

    with os.fdopen(fd, "rb") as src, \
            os.fdopen(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o666), "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)


def _check_offset(offset: int) -> None:
    if offset < 0:
        raise ValueError(f"offset must be >= 0; got {offset}.")


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be >= 1; got {limit}.")


class LocalArtifactStore(ArtifactStore):
    """Artifacts in a local directory, addressed by `file://` URLs (the embedded default)."""

    scheme = "file"

    def local_path(self, url: str) -> Path:
        """Return the filesystem path of a `file://` URL (see module-level `local_path`)."""
        return local_path(url)

    def _walk(self, url: str):
        """Yield `(relative path, lstat result)` of the regular files under `url`.

        `core.safefs.walk_files`: no link is followed and links, FIFOs, devices and sockets
        are skipped, so listing, sizes, manifests and `has_files` never leave the folder (a
        link to `/` neither makes a path look full nor lists the disk). Lazy: `has_files`
        stops at the first file.
        """
        return safefs.walk_files(local_path(url))

    def has_files(self, url: str) -> bool:
        """Return True when a regular file exists anywhere below the directory of `url`."""
        return next(self._walk(url), None) is not None

    def find_first(self, url: str, accept: Callable[[str], bool]) -> str | None:
        """The first regular file below the directory of `url` that `accept` takes (see
        `ArtifactStore.find_first`); links are not followed."""
        return next((rel for rel, _st in self._walk(url) if accept(rel)), None)

    def list_page(self, url: str, *, after: str | None = None,
                  limit: int = DEFAULT_LIST_LIMIT) -> FilePage:
        """List one page of regular files below the directory of `url` (see
        `ArtifactStore.list_page`); files are collected and sorted by full relative name."""
        _check_limit(limit)
        # os.walk sorts per directory ('a/b' after 'a.txt' by walk, before it by name): the
        # names are sorted whole, and only the page's files are stat'ed.
        names = sorted((rel, st) for rel, st in self._walk(url)
                       if after is None or rel > after)
        rows: list[StoredFile] = []
        more = False
        for rel, st in names:
            if len(rows) >= limit:
                more = True
                break
            rows.append(StoredFile(rel, st.st_size,
                                   datetime.fromtimestamp(st.st_mtime, tz=timezone.utc),
                                   local_etag(st)))
        return FilePage(rows, rows[-1].name if more else None)

    def summarize(self, url: str) -> tuple[int, int]:
        """Return `(file count, total bytes)` below the directory of `url` in one walk."""
        count = total = 0
        for _rel, st in self._walk(url):
            total += st.st_size
            count += 1
        return count, total

    def download(self, url: str, dest: str | os.PathLike, *, chunk_bytes: int = 1 << 20) -> int:
        """Copy the file at `url` to `dest`, resuming (see `ArtifactStore.download`)."""
        return _resume_copy(self.size_of(url), url, dest, self.read_range, chunk_bytes)

    def list_files(self, url: str, limit: int = DEFAULT_LIST_LIMIT) -> list[tuple[str, int]]:
        """List regular files below the directory of `url` (see `ArtifactStore.list_files`)."""
        _check_limit(limit)
        out: list[tuple[str, int]] = []
        for rel, st in self._walk(url):
            out.append((rel, st.st_size))
            if len(out) >= limit:
                break
        return out


    def size_of(self, url: str) -> int | None:
        """Return the size of the regular file at `url` in bytes, None when there is none (or
        the last component is a link: `size_in` checks every component below a folder)."""
        try:
            fd = safefs.open_regular(local_path(url))
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def read_range(self, url: str, offset: int = 0, limit: int | None = None) -> bytes:
        """Read bytes of the file at `url` (see `ArtifactStore.read_range`); a link as its
        last component is no file."""
        _check_offset(offset)
        try:
            fd = safefs.open_regular(local_path(url))
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(f"no file at {url}") from None
        try:
            return safefs.read_at(fd, offset, limit)
        finally:
            os.close(fd)

    def size_in(self, root_url: str, name: str) -> int | None:
        """Size of the regular file `name` below the folder `root_url`, opened component by
        component with no link followed (`core.safefs.open_in`); None when there is none."""
        try:
            fd = safefs.open_in(local_path(root_url), name)
        except FileNotFoundError:
            return None
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def open_in(self, root_url: str, name: str) -> OpenFile | None:
        """Open the regular file `name` below `root_url` (`core.safefs.open_in`: no link
        followed in any component); reads come from that descriptor."""
        try:
            fd = safefs.open_in(local_path(root_url), name)
        except FileNotFoundError:
            return None
        st = os.fstat(fd)
        return OpenFile(st.st_size, lambda offset, limit: safefs.read_at(fd, offset, limit),
                        lambda: os.close(fd), local_etag(st))

    def read_in(self, root_url: str, name: str, offset: int = 0,
                limit: int | None = None) -> bytes:
        """Read the regular file `name` below the folder `root_url` from the descriptor
        `core.safefs.open_in` opened (no link followed in any component)."""
        _check_offset(offset)
        try:
            fd = safefs.open_in(local_path(root_url), name)
        except FileNotFoundError:
            raise FileNotFoundError(f"no file {name!r} under {root_url}") from None
        try:
            return safefs.read_at(fd, offset, limit)
        finally:
            os.close(fd)

    def put_file(self, path: str | os.PathLike, url: str) -> None:
        """Copy `path` to `url` through a temporary file and an atomic rename."""
        import shutil
        import tempfile

        target = local_path(url)
        target.parent.mkdir(parents=True, exist_ok=True)
        source = safefs.open_regular(path)
        try:
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        except BaseException:
            os.close(source)
            raise
        try:
            with os.fdopen(source, "rb") as src, os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def delete_tree(self, url: str) -> int:
        """Remove the folder `url` with everything in it; return the number of files removed."""
        import shutil

        root = local_path(url)
        if root.is_symlink() or not root.is_dir():
            # A folder replaced by a link: remove the link, never what it points to.
            if root.is_symlink():
                root.unlink(missing_ok=True)
            return 0
        count = sum(1 for _ in self._walk(url))
        # shutil.rmtree walks by descriptors (`_rmtree_safe_fd`) and unlinks a link it meets
        # instead of descending: a link to a file or a folder outside goes, its target stays.
        shutil.rmtree(root, ignore_errors=True)
        return count

    def fetch_tree(self, url: str, dest: str | os.PathLike) -> int:
        """Copy the regular files below the directory of `url` into `dest` (see
        `ArtifactStore.fetch_tree`)."""
        root = local_path(url)
        count = 0
        for rel, _st in self._walk(url):
            target = _inside(dest, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                # Read from a descriptor opened without following links: the name was a
                # regular file when walked, and may be a link by now.
                source = safefs.open_in(root, rel)
            except FileNotFoundError:
                continue
            _copy_from_fd(source, target)
            count += 1
        return count


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

        _check_limit(limit)
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
        return _resume_copy(self.size_of(url), url, dest, self.read_range, chunk_bytes)

    def list_files(self, url: str, limit: int = DEFAULT_LIST_LIMIT) -> list[tuple[str, int]]:
        """List objects under `url` (see `ArtifactStore.list_files`)."""
        _check_limit(limit)
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
            core.safefs.UnsafeName: as `size_in`.
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

        _check_offset(offset)
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
            target = _inside(dest, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            self.client.bucket(bucket).blob(prefix + rel).download_to_filename(
                str(target), timeout=self.timeout)
            count += 1
        return count


def _resume_copy(size: int | None, url: str, dest: str | os.PathLike, read_range,
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
