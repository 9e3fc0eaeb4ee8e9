"""Analysis queries that read: GetAnalysisRecord, ListAnalysisRecords, ListRunningAnalyses, the
queue position of a pending analysis and the offline work (ListExpsAwaitingAnalysis).

The analyzer design (docs/analyzer.md): records are listed by `(created_at, analysis_id)`, the
order of the queues; the position of a pending analysis counts the pending records of its queue
before it.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from accounts.models import User
from accounts.principals import ServiceIdentity, actor_label
from artifacts.models import Artifact, PruneState
from core.errors import NotFound, PermissionDenied, ValidationFailed
from core.statuses import AnalysisStatus, AnalysisType, ArtifactStatus, ExpStatus
from experiments.models import Experiment

from .filters import AnalysisFilter
from .models import AnalysisRecord

# ListExpsAwaitingAnalysis: `limit` 0 means this many triples; never more than the maximum.
AWAITING_DEFAULT_LIMIT = 100
AWAITING_MAX_LIMIT = 1000
# The list order (and the queues' order): oldest first, the id breaking ties.
LIST_ORDERING = ("created_at", "analysis_id")


def analysis_queryset() -> QuerySet[AnalysisRecord]:
    """Every record, with its experiment, artifact and creator joined, in list order."""
    return (AnalysisRecord.objects.select_related("experiment", "artifact", "creator")
            .order_by(*LIST_ORDERING))


def analysis_get(*, analysis_id: str) -> AnalysisRecord:
    """GetAnalysisRecord: return record `analysis_id` (experiment, artifact, creator joined).

    Raises:
        NotFound: no analysis has this id.
    """
    record = analysis_queryset().filter(pk=analysis_id).first()
    if record is None:
        raise NotFound(f"Analysis {analysis_id!r} does not exist.")
    return record


# The service role whose controller runs the scripts (accounts.grpc_auth.ROLE_METHODS).
SCRIPT_READER_ROLE = "analyzer"


def analysis_script_readable(*, record: AnalysisRecord, actor) -> bool:
    """True when `actor` may read the body of `record`'s script.

    A script is its author's code and may hold what the author did not mean to publish (paths,
    hostnames, credentials pasted in by mistake), while every authenticated caller may read the
    rest of a record. So the body goes only to its creator, to an active staff user, and to a
    service holding the `analyzer` role, whose controller runs it (the local mode's internal
    token holds every controller role). Read-only and other service tokens never get it.

    Args:
        record: the record (only `creator_id` is read).
        actor: an `accounts.User` or an `accounts.principals.ServiceIdentity`.
    """
    if isinstance(actor, ServiceIdentity):
        return SCRIPT_READER_ROLE in actor.roles
    if not isinstance(actor, User) or not actor.is_active:
        return False
    return actor.is_staff or actor.pk == record.creator_id


def analysis_get_with_script(*, analysis_id: str, actor) -> AnalysisRecord:
    """GetAnalysisRecord with `with_script`: record `analysis_id`, if `actor` may read its script.

    Refusing (rather than answering without the script) tells a caller who asked for the script
    that it cannot have it, instead of an empty body it could take for an empty script.

    Raises:
        NotFound: no analysis has this id.
        PermissionDenied: `actor` may not read the script (`analysis_script_readable`).
    """
    record = analysis_get(analysis_id=analysis_id)
    if not analysis_script_readable(record=record, actor=actor):
        raise PermissionDenied(
            f"{actor_label(actor)} may not read the script of analysis {analysis_id} "
            "(with_script): only its creator, a staff user or the analyzer may; ask again "
            "without with_script for the rest of the record.")
    return record


def analysis_list(*, filters: Mapping[str, Any] | None = None) -> QuerySet[AnalysisRecord]:
    """ListAnalysisRecords: the records matching every filter, by `(created_at, analysis_id)`.

    Args:
        filters: validated values by `AnalysisFilter` name (`{"status": ["pending"], "exp":
            [12], "analysis_type": ["online"], "plugin": ["summary"]}`), as
            `AnalysisFilter.validate` returns them.

    Raises:
        ValueError: `filters` names a filter `AnalysisFilter` does not declare.
    """
    return AnalysisFilter.apply(analysis_queryset(), filters or {})


def analysis_running() -> QuerySet[AnalysisRecord]:
    """ListRunningAnalyses: every record in status running (the controller's recovery)."""
    return analysis_queryset().filter(status=AnalysisStatus.RUNNING)


def queue_position(record: AnalysisRecord) -> int | None:
    """Return the place of a pending analysis in its queue (1 = next), None unless pending.

    One COUNT on the queue index `(status, analysis_type, created_at, analysis_id)`: the pending
    records of the same type before it in FIFO order (the analyzer design, "Queues").
    """
    if record.status != AnalysisStatus.PENDING:
        return None
    ahead = AnalysisRecord.objects.filter(
        Q(created_at__lt=record.created_at)
        | Q(created_at=record.created_at, analysis_id__lt=record.analysis_id),
        status=AnalysisStatus.PENDING, analysis_type=record.analysis_type,
    ).count()
    return ahead + 1


@dataclass(frozen=True)
class AwaitingTriple:
    """One piece of offline work: an experiment, its artifact, and a plugin to run on it."""

    experiment: Experiment
    artifact: Artifact
    plugin_name: str


def _plugin_problems(plugins: Sequence[tuple[str, Iterable[str]]]) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for index, (name, types) in enumerate(plugins):
        if not isinstance(name, str) or not name.strip() or len(name) > 64:
            errors[f"plugins[{index}].plugin_name"] = [
                "is required: the catalog name of the plugin, at most 64 characters."]
        if any(not isinstance(t, str) or not t or len(t) > 255 for t in types):
            errors[f"plugins[{index}].artifact_types"] = [
                "must be artifact type names of 1 to 255 characters."]
    return errors


_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


def exps_awaiting_analysis(*, limit: int,
                           plugins: Sequence[tuple[str, Iterable[str]]]) -> list[AwaitingTriple]:
    """ListExpsAwaitingAnalysis: (experiment, artifact, plugin) triples offline analysis owes.

    A triple is owed when the experiment is Succeeded, its artifact is Succeeded, kept (not
    pruned: its files are gone) and of one of the plugin's artifact types, and no offline record of that artifact and plugin exists, in
    any status (a cancelled or failed offline analysis is not redone by the poller). Ordered by
    the experiment's `finished_at`, then its id, then the plugins' order; at most `limit`.

    One query per plugin (a NOT EXISTS subquery against `analysis_records`), whatever the
    number of experiments; the per-plugin results, each already ordered and limited, are merged.

    Args:
        limit: triples wanted; 0 means `AWAITING_DEFAULT_LIMIT`; at most `AWAITING_MAX_LIMIT`.
        plugins: `[(plugin_name, artifact_types)]` from the caller's catalog.

    Raises:
        ValidationFailed: `limit` is out of range (`limit`), or a plugin has no name (keyed
            `plugins[i].plugin_name`).
    """
    if limit == 0:
        limit = AWAITING_DEFAULT_LIMIT
    if not 1 <= limit <= AWAITING_MAX_LIMIT:
        raise ValidationFailed({"limit": [
            f"must be from 1 to {AWAITING_MAX_LIMIT} (0 for {AWAITING_DEFAULT_LIMIT}); "
            f"got {limit}."]})
    plugins = [(name, list(types)) for name, types in plugins]
    if errors := _plugin_problems(plugins):
        raise ValidationFailed(errors)
    streams = []
    for order, (plugin_name, types) in enumerate(plugins):
        if not types:
            continue
        analysed = AnalysisRecord.objects.filter(
            artifact_id=OuterRef("pk"), plugin_name=plugin_name,
            analysis_type=AnalysisType.OFFLINE)
        artifacts = list(
            Artifact.objects.filter(status=ArtifactStatus.SUCCEEDED,
                                    experiment__status=ExpStatus.SUCCEEDED,
                                    artifact_type__in=types, prune_state=PruneState.KEPT)
            .filter(~Exists(analysed))
            .select_related("experiment", "experiment__creator")
            .order_by("experiment__finished_at", "experiment_id")[:limit])
        streams.append([((a.experiment.finished_at or _EARLIEST), a.experiment_id, order,
                         AwaitingTriple(a.experiment, a, plugin_name)) for a in artifacts])
    merged = heapq.merge(*streams, key=lambda item: item[:3])
    return [item[3] for _, item in zip(range(limit), merged)]
