"""No gRPC reply passes the channel's message limit because of what a user sent.

An experiment near the input limits (docs/limits.md: 4 MiB of task-spec text, 1 MiB of
environment per role) is created by CreateExp, whose reply used to carry every spec twice (the
experiment's and each job's); with the larger limits of before, it failed with
RESOURCE_EXHAUSTED after the experiment was written, so a retry created it twice. The write replies now carry a summary,
and the lists page by bytes, never sending a row larger than a reply may carry. The text
controllers write into status columns is cut to its column, with a visible marker.
"""
from __future__ import annotations

import json
import random

import pytest

from core.grpc import paging
from core.grpc.channel import MAX_MESSAGE_BYTES
from experiments.models import Experiment
from experiments.tests.factories import make_exp
from falcon_proto.falcon.v1 import common_pb2, experiment_pb2, job_pb2
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    grpc_channel, grpc_server, stubs,
)
from accounts.tests.factories import UserFactory
from jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

SUMMARY_BYTES = 64 * 1024  # what a write reply may weigh here: ids, names, timestamps


ROLES = ("a", "b", "c", "d")
ENVS_PER_ROLE = 15  # 15 x 65,000 bytes: just under one process's 1 MiB of environment


def huge_spec() -> dict:
    return {role: {"command": "true",
                   "envs": {f"E{i:03d}": chr(65 + i % 26) * 65_000
                            for i in range(ENVS_PER_ROLE)}}
            for role in ROLES}


def test_create_exp_with_the_largest_task_spec_answers_once(stubs):
    UserFactory(email="carol@example.com")
    request = experiment_pb2.CreateExpReq(
        name="huge", cluster_name="local", exp_type="profiling",
        role_to_task_spec_json=json.dumps(huge_spec()), config="k: v\n",
        creator_email="carol@example.com")
    assert 3_800_000 < request.ByteSize() < MAX_MESSAGE_BYTES  # near the 4 MiB spec limit

    resp = stubs.exps.CreateExp(request, metadata=stubs.md, timeout=60)
    assert resp.changed and resp.id and (resp.exp.name, resp.exp.status) == ("huge", "Created")
    assert resp.exp.cluster_name == "local" and resp.exp.artifact.status == "Created"
    assert resp.ByteSize() < SUMMARY_BYTES
    assert Experiment.objects.count() == 1 and Job.objects.count() == len(ROLES)
    job_ids = list(Job.objects.order_by("pk").values_list("pk", flat=True))
    job_id = job_ids[0]

    # Every write reply about it stays small too.
    for call, req in [
        (stubs.jobs.UpdateJobStatus, job_pb2.UpdateJobStatusReq(id=job_id, status="Running")),
        (stubs.exps.UpdateExpStatus,
         experiment_pb2.UpdateExpStatusReq(id=resp.id, status="Running")),
        (stubs.exps.AbortExp, experiment_pb2.AbortExpReq(id=resp.id)),
    ]:
        assert call(req, metadata=stubs.md, timeout=60).ByteSize() < SUMMARY_BYTES

    # The lists carry it, each page under the limit, beside smaller experiments.
    small = make_exp(name="small")
    for call, field, expected in [
        (stubs.exps.ListExps, "exps", [resp.id, small.pk]),
        (stubs.jobs.ListJobs, "jobs", [*job_ids, Job.objects.get(experiment=small).pk]),
    ]:
        seen, token = [], ""
        while True:
            page = call(common_pb2.CommonListReq(page_token=token), metadata=stubs.md,
                        timeout=60)
            assert page.ByteSize() < MAX_MESSAGE_BYTES and not page.skipped
            seen.extend(getattr(page, field))
            token = page.next_page_token
            if not token:
                break
        assert [item.id for item in seen] == expected, field
    assert len(json.loads(seen[0].task_spec_json)["envs"]) == ENVS_PER_ROLE  # as stored


def test_a_row_larger_than_a_reply_is_skipped_not_sent(monkeypatch, caplog):
    exps = [make_exp(name=f"s{i}", config=("x" * 5000 if i == 1 else "a: 1\n"))
            for i in range(3)]
    monkeypatch.setattr(paging, "MAX_ITEM_BYTES", 4000)

    def to_message(exp):
        return common_pb2.CommonListReq(page_token=exp.config)  # any message carrying the config

    page = paging.keyset_page(Experiment.objects.all(), page_size=10, page_token="",
                              to_message=to_message, rpc="ListExps")
    assert [m.page_token for m in page.items] == ["a: 1\n", "a: 1\n"]
    assert [row.pk for row in page.skipped] == [exps[1].pk] and not page.next_page_token
    assert (f"ListExps: skipped Experiment {exps[1].pk}, which cannot be encoded: ValueError: "
            "its message is 500") in caplog.text
    assert "more than one reply may carry (4000 bytes)" in caplog.text


