"""The experiment's admin page: labels (shown, changed through the service, filtered in the
list), the last lines of each replica's log, artifact downloads only for the admin's users,
and every user text escaped."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from accounts.models import User
from artifacts.store import replica_log_url, store_for
from experiments.admin_page import LOG_TAIL_LINES
from experiments.models import Experiment
from experiments.services import exp_update_labels
from experiments.tests.factories import make_exp

pytestmark = pytest.mark.django_db

HOSTILE = '"><svg onload=alert(1)><script>alert(2)</script>'


def put(url: str, data: bytes, tmp_path: Path) -> None:
    src = tmp_path / f"src-{uuid.uuid4().hex}"
    src.write_bytes(data)
    store_for(url).put_file(src, url)


@pytest.fixture
def ops(client):
    admin = User.objects.create_superuser("ops@example.com", password="pw-for-tests")
    client.force_login(admin)
    return client


def page(client, exp) -> str:
    res = client.get(f"/admin/experiments/experiment/{exp.pk}/change/")
    assert res.status_code == 200
    return res.content.decode()


def test_labels_are_shown_changed_through_the_service_and_filter_the_list(ops, user):
    exp = make_exp(creator=user, name="labelled")
    other = make_exp(creator=user, name="unlabelled")
    exp_update_labels(exp_id=exp.pk, actor=user, set_labels={"team": "infra", "stale": "yes"})
    assert '<span class="falcon-label">team=infra</span>' in page(ops, exp)

    form = ops.get(f"/admin/experiments/experiment/{exp.pk}/labels/")
    assert form.status_code == 200 and "team=infra" in form.content.decode()
    res = ops.post(f"/admin/experiments/experiment/{exp.pk}/labels/",
                   {"changes": "baseline=true stale-"})
    assert res.status_code == 302 and res["Location"].endswith(f"/{exp.pk}/change/")
    assert Experiment.objects.get(pk=exp.pk).labels == {"baseline": "true", "team": "infra"}
    history = ops.get(f"/admin/experiments/experiment/{exp.pk}/change/").content.decode()
    assert "Labels of experiment" in history and "baseline=true, team=infra" in history

    listing = ops.get("/admin/experiments/experiment/?label=baseline%3Dtrue").content.decode()
    assert "labelled" in listing and "unlabelled" not in listing
    sidebar = ops.get("/admin/experiments/experiment/").content.decode()
    assert "?label=baseline%3Dtrue" in sidebar  # offered in the filter sidebar
    assert other.pk  # (listed without the filter)


def test_a_bad_label_is_refused_with_the_rule_and_escaped(ops, user):
    exp = make_exp(creator=user)
    res = ops.post(f"/admin/experiments/experiment/{exp.pk}/labels/",
                   {"changes": f"team={HOSTILE}"})
    text = res.content.decode()
    assert res.status_code == 200 and "errorlist" in text
    assert "at most 63 characters" in text  # the label rule, named
    assert "<script>alert(2)" not in text and "<svg onload" not in text
    assert "&lt;script&gt;alert(2)" in text
    res = ops.post(f"/admin/experiments/experiment/{exp.pk}/labels/", {"changes": "team"})
    assert "neither key=value" in res.content.decode()
    assert Experiment.objects.get(pk=exp.pk).labels == {}


def test_a_non_staff_user_may_not_change_labels(client, user):
    exp = make_exp(creator=user)
    plain = User.objects.create_user("plain@example.com", password="pw")
    client.force_login(plain)
    res = client.post(f"/admin/experiments/experiment/{exp.pk}/labels/", {"changes": "a=b"})
    assert res.status_code == 302 and "/admin/login/" in res["Location"]
    assert Experiment.objects.get(pk=exp.pk).labels == {}


def test_last_lines_of_each_replica_escaped_and_cut(ops, user, tmp_path):
    exp = make_exp(creator=user, roles=("main", "worker"), replica=2)
    lines = [f"line {i}" for i in range(100)] + [HOSTILE, "y" * 5000]
    put(replica_log_url(exp.artifact_path, "main", 0), "\n".join(lines).encode() + b"\n",
        tmp_path)
    put(replica_log_url(exp.artifact_path, "worker", 1), b"worker says hi\n", tmp_path)
    text = page(ops, exp)
    main0 = text.split('data-role="main" data-replica="0"')[1].split("</div>")[0]
    shown = [line for line in main0.split("<pre", 1)[1].split(">", 1)[1].split("</pre>")[0]
             .splitlines()]
    assert len(shown) == LOG_TAIL_LINES
    assert shown[0] == f"line {102 - LOG_TAIL_LINES}"
    assert shown[-2] == "&quot;&gt;&lt;svg onload=alert(1)&gt;&lt;script&gt;alert(2)&lt;/script&gt;"
    assert shown[-1].endswith("…") and len(shown[-1]) < 500
    assert "<script>alert(2)" not in text
    assert "worker says hi" in text.split('data-role="worker" data-replica="1"')[1]
    # A replica without a log says why, in place of its lines.
    assert "No log for replica 1 of role &#x27;main&#x27;" in text


def test_artifact_files_download_for_staff_only(ops, client, user, tmp_path, settings):
    exp = make_exp(creator=user)
    put(f"{exp.artifact_path}/main/result.json", b'{"gflops": 12}', tmp_path)
    put(f"{exp.artifact_path}/main/{HOSTILE.replace('/', '_')}.txt", b"x", tmp_path)
    text = page(ops, exp)
    link = f"/admin/experiments/experiment/{exp.pk}/file?name=main%2Fresult.json"
    assert f'href="{link}"' in text
    assert "<svg onload" not in text
    res = ops.get(link)
    assert res.status_code == 200 and b"".join(res.streaming_content) == b'{"gflops": 12}'
    assert res["ETag"]
    part = ops.get(link, HTTP_RANGE="bytes=2-")
    assert part.status_code == 206 and b"".join(part.streaming_content) == b'gflops": 12}'
    assert ops.get(f"/admin/experiments/experiment/{exp.pk}/file?name=../x").status_code == 400
    assert ops.get(f"/admin/experiments/experiment/{exp.pk}/file?name=main/no").status_code \
        == 404

    # Anyone else: the admin's login page, never the bytes.
    ops.logout()
    assert ops.get(link).status_code == 302
    plain = User.objects.create_user("plain@example.com", password="pw")
    client.force_login(plain)
    res = client.get(link)
    assert res.status_code == 302 and "/admin/login/" in res["Location"]
    # Why the admin mounts the view itself: in the cloudflare mode the API's own route takes
    # tokens only, never the admin's session.
    settings.FALCON_AUTH_MODE = "cloudflare"
    client.force_login(User.objects.get(email="ops@example.com"))
    assert client.get(f"/api/v1/exps/{exp.pk}/artifacts/file?name=main/result.json") \
        .status_code == 401
