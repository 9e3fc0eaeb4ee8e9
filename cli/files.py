"""Reading the local files a command sends (`--config`, `--role-to-task-spec`), with a size cap.

A file is sized before it is read, and only a regular file can be: a character device
(`/dev/zero`), a FIFO or a socket is refused, since reading it could block or never end. The read
itself stops after `limit + 1` bytes, so a file that grows meanwhile cannot exhaust memory either.
Every problem is a `CLIError(USAGE)` naming the file: nothing is sent.
"""
from __future__ import annotations

import os
import stat

from .errors import CLIError
from .exit_codes import ExitCode

CHUNK = 64 * 1024  # bytes per read() call


def _kind(mode: int) -> str:
    """Name a non-regular file type for a message."""
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _check(mode: int, size: int, path: str, what: str, limit: int, why: str) -> None:
    if stat.S_ISDIR(mode):
        raise CLIError(f"{what} {path}: is a directory, not a file", ExitCode.USAGE)
    if not stat.S_ISREG(mode):
        raise CLIError(f"{what} {path} is {_kind(mode)}, whose size cannot be known before "
                       "reading it; save the content to a regular file and pass that",
                       ExitCode.USAGE)
    if size > limit:
        raise too_large(path, what, limit, why, size=size)


def too_large(path: str, what: str, limit: int, why: str, *, size: int | None = None) -> CLIError:
    """The error for a file over `limit` bytes (`size` when known)."""
    how_big = f"is {size:,} bytes" if size is not None else f"is over {limit:,} bytes"
    return CLIError(f"{what} {path} {how_big}; {why} at most {limit:,} bytes", ExitCode.USAGE)


def read_limited(path: str, what: str, limit: int, why: str) -> bytes:
    """Return the bytes of the regular file `path`, refusing it when it holds more than `limit`.

    Args:
        path: the file as the user gave it.
        what: its name in messages, e.g. `config file`.
        limit: the most bytes accepted.
        why: the limit's reason, completed by "at most N bytes", e.g. `the server accepts a
            config of`.

    Raises:
        CLIError(USAGE): missing, a directory, not a regular file (a device, a FIFO), over
            `limit` (by `os.stat` before reading, or while reading when it grows), unreadable.
    """
    try:
        # stat() first: a FIFO or a device is refused without being opened (opening a FIFO
        # waits for a writer; opening some devices has effects).
        before = os.stat(path)
        _check(before.st_mode, before.st_size, path, what, limit, why)
        # O_NONBLOCK: should the path turn into a FIFO after the stat, open() does not wait.
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise CLIError(f"{what} {path}: no such file", ExitCode.USAGE) from None
    except IsADirectoryError:
        raise CLIError(f"{what} {path}: is a directory, not a file", ExitCode.USAGE) from None
    except OSError as exc:
        raise CLIError(f"{what} {path}: cannot be read ({exc.strerror})", ExitCode.USAGE) from None
    try:
        opened = os.fstat(fd)  # the file actually opened, whatever happened to the path
        _check(opened.st_mode, opened.st_size, path, what, limit, why)
        chunks: list[bytes] = []
        remaining = limit + 1  # one byte more than allowed tells a file that grew
        while remaining > 0:
            chunk = os.read(fd, min(CHUNK, remaining))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        raise CLIError(f"{what} {path}: cannot be read ({exc.strerror})", ExitCode.USAGE) from None
    finally:
        os.close(fd)
    if remaining <= 0:
        raise too_large(path, what, limit, why)
    return b"".join(chunks)


def decode_utf8(data: bytes, path: str, what: str) -> str:
    """Decode a file's bytes as UTF-8, or refuse it naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CLIError(f"{what} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                       f"offset {exc.start}); save it as UTF-8", ExitCode.USAGE) from None
