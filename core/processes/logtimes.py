"""When each line of a replica's log was produced: the log's times file.

A log (`replica-<i>.log`) keeps the output as written, bytes only. Beside it, `replica-<i>.times`
records when its lines were produced, as a container runtime does (`kubectl logs
--timestamps`): a sequence of fixed-size records `(byte offset, time)`, 16 bytes each (two
little-endian unsigned 64-bit integers: the offset in the log of a line's first byte, the time
in nanoseconds since the Unix epoch, UTC). Every record's offset is a line start; a line's time
is the time of the last record at or before its first byte, so one record may stand for several
lines read together. Offsets increase and times never decrease (a clock stepped back repeats
the last time), so both can be searched by bisection.

The time of a line is when its first byte was read from the task's output: by the local
runner from the command's pipe (`controllers/cluster_backends/local_runner.py`), by the
container runtime on Kubernetes (the Pod log API's `timestamps=true`). That is when the task
wrote it out: a task that buffers its output (Python's stdout into a pipe) shows the time of
the flush.

Standard library only: the local runner imports it.
"""
from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable

RECORD = struct.Struct("<QQ")
WHOLE_READ = 1 << 20  # a times file up to this size is read at once; a larger one bisected


def times_name(log_name: str) -> str:
    """The times file of a log: `replica-0.log` -> `replica-0.times` (any folder kept)."""
    return (log_name[:-4] if log_name.endswith(".log") else log_name) + ".times"


def rfc3339(ns: int) -> str:
    """`2026-12-03T08:15:44.123456789Z`: UTC, nanoseconds, a fixed width (as `docker logs -t`)."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{fraction:09d}Z"


class TimesWriter:
    """Append the records of a growing log to its times file.

    Args:
        fd: the times file, open for appending.
        offset: the log's size when writing starts (the offset of the next byte fed).
    """

    def __init__(self, fd: int, offset: int = 0):
        self.fd, self.offset, self.line_start, self.last = fd, offset, True, 0

    def feed(self, data: bytes, ns: int) -> None:
        """Record `data`, the next bytes of the log, read at `ns`: one record for the first line
        that starts in it, if any."""
        if not data:
            return
        if self.line_start:
            start = 0
        else:
            newline = data.find(b"\n")
            start = newline + 1 if 0 <= newline < len(data) - 1 else None
        if start is not None:
            self.last = max(self.last, ns)
            os.write(self.fd, RECORD.pack(self.offset + start, self.last))
        self.skip(data)

    def skip(self, data: bytes) -> None:
        """Account for `data`, the next bytes of the log, without a time of their own (their
        lines take the time of the last record before them)."""
        self.offset += len(data)
        self.line_start = data.endswith(b"\n")


class TimesIndex:
    """Search a times file read through `read(start, length) -> bytes` of `size` bytes."""

    def __init__(self, read: Callable[[int, int], bytes], size: int):
        self.count = size // RECORD.size
        if size <= WHOLE_READ:
            data = read(0, self.count * RECORD.size)
            self.count = len(data) // RECORD.size
            self._read = lambda start, length: data[start:start + length]
        else:
            self._read = read

    def record(self, index: int) -> tuple[int, int]:
        return RECORD.unpack(self._read(index * RECORD.size, RECORD.size))

    def _bisect(self, key: Callable[[tuple[int, int]], bool]) -> int:
        """The first record index for which `key` holds (it is monotone), or `count`."""
        low, high = 0, self.count
        while low < high:
            middle = (low + high) // 2
            if key(self.record(middle)):
                high = middle
            else:
                low = middle + 1
        return low

    def time_of(self, offset: int) -> int | None:
        """The time (ns) of the line starting at `offset`, None when no record covers it."""
        index = self._bisect(lambda record: record[0] > offset) - 1
        return self.record(index)[1] if index >= 0 else None

    def first_line_since(self, ns: int, size: int) -> int:
        """The offset of the first line produced at or after `ns`; `size` (the log's end)
        when there is none."""
        index = self._bisect(lambda record: record[1] >= ns)
        return min(self.record(index)[0], size) if index < self.count else size
