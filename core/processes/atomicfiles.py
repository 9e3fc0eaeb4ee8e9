"""State on disk shared between processes: whole-file writes and one lock per state folder.

The local cluster backend and the local analysis backend keep their runs' state in files that
a runner writes and a controller reads, possibly a restarted one (docs/cluster-behaviours.md,
CB-3). Readers must see the old file or the whole new one, and two controllers must not submit
or delete at the same time. No Django: `local_runner.py` runs as a bare script.
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` so readers see the old file or the whole new one, never a part."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@contextmanager
def locked(lock_file: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive `flock` on `lock_file` (created when missing), across processes."""
    with open(lock_file, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
