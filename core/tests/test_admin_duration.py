"""The admin's duration text: whole seconds and up, milliseconds under a second (a benchmark
job of 12 ms is not shown as `0s`), `-` before the start."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from core.admin import duration

START = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("elapsed,text", [
    (timedelta(0), "0 ms"),
    (timedelta(milliseconds=12), "12 ms"),
    (timedelta(milliseconds=999.4), "999 ms"),
    (timedelta(seconds=1), "1s"),
    (timedelta(seconds=75), "1m 15s"),
    (timedelta(hours=1, minutes=2, seconds=3), "1h 02m 03s"),
])
def test_a_duration_reads_at_the_scale_of_the_run(elapsed, text):
    assert duration(START, START + elapsed) == text


def test_a_run_still_going_is_measured_up_to_now_and_one_not_started_is_a_dash():
    assert duration(START, None, now=START + timedelta(seconds=5)) == "5s"
    assert duration(None, None) == "-"
    assert duration(START, START - timedelta(seconds=3)) == "0s"  # clock skew: never negative
