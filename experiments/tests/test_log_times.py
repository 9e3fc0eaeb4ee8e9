"""`GET /api/v1/exps/{id}/logs?timestamps=true&since_seconds=N`: each line's time from the
log's times file (`core.processes.logtimes`), as `kubectl logs --timestamps --since`."""
from __future__ import annotations

import os
import time

import pytest

from artifacts.store import replica_log_url
from core.processes.logtimes import RECORD, rfc3339, times_name
from experiments.tests.factories import make_exp
from experiments.tests.test_exp_files import alice, put  # noqa: F401 (fixture)

EXPS = "/api/v1/exps"
HOUR = 3600 * 10**9
LOG = b"old 1\nold 2\nnew 1\nnew 2\n"


def stored_log(exp, tmp_path, *, times: list[tuple[int, int]] | None, data: bytes = LOG):
    """Store `data` as replica 0's log of role main, with a times file of `times` records."""
    url = replica_log_url(exp.artifact_path, "main", 0)
    if times is not None:
        put(times_name(url), b"".join(RECORD.pack(*record) for record in times), tmp_path)
    put(url, data, tmp_path)


@pytest.fixture
def exp_with_times(alice, tmp_path):
    """Two lines produced two hours ago, two a second ago (the first two in one read)."""
    now = time.time_ns()
    exp = make_exp(creator=alice, name="timed")
    stored_log(exp, tmp_path, times=[(0, now - 2 * HOUR), (12, now - 10**9),
                                     (18, now - 10**9 + 5)])
    return exp, now


def test_timestamps_prefix_each_line_and_keep_the_offsets(auth_api, exp_with_times):
    exp, now = exp_with_times
    body = auth_api.get(f"{EXPS}/{exp.pk}/logs", {"timestamps": "true"}).json()
    old, new = rfc3339(now - 2 * HOUR), rfc3339(now - 10**9)
    assert body["data"] == (f"{old} old 1\n{old} old 2\n{new} new 1\n"
                            f"{rfc3339(now - 10**9 + 5)} new 2\n")
    assert (body["offset"], body["next_offset"], body["has_times"]) == (0, len(LOG), True)
    # A page starting inside a line gives that part without a time, then whole lines.
    body = auth_api.get(f"{EXPS}/{exp.pk}/logs", {"timestamps": "true", "offset": 3,
                                                  "limit": 9}).json()
    assert body["data"] == f" 1\n{old} old 2\n" and body["next_offset"] == 12
    assert "has_times" not in auth_api.get(f"{EXPS}/{exp.pk}/logs").json()


def test_since_seconds_starts_at_the_first_line_that_recent(auth_api, exp_with_times):
    exp, _ = exp_with_times
    url = f"{EXPS}/{exp.pk}/logs"
    body = auth_api.get(url, {"since_seconds": 60}).json()
    assert (body["data"], body["offset"], body["next_offset"]) == ("new 1\nnew 2\n", 12, 24)
    assert auth_api.get(url, {"since_seconds": 3 * 3600}).json()["data"] == LOG.decode()
    body = auth_api.get(url, {"since_seconds": 60, "tail": 5}).json()
    assert body["data"] == "new 1\nnew 2\n"  # the tail counts among the recent lines only
    assert auth_api.get(url, {"since_seconds": 60, "tail": 1}).json()["data"] == "new 2\n"
    # Following from an offset past the start keeps it.
    assert auth_api.get(url, {"since_seconds": 3 * 3600, "offset": 18}).json()["data"] == \
        "new 2\n"


@pytest.mark.parametrize("query,field", [
    ({"timestamps": "yes"}, "timestamps"), ({"timestamps": ""}, "timestamps"),
    ({"since_seconds": "0"}, "since_seconds"), ({"since_seconds": "-5"}, "since_seconds"),
    ({"since_seconds": "5m"}, "since_seconds"), ({"since_seconds": ""}, "since_seconds"),
    ({"since_seconds": str(10**12)}, "since_seconds")])
def test_bad_values_are_a_400_naming_the_field(auth_api, exp_with_times, query, field):
    exp, _ = exp_with_times
    answer = auth_api.get(f"{EXPS}/{exp.pk}/logs", query)
    assert answer.status_code == 400, answer.content
    assert field in answer.content.decode()


def test_a_log_kept_without_times(auth_api, alice, tmp_path):
    exp = make_exp(creator=alice, name="untimed")
    stored_log(exp, tmp_path, times=None)
    url = f"{EXPS}/{exp.pk}/logs"
    body = auth_api.get(url, {"timestamps": "true"}).json()
    assert (body["data"], body["has_times"]) == (LOG.decode(), False)
    answer = auth_api.get(url, {"since_seconds": 60})
    assert answer.status_code == 409
    assert "since_seconds" in answer.content.decode()
    assert "without line times" in answer.content.decode()


def test_a_live_local_log_is_read_with_its_times(alice):
    """A running local replica's log and times are read from its run folder."""
    from experiments.files import exp_log_chunk, local_state_dir
    from jobs.models import Job
    from jobs.services import job_update_status

    exp = make_exp(creator=alice, name="live")
    job = Job.objects.get(experiment=exp)
    job_update_status(job_id=job.pk, status="Pending", cluster_job_name="live-run")
    folder = local_state_dir(job.cluster_name) / "live-run"
    folder.mkdir(parents=True)
    (folder / "replica-0.log").write_bytes(b"a\nb\n")
    now = time.time_ns()
    (folder / "replica-0.times").write_bytes(RECORD.pack(0, now - HOUR) + RECORD.pack(2, now))
    chunk = exp_log_chunk(exp=exp, since_ns=now - 10**9, timestamps=True)
    assert (chunk.source, chunk.data) == ("run", f"{rfc3339(now)} b\n".encode())
    os.unlink(folder / "replica-0.times")
    chunk = exp_log_chunk(exp=exp, timestamps=True)
    assert (chunk.data, chunk.has_times) == (b"a\nb\n", False)


def test_the_schema_documents_both_parameters():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    operation = schema["paths"]["/api/v1/exps/{exp_id}/logs"]["get"]
    params = {p["name"]: p for p in operation["parameters"]}
    assert params["since_seconds"]["schema"]["minimum"] == 1
    assert "kubectl" in params["timestamps"]["description"]
    assert "409" in operation["responses"]