def test_the_largest_row_a_page_sends_leaves_room_for_the_rest_of_the_reply():
    # A page of MAX_PAGE_SIZE skipped rows with the largest ids, a token and one row of
    # MAX_ITEM_BYTES still fits the limit.
    reply = common_pb2.CommonListReq(page_token="k" * 40)
    worst_skipped = common_pb2.SkippedRow(id=2**63 - 1, exp_id=2**63 - 1).ByteSize() + 2
    assert (paging.MAX_ITEM_BYTES + 6 + reply.ByteSize()
            + paging.MAX_PAGE_SIZE * worst_skipped) < MAX_MESSAGE_BYTES


# -- controller-written text is cut to its column ------------------------------------------------

def test_truncate_keeps_what_fits_and_says_how_much_is_gone():
    from core.limits.text import truncate

    assert truncate("short", max_bytes=100, max_chars=10) == "short"
    text = "é" * 100  # 200 bytes
    cut = truncate(text, max_bytes=60)
    assert len(cut.encode()) <= 60 and cut.startswith("é") and "\ufffd" not in cut
    kept = cut.split("…")[0]
    assert cut == f"{kept}… [truncated {200 - len(kept.encode())} bytes]"
    cut = truncate("x" * 300, max_chars=255)
    assert len(cut) == 255 and cut.endswith(f"… [truncated {300 - cut.index('…')} bytes]")

    rng = random.Random(7)
    for _ in range(500):
        text = "".join(rng.choice("aé€😀") for _ in range(rng.randint(0, 80)))
        max_bytes, max_chars = rng.randint(30, 200), rng.choice([None, rng.randint(25, 80)])
        cut = truncate(text, max_bytes=max_bytes, max_chars=max_chars)
        assert len(cut.encode()) <= max_bytes and (max_chars is None or len(cut) <= max_chars)
        if cut != text:
            kept = cut[:cut.rindex("… [truncated ")]
            assert text.startswith(kept) and cut == (
                f"{kept}… [truncated {len(text.encode()) - len(kept.encode())} bytes]")
            # Nothing more would have fitted: one more character and its marker pass a limit.
            more = text[:len(kept) + 1]
            bigger = f"{more}… [truncated {len(text.encode()) - len(more.encode())} bytes]"
            assert len(bigger.encode()) > max_bytes or (
                max_chars is not None and len(bigger) > max_chars)


def test_controller_text_is_cut_to_its_column_with_a_marker(stubs):
    from artifacts.models import Artifact
    from core.domain.statemachine import MAX_STATUS_MESSAGE_BYTES
    from falcon_proto.falcon.v1 import artifact_pb2

    exp = make_exp(name="loud")
    job = Job.objects.get(experiment=exp)
    huge = "m" * (5 * 1024 * 1024)
    name_column = Job._meta.get_field("cluster_job_name").max_length
    resp = stubs.jobs.UpdateJobStatus(job_pb2.UpdateJobStatusReq(
        id=job.pk, status="Running", reason="R" * 1000, message=huge,
        cluster_job_name="n" * 1000), metadata=stubs.md, timeout=30)
    assert resp.ByteSize() < 2 * MAX_STATUS_MESSAGE_BYTES
    job.refresh_from_db()
    assert len(job.message.encode()) <= MAX_STATUS_MESSAGE_BYTES
    kept = job.message.index("…")
    assert job.message == "m" * kept + f"… [truncated {len(huge) - kept} bytes]"
    kept = job.reason.index("…")
    assert len(job.reason) == 255 and job.reason == "R" * kept + "… [truncated 768 bytes]"
    assert len(job.cluster_job_name) == name_column
    assert job.cluster_job_name.endswith(
        f"… [truncated {1000 - job.cluster_job_name.index('…')} bytes]")

    stubs.exps.UpdateExpStatus(experiment_pb2.UpdateExpStatusReq(
        id=exp.pk, status="Running", message=huge), metadata=stubs.md, timeout=30)
    artifact = Artifact.objects.get(experiment=exp)
    stubs.artifacts.UpdateArtifactStatus(artifact_pb2.UpdateArtifactStatusReq(
        id=artifact.pk, status="Failed", message=huge), metadata=stubs.md, timeout=30)
    for row in (Experiment.objects.get(pk=exp.pk), Artifact.objects.get(pk=artifact.pk)):
        assert len(row.message.encode()) <= MAX_STATUS_MESSAGE_BYTES
        assert row.message.endswith(" bytes]") and "… [truncated " in row.message

    # The many-rows path (AbortExp moves every job in one UPDATE) bounds its text too.
    Job.objects.filter(pk=job.pk).transition("Aborting", message=huge)
    assert len(Job.objects.get(pk=job.pk).message.encode()) <= MAX_STATUS_MESSAGE_BYTES
