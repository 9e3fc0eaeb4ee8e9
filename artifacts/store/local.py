"""The `file://` store: artifacts in a local directory (the embedded default)."""
from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from artifacts.store.base import (
    ArtifactStore,
    DEFAULT_LIST_LIMIT,
    FilePage,
    OpenFile,
    StoredFile,
    check_limit,
    check_offset,
    copy_from_fd,
    inside,
    local_etag,
    local_path,
    resume_copy,
)
from core.processes import safefs


class LocalArtifactStore(ArtifactStore):
    """Artifacts in a local directory, addressed by `file://` URLs (the embedded default)."""

    scheme = "file"

    def local_path(self, url: str) -> Path:
        """Return the filesystem path of a `file://` URL (see module-level `local_path`)."""
        return local_path(url)

    def _walk(self, url: str):
        """Yield `(relative path, lstat result)` of the regular files under `url`.

        `core.processes.safefs.walk_files`: no link is followed and links, FIFOs, devices and sockets
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
        check_limit(limit)
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
        return resume_copy(self.size_of(url), url, dest, self.read_range, chunk_bytes)

    def list_files(self, url: str, limit: int = DEFAULT_LIST_LIMIT) -> list[tuple[str, int]]:
        """List regular files below the directory of `url` (see `ArtifactStore.list_files`)."""
        check_limit(limit)
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
        check_offset(offset)
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
        component with no link followed (`core.processes.safefs.open_in`); None when there is none."""
        try:
            fd = safefs.open_in(local_path(root_url), name)
        except FileNotFoundError:
            return None
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def open_in(self, root_url: str, name: str) -> OpenFile | None:
        """Open the regular file `name` below `root_url` (`core.processes.safefs.open_in`: no link
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
        `core.processes.safefs.open_in` opened (no link followed in any component)."""
        check_offset(offset)
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
            target = inside(dest, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                # Read from a descriptor opened without following links: the name was a
                # regular file when walked, and may be a link by now.
                source = safefs.open_in(root, rel)
            except FileNotFoundError:
                continue
            copy_from_fd(source, target)
            count += 1
        return count

