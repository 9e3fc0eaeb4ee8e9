"""Read and write files below one folder without ever leaving it, whatever links it holds.

A task writes what it likes into its artifact folder and its run folder, including symbolic
links (`ln -s /etc/passwd x`, `ln -s / root`), FIFOs and devices, and it may swap a directory
for a link while the server walks the folder. A path check (`Path.resolve()`, `is_file()`) is
worthless against that: it checks one path and then opens another. So every function here opens
each component relative to its parent's file descriptor with `O_NOFOLLOW` (a link is never
followed, not even to a place inside the folder), reads from the descriptor it opened, and
checks that descriptor with `fstat`:

- Walks skip links and anything that is not a regular file or a directory (FIFOs, devices,
  sockets); a directory deeper than `MAX_WALK_DEPTH` levels is skipped too, so a walk holds at
  most that many descriptors.
- Opening a named file refuses (`FileNotFoundError`, as if it did not exist) a link in any
  component and a final component that is not a regular file; `O_NONBLOCK` keeps a FIFO from
  blocking the open.
- A name with `..`, `.`, an empty component, a NUL or a leading `/` is refused (`UnsafeName`),
  as is one with a component over 255 bytes or over 4096 bytes in all (UTF-8).

The folder itself (the last component of `root`) is opened with `O_NOFOLLOW` too: a task that
replaces its own artifact folder by a link finds it treated as missing. The components above it
are the operator's (`FALCON_ARTIFACT_ROOT` may well be a link) and are followed.

Django-free: the CLI, the controllers and the API server use it.
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The longest name of one file or folder, and of a whole path, in bytes (Linux NAME_MAX and
# PATH_MAX; ext4, XFS and GCS-fuse alike). A longer name cannot exist: it is refused as unsafe.
NAME_MAX_BYTES = 255
PATH_MAX_BYTES = 4096
MAX_WALK_DEPTH = 64  # directory levels below the root a walk descends; deeper ones are skipped
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class UnsafeName(ValueError):
    """A relative name that could leave its folder (absolute, `..`, `.`, empty part, NUL) or
    that no file can have (a component over 255 bytes, over 4096 bytes in all)."""


class NameTooLong(UnsafeName):
    """A name no file can have: a component over `NAME_MAX_BYTES` or over `PATH_MAX_BYTES` in
    all. A request for it is answered as for a missing file (404), naming the limit."""


# What a request for a stored file is told when the system refuses to open or read it. A
# missing or odd entry is "no such file" (a link, a FIFO, a folder where a file was asked);
# one the server may not read says so; anything else (EIO, a full descriptor table) is a
# server error and propagates.
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENXIO})
_DENIED = frozenset({errno.EACCES, errno.EPERM})


@contextmanager
def request_errors(*, field: str, what: str) -> Iterator[None]:
    """Turn the errors of opening or reading a stored file for a request into domain errors.

    The one mapping of the file system's refusals on request paths (the artifact listing and
    file download, a replica's log): a request never reaches a 500 through them.

    Args:
        field: the request field that named the file (`name`, `role`), for a 400.
        what: the file for the message, e.g. "'main/x' under the artifact path of experiment 3".

    Raises:
        core.errors.ValidationFailed: an `UnsafeName` (`..`, absolute, ...), under `field`.
        core.errors.NotFound: no such file (ENOENT, ENOTDIR, EISDIR, ELOOP, ENXIO), a name no
            file can have (`NameTooLong`, ENAMETOOLONG: the message names the limit), or the
            server may not read it (EACCES, EPERM), said as such.
    """
    from core.errors import NotFound, ValidationFailed

    try:
        yield
    except NameTooLong as exc:
        raise NotFound(f"No file {what}: {exc}.") from None
    except UnsafeName as exc:
        raise ValidationFailed({field: [str(exc)]}) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise NotFound(f"No file {what}: the file system refuses the name as too long; a "
                           f"file or folder name is at most {NAME_MAX_BYTES} bytes and a path "
                           f"{PATH_MAX_BYTES} (UTF-8).") from None
        if exc.errno in _ABSENT:
            raise NotFound(f"No file {what}.") from None
        if exc.errno in _DENIED:
            raise NotFound(f"The file {what} cannot be read by the API server (permission "
                           "denied); an operator must make it readable.") from None
        raise


def name_parts(name: str) -> list[str]:
    """Split a relative POSIX name (`main/trace.json`) into its components.

    Raises:
        UnsafeName: the name is empty, absolute, holds a NUL, has an empty, `.` or `..`
            component, a component over `NAME_MAX_BYTES` or is over `PATH_MAX_BYTES` in all
            (the message names the problem and the limit).
    """
    if not name:
        raise UnsafeName("the name is empty")
    if "\x00" in name:
        raise UnsafeName(f"{name[:200]!r} holds a NUL character")
    if name.startswith("/"):
        raise UnsafeName(f"{name[:200]!r} is absolute; give a path relative to the folder")
    parts = name.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise UnsafeName(f"{name[:200]!r} has a {part or 'empty'!r} component; give a plain "
                             "relative path such as main/trace.json")
        # Checked here, before any system call: the file system's ENAMETOOLONG was a 500.
        if (size := _bytes(part)) > NAME_MAX_BYTES:
            raise NameTooLong(f"{name[:200]!r} has a component of {size} bytes; a file or "
                             f"folder name is at most {NAME_MAX_BYTES} bytes (UTF-8), so no "
                             "such file can exist")
    if (size := _bytes(name)) > PATH_MAX_BYTES:
        raise NameTooLong(f"{name[:200]!r} is {size} bytes; a path is at most {PATH_MAX_BYTES} "
                         "bytes (UTF-8)")
    return parts


def _bytes(text: str) -> int:
    """The length of `text` as the file system sees it (UTF-8)."""
    return len(text.encode("utf-8", "surrogatepass"))


def _not_found(what: str) -> FileNotFoundError:
    return FileNotFoundError(2, "No such regular file (links are not followed)", what)


def open_root(root: str | os.PathLike) -> int:
    """Open the folder `root` as a directory descriptor, its last component without following
    a link.

    Raises:
        FileNotFoundError: `root` is missing, not a directory, or a link.
    """
    root = Path(root)
    parent = os.open(root.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return os.open(root.name or ".", _DIR_FLAGS, dir_fd=parent)
    except (NotADirectoryError, OSError) as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno in (20, 40):  # ENOTDIR, ELOOP
            raise _not_found(str(root)) from None
        raise
    finally:
        os.close(parent)


@contextmanager
def opened_root(root: str | os.PathLike) -> Iterator[int]:
    """`open_root` as a context manager that closes the descriptor."""
    fd = open_root(root)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_dir_below(dir_fd: int, parts: list[str], *, create: bool = False) -> int:
    """Open the directory `parts` below `dir_fd`, one component at a time with `O_NOFOLLOW`
    (creating missing ones with `create`); the caller closes the result."""
    fd = os.dup(dir_fd)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (2, 20, 40):  # ENOENT, ENOTDIR, ELOOP: a link or a file
                    raise _not_found(part) from None
                raise
            os.close(fd)
            fd = sub
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_regular_at(dir_fd: int, name: str) -> int:
    """Open `name` (one component) below `dir_fd` for reading when it is a regular file.

    Raises:
        FileNotFoundError: missing, a link, or not a regular file (a FIFO, a device, a folder).
    """
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (2, 6, 20, 40, 21):  # ENOENT, ENXIO, ENOTDIR, ELOOP, EISDIR
            raise _not_found(name) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_found(name)
    return fd


def open_in(root: str | os.PathLike, name: str) -> int:
    """Open the regular file `name` (relative, `/`-separated) below the folder `root` for
    reading, with no link followed in any component; the caller closes the descriptor.

    Raises:
        UnsafeName: `name` could leave `root` (see `name_parts`).
        FileNotFoundError: no regular file there without following a link.
    """
    parts = name_parts(name)
    with opened_root(root) as root_fd:
        dir_fd = _open_dir_below(root_fd, parts[:-1])
        try:
            return open_regular_at(dir_fd, parts[-1])
        finally:
            os.close(dir_fd)


def open_regular(path: str | os.PathLike) -> int:
    """Open the regular file `path` for reading without following a link in its LAST
    component (the folders above it are the caller's); the caller closes the descriptor.

    Raises:
        FileNotFoundError: missing, a link, or not a regular file.
    """
    path = Path(path)
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_regular_at(parent, path.name)
    finally:
        os.close(parent)


def read_at(fd: int, offset: int, limit: int | None) -> bytes:
    """Read up to `limit` bytes (None: to the end) from `offset` of an open file."""
    if limit is None:
        limit = max(os.fstat(fd).st_size - offset, 0)
    chunks, have = [], 0
    while have < limit:
        data = os.pread(fd, min(limit - have, 1 << 20), offset + have)
        if not data:
            break
        chunks.append(data)
        have += len(data)
    return b"".join(chunks)


def open_for_append_in(root: str | os.PathLike, name: str) -> int:
    """Open (creating it and its folders) the file `name` below `root` for appending, with no
    link followed: a link planted at the name or in a folder on the way is refused, never
    written through. The caller closes the descriptor.

    Raises:
        UnsafeName: `name` could leave `root`.
        FileNotFoundError: a component is a link or not a directory, or the file is a link or
            not a regular file.
    """
    parts = name_parts(name)
    with opened_root(root) as root_fd:
        dir_fd = _open_dir_below(root_fd, parts[:-1], create=True)
        try:
            try:
                fd = os.open(parts[-1], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                             | os.O_CLOEXEC | os.O_NONBLOCK, 0o666, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (6, 20, 40, 21):  # ENXIO, ENOTDIR, ELOOP, EISDIR
                    raise _not_found(name) from None
                raise
        finally:
            os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_found(name)
    return fd


def remove_empty_in(root: str | os.PathLike, name: str) -> bool:
    """Remove the file `name` below `root` if it is an empty regular file, with no link
    followed on the way (a link at the name is left alone). Returns True when removed.

    Raises:
        UnsafeName: `name` could leave `root`.
    """
    parts = name_parts(name)
    try:
        with opened_root(root) as root_fd:
            dir_fd = _open_dir_below(root_fd, parts[:-1])
            try:
                st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode) or st.st_size:
                    return False
                os.unlink(parts[-1], dir_fd=dir_fd)
                return True
            finally:
                os.close(dir_fd)
    except FileNotFoundError:
        return False


def _list_dir(fd: int) -> tuple[list[tuple[str, os.stat_result]], list[str]]:
    """Return the regular files (name, lstat) and the directories (names) of an open folder,
    sorted by name; links and special files are left out. One step of `walk_files`."""
    files: list[tuple[str, os.stat_result]] = []
    dirs: list[str] = []
    with os.scandir(fd) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed while we walked
        if stat.S_ISREG(st.st_mode):
            files.append((name, st))
        elif stat.S_ISDIR(st.st_mode):
            dirs.append(name)
    return files, dirs


def walk_files(root: str | os.PathLike, *,
               max_depth: int = MAX_WALK_DEPTH) -> Iterator[tuple[str, os.stat_result]]:
    """Yield `(relative POSIX name, lstat result)` of every regular file below `root`.

    Depth first, each folder's entries sorted by name (not the whole names: callers that page
    sort them). Lazy, so a caller that wants one file stops after one. Links and special
    files are skipped, and a folder swapped for a link after it was listed is skipped too: it
    is opened with `O_NOFOLLOW` relative to its parent. A missing `root` yields nothing.
    """
    try:
        root_fd = open_root(root)
    except FileNotFoundError:
        return
    frames: list[tuple[str, int, Iterator[str]]] = [("", root_fd, iter(()))]
    try:
        files, dirs = _list_dir(root_fd)
        frames[0] = ("", root_fd, iter(dirs))
        for name, st in files:
            yield name, st
        while frames:
            prefix, fd, pending = frames[-1]
            sub_name = next(pending, None)
            if sub_name is None:
                os.close(fd)
                frames.pop()
                continue
            try:
                sub = os.open(sub_name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # gone, or now a link or a file: not followed
            sub_prefix = f"{prefix}{sub_name}/"
            try:
                files, dirs = _list_dir(sub)
            except OSError:
                os.close(sub)
                continue
            if len(frames) < max_depth:
                frames.append((sub_prefix, sub, iter(dirs)))
            else:
                os.close(sub)
            for name, st in files:
                yield sub_prefix + name, st
    finally:
        for _prefix, fd, _pending in frames:
            os.close(fd)
