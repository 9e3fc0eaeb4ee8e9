"""Artifact use cases that write: UpdateArtifactStatus (with the manifest of a Succeeded
artifact), DeleteArtifact, and retention (prune). CreateArtifact adds a row to an experiment, so
it lives with the experiment: `experiments.services.artifact_create`."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from core.database.db import retry_on_lock_conflict
from core.errors import Conflict, NotFound
from core.observability.logs import log_context
from core.domain.statuses import ArtifactStatus, ExpStatus

from .models import PRUNE_TRANSITIONS, Artifact, PruneState
from .run_files import remove_run_folder
from .store import artifact_logs_url, store_for

log = logging.getLogger(__name__)


@retry_on_lock_conflict
def artifact_update_status(*, artifact_id: int, status: str, reason: str | None = None,
                           message: str | None = None, expected: str | None = None
                           ) -> tuple[Artifact, bool]:
    """UpdateArtifactStatus: apply a guarded transition of the Artifact state machine.

    When the artifact is (now or already) Succeeded and has no manifest yet, the manifest is
    recorded (`artifact_record_manifest`); a store that cannot be read then leaves it unset
    (logged) without failing the transition, and the next call records it.

    A move to Succeeded of the artifact of a Succeeded experiment marks it for offline
    discovery (`artifacts_mark_awaiting`), in the transition's transaction.

    Returns `(artifact, changed)`; raises as `StatefulModel.transition_pk`.
    """
    with transaction.atomic():
        artifact, changed = Artifact.transition_pk(artifact_id, status, reason=reason,
                                                   message=message, expected=expected)
        if changed and artifact.status == ArtifactStatus.SUCCEEDED:
            artifacts_mark_awaiting(experiment_ids=[artifact.experiment_id])
    if artifact.status == ArtifactStatus.SUCCEEDED and artifact.file_count is None:
        try:
            artifact = artifact_record_manifest(artifact=artifact)
        except Exception as exc:  # noqa: BLE001 - any store error; the manifest is retried
            log.warning("cannot record the manifest of artifact %s (%s): %s", artifact.pk,
                        artifact.path, exc, extra={"exp_id": artifact.experiment_id,
                                                   "artifact_id": artifact.pk})
    return artifact, changed


def artifacts_mark_awaiting(*, experiment_ids: Iterable[int]) -> int:
    """Mark the artifacts of these experiments that may owe offline analysis now.

    An artifact may owe it once it and its experiment are both Succeeded and it is kept (the
    rule of ListExpsAwaitingAnalysis, `analysis.selectors.exps_awaiting_analysis`); its
    `offline_settled` goes from NULL to "", the mark offline discovery walks. Called by the
    transitions that make that true (the artifact's to Succeeded, the experiment's to
    Succeeded), inside their transaction. Returns the artifacts marked.
    """
    ids = list(experiment_ids)
    if not ids:
        return 0
    return Artifact.objects.filter(
        experiment_id__in=ids, status=ArtifactStatus.SUCCEEDED, prune_state=PruneState.KEPT,
        experiment__status=ExpStatus.SUCCEEDED, offline_settled__isnull=True,
    ).update(offline_settled="")


def artifact_record_manifest(*, artifact: Artifact) -> Artifact:
    """Record the manifest of a Succeeded artifact: how many files are under its path and their
    total size in bytes, read from the store (`ArtifactStore.summarize`). One UPDATE, only while
    no manifest is recorded, so two callers never disagree.

    Raises:
        Conflict: the artifact is not Succeeded.
        ValueError, OSError, google.api_core.exceptions.GoogleAPIError: the store cannot be read.
    """
    if artifact.status != ArtifactStatus.SUCCEEDED:
        raise Conflict(f"Artifact {artifact.pk} is {artifact.status}; a manifest is recorded "
                       "only for a Succeeded artifact.")
    count, total = store_for(artifact.path).summarize(artifact.path)
    Artifact.objects.filter(pk=artifact.pk, file_count__isnull=True).update(
        file_count=count, total_bytes=total, updated_at=timezone.now())
    artifact.refresh_from_db()
    return artifact


@retry_on_lock_conflict
def artifact_delete(*, artifact_id: int) -> None:
    """DeleteArtifact: delete one artifact record, only when it is terminal (Succeeded, Failed).

    The files stay in the store (as with DeleteExp). A Created artifact is still to be decided
    by the exp controller, so deleting it is refused; the status check is part of the DELETE
    statement, so it cannot race a status change.

    Raises:
        NotFound: no such artifact.
        Conflict: the artifact is still Created (HTTP 409).
    """
    Artifact.delete_terminal_pk(artifact_id)


def artifact_set_prune_state(*, artifact_id: int, target: str) -> bool:
    """Move an artifact's prune state to `target` in one guarded UPDATE (`PRUNE_TRANSITIONS`):
    Kept -> Pruning -> Pruned; repeating a step is a no-op. Only a terminal artifact (Succeeded,
    Failed) can be pruned.

    Returns True when the row is in `target` now.

    Raises:
        NotFound: no such artifact.
        Conflict: the artifact is still Created, or its prune state cannot reach `target`.
    """
    target = PruneState(target)
    extra = {"pruned_at": timezone.now()} if target == PruneState.PRUNED else {}
    updated = Artifact.objects.filter(
        pk=artifact_id, prune_state__in=PRUNE_TRANSITIONS[target],
        status__in=[ArtifactStatus.SUCCEEDED, ArtifactStatus.FAILED],
    ).update(prune_state=target, updated_at=timezone.now(), **extra)
    if updated:
        return True
    row = Artifact.objects.filter(pk=artifact_id).values("status", "prune_state").first()
    if row is None:
        raise NotFound(f"Artifact {artifact_id} does not exist.")
    raise Conflict(f"Artifact {artifact_id} is {row['status']} with prune state "
                   f"{PruneState(row['prune_state']).label}; it cannot become {target.label}.")


@dataclass
class PruneReport:
    """What `artifacts_prune` found or did.

    Attributes:
        artifacts: `(artifact id, experiment id, path)` of each artifact chosen.
        files: files under their paths and logs folders (counted before deleting).
        bytes: their total size in bytes.
        deleted_files: files deleted (0 for a dry run).
        errors: `(artifact id, message)` of artifacts whose files could not be deleted (left
            Pruning; the next run retries them).
    """

    artifacts: list[tuple[int, int, str]] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    deleted_files: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)


def prune_candidates(*, finished_before: datetime, exp_types: Iterable[str] = (),
                     exp_statuses: Iterable[str] = ()) -> list[Artifact]:
    """The artifacts whose files retention deletes, by id: terminal artifacts finished before
    `finished_before` of experiments of these types and statuses (all when empty) that are not
    Pruned, plus every artifact left Pruning by an interrupted run (whatever the filters: that
    run chose it already).
    """
    from django.db.models import Q

    chosen = Q(status__in=[ArtifactStatus.SUCCEEDED, ArtifactStatus.FAILED],
               finished_at__lt=finished_before, prune_state=PruneState.KEPT)
    exp_types, exp_statuses = list(exp_types), list(exp_statuses)
    if exp_types:
        chosen &= Q(experiment__exp_type__in=exp_types)
    if exp_statuses:
        chosen &= Q(experiment__status__in=exp_statuses)
    return list(Artifact.objects.filter(chosen | Q(prune_state=PruneState.PRUNING))
                .order_by("id"))


def artifact_stored_urls(artifact: Artifact) -> list[str]:
    """The folders retention and purge delete for one artifact: its path and its logs folder."""
    return [artifact.path, artifact_logs_url(artifact.path)]


def artifacts_prune(*, finished_before: datetime, exp_types: Iterable[str] = (),
                    exp_statuses: Iterable[str] = (), dry_run: bool = False,
                    on_artifact: Callable[[Artifact, int, int], None] | None = None
                    ) -> PruneReport:
    """Retention: delete the stored files (artifact folder and replica logs) of old artifacts
    and mark them Pruned, keeping every row (experiments, configs, jobs, artifact records with
    their manifests), so experiments can still be listed and compared.

    Each artifact goes Kept -> Pruning (recorded before any file is deleted) -> Pruned (after
    the last one is gone). A run interrupted at any point leaves rows Kept (untouched), Pruning
    (some files may be gone) or Pruned; the next run picks up every Pruning row and finishes
    it, and deleting files that are already gone is a no-op, so running again is always safe.

    Args:
        finished_before: artifacts that finished (Succeeded or Failed) before this instant.
        exp_types: only experiments of these types (all when empty).
        exp_statuses: only experiments in these statuses (all when empty).
        dry_run: only count what would be deleted.
        on_artifact: called `(artifact, files, bytes)` for each artifact before its files go.

    Returns a `PruneReport`.
    """
    report = PruneReport()
    for artifact in prune_candidates(finished_before=finished_before, exp_types=exp_types,
                                     exp_statuses=exp_statuses):
        # Every line about it carries its ids (core.observability.logs).
        with log_context(exp_id=artifact.experiment_id, artifact_id=artifact.pk):
            _prune_one(artifact, report, dry_run=dry_run, on_artifact=on_artifact)
    return report


def _prune_one(artifact: Artifact, report: PruneReport, *, dry_run: bool,
               on_artifact: Callable[[Artifact, int, int], None] | None) -> None:
    """`artifacts_prune` for one artifact: count its files, then (unless `dry_run`) mark it
    Pruning, delete them and mark it Pruned; a failure is logged and added to `report`."""
    urls = artifact_stored_urls(artifact)
    try:
        sizes = [store_for(url).summarize(url) for url in urls]
    except Exception as exc:  # noqa: BLE001 - one unreadable store must not stop the rest
        log.warning("retention: artifact %s of exp %s: its files cannot be listed: %s",
                    artifact.pk, artifact.experiment_id, exc)
        report.errors.append((artifact.pk, str(exc)))
        return
    files, size = sum(s[0] for s in sizes), sum(s[1] for s in sizes)
    report.artifacts.append((artifact.pk, artifact.experiment_id, artifact.path))
    report.files += files
    report.bytes += size
    if on_artifact is not None:
        on_artifact(artifact, files, size)
    if dry_run:
        return
    try:
        artifact_set_prune_state(artifact_id=artifact.pk, target=PruneState.PRUNING)
        # Run folders first: removing one copies its logs to the store, deleted next.
        left = remove_local_run_folders(exp_id=artifact.experiment_id)
        if left:
            raise RuntimeError(f"{'; '.join(left)}: left Pruning; the next run finishes it")
        deleted = 0
        for url in urls:
            count = store_for(url).delete_tree(url)
            deleted += count
            report.deleted_files += count
        artifact_set_prune_state(artifact_id=artifact.pk, target=PruneState.PRUNED)
        log.info("retention: artifact %s of exp %s pruned: %d files, %d bytes", artifact.pk,
                 artifact.experiment_id, deleted, size)
    except (Conflict, NotFound) as exc:  # deleted or changed meanwhile: nothing to do
        log.info("retention: artifact %s of exp %s not pruned: %s", artifact.pk,
                 artifact.experiment_id, exc)
        report.errors.append((artifact.pk, str(exc)))
    except Exception as exc:  # noqa: BLE001 - left Pruning: the next run finishes it
        log.warning("retention: artifact %s of exp %s left Pruning: %s", artifact.pk,
                    artifact.experiment_id, exc)
        report.errors.append((artifact.pk, str(exc)))


def local_state_dir(cluster_name: str) -> Path | None:
    """The run folders' directory of a local cluster (as the resource manager builds its
    backend: the entry's `state_dir`, else `<VAR_DIR>/local-cluster/<name>`); None for a
    cluster of another backend or an unknown one."""
    from django.conf import settings

    from core.cluster_settings import cluster_specs

    entry = cluster_specs().get(cluster_name)
    if not entry or entry.get("backend") != "local":
        return None
    return Path(entry.get("state_dir") or settings.VAR_DIR / "local-cluster" / cluster_name)


def remove_local_run_folders(*, exp_id: int) -> list[str]:
    """Remove the run folders an experiment's jobs left on local clusters, each replica's log
    copied to the store first (`run_files.remove_run_folder`).

    Returns what could not be removed yet (a sentence each: a replica still being stopped).

    Raises:
        OSError or a store error: a log could not be copied (that folder is kept).
    """
    from django.apps import apps

    Job = apps.get_model("jobs", "Job")  # a sibling app: by name, not by import
    left: list[str] = []
    for cluster_name, name in (Job.objects.filter(experiment_id=exp_id)
                               .values_list("cluster_name", "cluster_job_name")):
        state_dir = local_state_dir(cluster_name)
        if state_dir is not None and name and not remove_run_folder(state_dir, name):
            left.append(f"run folder {state_dir / name} (a replica still runs)")
    return left


def artifact_purge_files(*, artifact: Artifact) -> int:
    """Delete the stored files of one artifact (folder and replica logs) for a purging
    DeleteExp; returns how many were deleted. The row is about to be deleted with its
    experiment, so no prune state is recorded.

    Raises:
        ValueError, OSError, google.api_core.exceptions.GoogleAPIError: the store refused.
    """
    return sum(store_for(url).delete_tree(url) for url in artifact_stored_urls(artifact))
