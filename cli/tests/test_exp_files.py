"""`falcon exp logs`, `falcon exp artifacts [--download]` and `exp delete --purge` against the
live server, with a real local-backend process and the local artifact store."""
from __future__ import annotations

import json
import uuid

import pytest

from artifacts.services import artifact_update_status
from artifacts.store import replica_log_url, store_for
from cli.exit_codes import ExitCode
from controllers.cluster_backends import LocalBackend
from core.testing import wait_until as poll_until
from experiments.files import local_state_dir
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp
from experiments.tests.test_exp_files import job_view
from jobs.models import Job
from jobs.services import job_update_status

from .conftest import EMAIL

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alice(db):
    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory

    return UserFactory(user_id=local_subject(EMAIL), email=EMAIL)


def put(url: str, data: bytes, tmp_path) -> None:
    src = tmp_path / uuid.uuid4().hex
    src.write_bytes(data)
    store_for(url).put_file(src, url)


def test_logs_tail_then_follow_until_the_replica_ended(logged_in, alice, tmp_path):
    gate = tmp_path / "gate"
    exp = make_exp(creator=alice, name="follow", command=(
        f'for i in 1 2 3; do echo "line $i"; done; echo oops >&2; '
        f'while [ ! -e "{gate}" ]; do sleep 0.02; done; echo "after gate"'))
    job = Job.objects.select_related("experiment").get(experiment_id=exp.pk)
    backend = LocalBackend(local_state_dir(job.cluster_name))
    view = job_view(job)
    result = backend.submit(view)
    job_update_status(job_id=job.pk, status="Pending", cluster_job_name=result.cluster_job_name)
    log_file = backend.state_dir / result.cluster_job_name / "replica-0.log"
    poll_until(lambda: b"oops" in (log_file.read_bytes() if log_file.exists() else b""),
               what="the replica's stderr line in its log")

    result = logged_in("exp", "logs", str(exp.pk), "--tail", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout == "line 3\noops\n"

    def release(_seconds):
        # The first poll of --follow found nothing new: let the replica end, and let the
        # backend notice it (which copies the log to the store), as a resource manager tick.
        gate.touch()
        poll_until(lambda: backend.observe([view])[view.id].terminal,
                   what="the backend to see the replica end")

    logged_in.sleep = release
    result = logged_in("exp", "logs", str(exp.pk), "--follow")
    assert result.exit_code == 0, result.output
    assert result.stdout == "line 1\nline 2\nline 3\noops\nafter gate\n"
    assert backend.delete(view)

    result = logged_in("exp", "logs", str(exp.pk), "--role", "worker")
    assert result.exit_code == ExitCode.NOT_FOUND  # no such log (HTTP 404)
    assert "role: 'worker' is not a role" in result.stderr and "valid roles: main" in result.stderr


def test_artifacts_lists_and_downloads_resumably(logged_in, alice, tmp_path):
    exp = make_exp(creator=alice, name="dl")
    files = {f"main/part-{i}.bin": bytes([65 + i]) * (1000 * (i + 1)) for i in range(4)}
    files["main/deep/er/x.txt"] = b"x\n"
    for name, data in files.items():
        put(f"{exp.artifact_path}/{name}", data, tmp_path)

    result = logged_in("exp", "artifacts", str(exp.pk), "-o", "json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert {f["name"]: f["size"] for f in listed} == {n: len(d) for n, d in files.items()}
    table = logged_in("exp", "artifacts", str(exp.pk)).stdout
    assert "main/part-3.bin" in table and f"5 files, {sum(map(len, files.values()))} bytes" in table

    dest = tmp_path / "out"
    result = logged_in("exp", "artifacts", str(exp.pk), "--download", str(dest))
    assert result.exit_code == 0, result.output
    assert "5 fetched, 0 already complete" in result.stdout
    assert {n: (dest / n).read_bytes() for n in files} == files

    # An interrupted download: one file cut short, one missing, one longer than stored.
    (dest / "main/part-3.bin").write_bytes(files["main/part-3.bin"][:1500])
    (dest / "main/part-0.bin").unlink()
    (dest / "main/part-1.bin").write_bytes(b"z" * 5000)
    logged_in.transport.requests.clear()
    result = logged_in("exp", "artifacts", str(exp.pk), "--download", str(dest))
    assert result.exit_code == 0, result.output
    assert "3 fetched, 2 already complete" in result.stdout
    assert f"{2500 + 1000 + 2000} bytes transferred" in result.stdout
    assert {n: (dest / n).read_bytes() for n in files} == files
    ranges = [r.headers.get("range") for r in logged_in.transport.requests
              if r.url.path.endswith("/artifacts/file")]
    assert sorted(filter(None, ranges)) == ["bytes=1500-"]


def test_a_listed_file_gone_when_fetched_leaves_no_empty_file(logged_in, alice, tmp_path):
    # The file was opened (created) before the GET, so a 404 left an empty file that the next
    # listing no longer names (googleapis/python-storage#1342): it is removed, and the error
    # says which file went.
    from cli.client import error_from_response
    from cli.errors import CLIError
    from cli.exp.files import _download

    class Client:
        def stream_to(self, path, fh, params, headers, **kwargs):
            raise error_from_response(404, {"detail": f"No file {params['name']!r}.",
                                            "code": "not_found"}, url=path)

    dest = tmp_path / "dl"
    (dest / "main").mkdir(parents=True)
    listed = [{"name": "main/gone.bin", "size": 4, "modified": "2026-01-01T00:00:00Z"},
              {"name": "main/part.bin", "size": 9, "modified": "2026-01-01T00:00:00Z"}]
    with pytest.raises(CLIError) as caught:
        _download(None, Client(), 1, listed, str(dest))
    assert caught.value.code == ExitCode.NOT_FOUND and "main/gone.bin" in str(caught.value)
    assert not (dest / "main" / "gone.bin").exists()
    # A part fetched earlier from the listed version is kept: its bytes are still right.
    (dest / "main" / "part.bin").write_bytes(b"old")
    with pytest.raises(CLIError):
        _download(None, Client(), 1, listed[1:], str(dest))
    assert (dest / "main" / "part.bin").read_bytes() == b"old"


def test_download_into_a_directory_that_cannot_be_written_fails_before_any_request(
        logged_in, alice, tmp_path):
    exp = make_exp(creator=alice, name="nowhere")
    put(f"{exp.artifact_path}/main/a.txt", b"a", tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")  # refused even to root, unlike a chmod
    logged_in.transport.requests.clear()
    result = logged_in("exp", "artifacts", str(exp.pk), "--download", str(blocker / "out"))
    assert result.exit_code == ExitCode.USAGE, result.output
    assert f"--download: cannot write to {blocker / 'out'}: Not a directory" in result.stderr
    assert "choose a writable directory" in result.stderr
    assert not logged_in.transport.requests


def test_get_shows_the_manifest_and_delete_purge_removes_files_and_logs(logged_in, alice,
                                                                        tmp_path):
    exp = make_exp(creator=alice, name="purge")
    put(f"{exp.artifact_path}/main/r.json", b"{}", tmp_path)
    log_url = replica_log_url(exp.artifact_path, "main", 0)
    put(log_url, b"log\n", tmp_path)
    for status in ("Running", "Succeeded"):
        job_update_status(job_id=exp.jobs.get().pk, status=status)
    exp_update_status(exp_id=exp.pk, status="Running")
    exp_update_status(exp_id=exp.pk, status="Succeeded")
    artifact_update_status(artifact_id=exp.artifact.pk, status="Succeeded")

    shown = logged_in("exp", "get", str(exp.pk)).stdout
    assert "FILES" in shown and "1 (2 B)" in shown

    result = logged_in("exp", "delete", "--yes", "--purge", str(exp.pk))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"deleted experiment {exp.pk} and its files"
    assert store_for(exp.artifact_path).summarize(exp.artifact_path) == (0, 0)
    assert store_for(log_url).size_of(log_url) is None


def test_logs_escape_control_characters_on_a_terminal_only(logged_in, alice, tmp_path):
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    exp = make_exp(creator=alice, name="escapes")
    put(replica_log_url(exp.artifact_path, "main", 0), b"\x1b[2Jred\n", tmp_path)
    piped = logged_in("exp", "logs", str(exp.pk))
    assert piped.exit_code == 0, piped.output
    assert piped.stdout == "\x1b[2Jred\n"
    logged_in.stdout = Terminal()
    result = logged_in("exp", "logs", str(exp.pk))
    assert result.exit_code == 0, result.output
    assert logged_in.stdout.getvalue() == "\\x1b[2Jred\n"


def test_logs_tail_counts_only_newlines_and_pages_keep_characters_whole(logged_in, alice,
                                                                        tmp_path, monkeypatch):
    """`--tail 6` after five lines and a progress bar redrawn with `\\r` prints the five lines
    and the bar; a log of multi-byte characters read in small pages comes back unchanged."""
    from cli.exp import files as exp_files

    losses = "".join(f"loss={i / 10}\n" for i in range(5))
    bar = "".join(f"\r[{'#' * (i // 5):<20}] {i}%" for i in range(100)) + "\n"
    exp = make_exp(creator=alice, name="bar")
    put(replica_log_url(exp.artifact_path, "main", 0), (losses + bar).encode(), tmp_path)
    result = logged_in("exp", "logs", str(exp.pk), "--tail", "6")
    assert result.exit_code == 0, result.output
    assert result.stdout == losses + bar

    text = "日本語\n" * 3
    exp = make_exp(creator=alice, name="utf8")
    put(replica_log_url(exp.artifact_path, "main", 0), text.encode(), tmp_path)
    monkeypatch.setattr(exp_files, "LOG_CHUNK", 4)  # pages cut inside characters
    result = logged_in("exp", "logs", str(exp.pk))
    assert result.exit_code == 0, result.output
    assert result.stdout == text


def test_a_partial_file_from_another_experiment_is_fetched_whole_not_resumed(
        logged_in, alice, tmp_path):
    """A half-downloaded file of experiment A, then `--download` of experiment B into the
    same folder: size alone said "resume" and left a file mixing both."""
    first = make_exp(creator=alice, name="a")
    second = make_exp(creator=alice, name="b")
    put(f"{first.artifact_path}/main/trace.bin", b"A" * 4000, tmp_path)
    put(f"{second.artifact_path}/main/trace.bin", b"B" * 4000, tmp_path)
    put(f"{second.artifact_path}/main/same.bin", b"S" * 100, tmp_path)
    dest = tmp_path / "out"
    assert logged_in("exp", "artifacts", str(first.pk), "--download", str(dest)).exit_code == 0
    (dest / "main/trace.bin").write_bytes(b"A" * 1500)  # A's download, interrupted
    (dest / "main/same.bin").write_bytes(b"X" * 100)  # the listed size, another file's bytes

    logged_in.transport.requests.clear()
    result = logged_in("exp", "artifacts", str(second.pk), "--download", str(dest))
    assert result.exit_code == 0, result.output
    assert (dest / "main/trace.bin").read_bytes() == b"B" * 4000
    assert (dest / "main/same.bin").read_bytes() == b"S" * 100
    assert "2 fetched, 0 already complete" in result.stdout
    sent = [r.headers.get("range") for r in logged_in.transport.requests
            if r.url.path.endswith("/artifacts/file")]
    assert sent == [None, None]  # fetched whole: nothing of A's was kept

    # B's own interrupted download resumes with If-Range, and is then complete.
    (dest / "main/trace.bin").write_bytes(b"B" * 1000)
    logged_in.transport.requests.clear()
    result = logged_in("exp", "artifacts", str(second.pk), "--download", str(dest))
    assert "1 fetched, 1 already complete" in result.stdout
    assert (dest / "main/trace.bin").read_bytes() == b"B" * 4000
    [request] = [r for r in logged_in.transport.requests
                 if r.url.path.endswith("/artifacts/file")]
    assert request.headers["range"] == "bytes=1000-" and request.headers["if-range"]
