"""The times file of a log (`core.processes.logtimes`): written from chunks cut anywhere, read
back as one time per line; and the local runner writing it from a real command's output."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from core.processes.logtimes import TimesIndex, TimesWriter, rfc3339, times_name

RUNNER = Path(__file__).resolve().parents[2] / "controllers/cluster_backends/local_runner.py"


def _index(path: Path) -> TimesIndex:
    data = path.read_bytes()
    return TimesIndex(lambda start, n: data[start:start + n], len(data))


def _line_starts(log: bytes) -> list[int]:
    return [0] + [i + 1 for i, byte in enumerate(log) if byte == 10 and i + 1 < len(log)] \
        if log else []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"\n")),
                          st.integers(0, 5)), max_size=12))
def test_each_line_gets_the_time_its_first_byte_was_read(tmp_path_factory, chunks):
    path = tmp_path_factory.mktemp("times") / "replica-0.times"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    writer, log, first_seen, clock = TimesWriter(fd), b"", {}, 1_000
    for data, step in chunks:
        clock += step
        for position in range(len(log), len(log) + len(data)):
            first_seen[position] = clock
        writer.feed(data, clock)
        log += data
    os.close(fd)
    index = _index(path)
    for start in _line_starts(log):
        assert index.time_of(start) == first_seen[start]
    # `since`: the first line read at or after a time, else the end of the log.
    for cutoff in range(1_000, clock + 2):
        expect = next((s for s in _line_starts(log) if first_seen[s] >= cutoff), len(log))
        assert index.first_line_since(cutoff, len(log)) == expect


def test_a_clock_stepped_back_repeats_the_last_time(tmp_path):
    path = tmp_path / "x.times"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    writer = TimesWriter(fd)
    writer.feed(b"a\n", 50)
    writer.feed(b"b\n", 20)
    os.close(fd)
    assert [_index(path).time_of(offset) for offset in (0, 2)] == [50, 50]


def test_names_and_format():
    assert times_name("logs/main/replica-3.log") == "logs/main/replica-3.times"
    assert rfc3339(1_767_225_600_000_000_001) == "2026-01-01T00:00:00.000000001Z"


def test_the_runner_records_when_each_line_of_the_command_was_read(tmp_path):
    log, times = tmp_path / "replica-0.log", tmp_path / "replica-0.times"
    before = time.time_ns()
    with open(log, "ab") as out:
        done = subprocess.run(
            [sys.executable, str(RUNNER), str(tmp_path / "started"), str(tmp_path / "exit"),
             str(times), "--", "sh", "-c",
             "echo one; printf 'two '; echo half >&2; printf 'three\\nfour'"],
            stdout=out, stderr=subprocess.STDOUT, timeout=60)
    after = time.time_ns()
    assert done.returncode == 0
    assert (tmp_path / "exit").read_text() == "0\n"
    data = log.read_bytes()
    assert data == b"one\ntwo half\nthree\nfour"  # stdout and stderr in one pipe, in order
    index = _index(times)
    stamps = [index.time_of(start) for start in _line_starts(data)]
    assert len(stamps) == 4 and all(before <= ns <= after for ns in stamps), stamps
    assert stamps == sorted(stamps)


def test_the_runner_without_a_times_file_writes_to_the_log_directly(tmp_path):
    log = tmp_path / "replica-0.log"
    with open(log, "ab") as out:
        done = subprocess.run(
            [sys.executable, str(RUNNER), str(tmp_path / "started"), str(tmp_path / "exit"),
             "--", "sh", "-c", "echo direct"], stdout=out, stderr=subprocess.STDOUT,
            timeout=60)
    assert done.returncode == 0 and log.read_bytes() == b"direct\n"
    assert not list(tmp_path.glob("*.times"))
