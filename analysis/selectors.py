"""Analysis queries that read: GetAnalysisRecord, ListAnalysisRecords, ListRunningAnalyses, the
queue position of a pending analysis and the offline work (ListExpsAwaitingAnalysis).

The analyzer design (docs/analyzer.md): records are listed by `(created_at, analysis_id)`, the
order of the queues; the position of a pending analysis counts the pending records of its queue
before it.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.db.models.lookups import IsNull

from accounts.models import User
from accounts.principals import ServiceIdentity, actor_label
from artifacts.models import Artifact, PruneState
from core.errors import NotFound, PermissionDenied, ValidationFailed
from core.domain.statuses import AnalysisStatus, AnalysisType, ArtifactStatus, ExpStatus
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


# Offline discovery examines at most this many marked artifacts per poll (`offline_candidates`):
# the poll's cost is bounded whatever the backlog, and every poll settles those it examined
# that owe nothing, so the backlog drains by this many a poll at least.
OFFLINE_SCAN = 2000


def catalog_fingerprint(plugins: Sequence[tuple[str, Iterable[str]]]) -> str:
    """The fingerprint an artifact is settled with: 32 hex digits of the catalog's plugins and
    their artifact types (order and repeats ignored; a plugin without a type owes nothing)."""
    canonical = sorted((name, sorted(set(types))) for name, types in plugins if types)
    return hashlib.blake2b(json.dumps(canonical).encode(), digest_size=16).hexdigest()


def offline_candidates(*, fingerprint: str) -> list[int]:
    """The ids of the artifacts offline discovery examines: marked and not settled for this
    catalog (`Artifact.offline_settled`), at most `OFFLINE_SCAN`, the never examined ("")
    first, then by id.

    Two walks of the index on the mark, below and above the fingerprint (one range each, in
    index order, so no sort on either database); the artifacts settled for this catalog, the
    bulk of them, are never read.
    """
    ids = list(Artifact.objects.filter(offline_settled__lt=fingerprint)
               .order_by("offline_settled", "id").values_list("id", flat=True)[:OFFLINE_SCAN])
    if len(ids) < OFFLINE_SCAN:
        ids += Artifact.objects.filter(offline_settled__gt=fingerprint).order_by(
            "offline_settled", "id").values_list("id", flat=True)[:OFFLINE_SCAN - len(ids)]
    return ids


def offline_owed(plugins: Sequence[tuple[str, Iterable[str]]]) -> Q:
    """The condition on a marked artifact that it owes an offline analysis to one of `plugins`:
    Succeeded, kept, and of a type of a plugin of which it has no offline record (in any
    status). Its experiment is not joined: an artifact is marked only once its experiment is
    Succeeded, a terminal status (`artifacts.services.artifacts_mark_awaiting`), and a join
    let MariaDB start from the users or experiments table and read them all."""
    # "No record" is a correlated scalar subquery that is NULL, not a NOT EXISTS: MariaDB
    # turns a NOT EXISTS into a materialized semi-join (its exists_to_in) that reads every
    # offline record of the plugin, which is O(experiments) again. Unordered: with the
    # records' list order MariaDB walked the created_at index of every record per artifact.
    per_plugin = [Q(artifact_type__in=list(types)) & Q(IsNull(Subquery(
        AnalysisRecord.objects.filter(artifact_id=OuterRef("pk"), plugin_name=name,
                                      analysis_type=AnalysisType.OFFLINE)
        .order_by().values("pk")[:1]), True))
        for name, types in plugins if types]
    if not per_plugin:
        return Q(pk__in=[])
    return (Q(status=ArtifactStatus.SUCCEEDED, prune_state=PruneState.KEPT)
            & reduce(or_, per_plugin))


def validate_awaiting(limit: int, plugins: Sequence[tuple[str, Iterable[str]]]
                      ) -> tuple[int, list[tuple[str, list[str]]]]:
    """ListExpsAwaitingAnalysis's arguments checked: `(limit, plugins)` with the default limit
    filled in and each plugin's types as a list.

    Raises:
        ValidationFailed: `limit` is out of range (`limit`), or a plugin has no name (keyed
            `plugins[i].plugin_name`) or a bad type (`plugins[i].artifact_types`).
    """
    if limit == 0:
        limit = AWAITING_DEFAULT_LIMIT
    if not 1 <= limit <= AWAITING_MAX_LIMIT:
        raise ValidationFailed({"limit": [
            f"must be from 1 to {AWAITING_MAX_LIMIT} (0 for {AWAITING_DEFAULT_LIMIT}); "
            f"got {limit}."]})
    checked = [(name, list(types)) for name, types in plugins]
    if errors := _plugin_problems(checked):
        raise ValidationFailed(errors)
    return limit, checked


def exps_awaiting_analysis(*, limit: int, plugins: Sequence[tuple[str, Iterable[str]]],
                           candidates: Sequence[int] | None = None) -> list[AwaitingTriple]:
    """ListExpsAwaitingAnalysis: (experiment, artifact, plugin) triples offline analysis owes.

    A triple is owed when the experiment is Succeeded, its artifact is Succeeded, kept (not
    pruned: its files are gone) and of one of the plugin's artifact types, and no offline
    record of that artifact and plugin exists, in any status (a cancelled or failed offline
    analysis is not redone by the poller). Ordered by the experiment's `finished_at`, then its
    id, then the plugins' order; at most `limit`.

    Only the marked artifacts not settled for this catalog are looked at (`candidates`, by
    default `offline_candidates`): one or two queries for them, one per plugin (those ids
    without a record of it: a scalar subquery on `analysis_records`), one for their
    experiments' `finished_at`, one for the `limit` triples chosen; whatever the number of
    experiments. Reading settles nothing: `analysis.services.analysis_offline_discovery`
    does, for the analyzer's poll.

    Args:
        limit: triples wanted; 0 means `AWAITING_DEFAULT_LIMIT`; at most `AWAITING_MAX_LIMIT`.
        plugins: `[(plugin_name, artifact_types)]` from the caller's catalog.
        candidates: the artifact ids to look at (`offline_candidates`); None reads them.

    Raises:
        ValidationFailed: as `validate_awaiting`.
    """
    limit, plugins = validate_awaiting(limit, plugins)
    if candidates is None:
        candidates = offline_candidates(fingerprint=catalog_fingerprint(plugins))
    if not candidates:
        return []
    ids = list(candidates)
    owed = []  # (artifact id, experiment id, plugin order, plugin name)
    for order, (name, types) in enumerate(plugins):
        if types:
            owed += [(artifact_id, exp_id, order, name) for artifact_id, exp_id in
                     Artifact.objects.filter(pk__in=ids).filter(offline_owed([(name, types)]))
                     .order_by().values_list("id", "experiment_id")]
    if not owed:
        return []
    # Ordered here, over at most OFFLINE_SCAN artifacts a plugin: each query above reads one
    # table by primary key, and only the `limit` chosen are loaded as models. The status is
    # checked here, not in the WHERE: with `status = 'Succeeded'` there, SQLite (no
    # statistics) walked the index on (status, created_at) through every Succeeded
    # experiment, O(N), instead of looking up the ids.
    finished = {exp_id: at for exp_id, at, status in
                Experiment.objects.filter(pk__in={exp_id for _, exp_id, _, _ in owed})
                .order_by().values_list("id", "finished_at", "status")
                if status == ExpStatus.SUCCEEDED}
    chosen = sorted((finished[exp_id] or _EARLIEST, exp_id, order, artifact_id, name)
                    for artifact_id, exp_id, order, name in owed if exp_id in finished)[:limit]
    if not chosen:
        return []
    # By primary key, table by table: joined, MariaDB may start from the users table (a
    # handful of rows) and read every experiment of a user through the creator's index.
    artifacts = Artifact.objects.in_bulk({artifact_id for _, _, _, artifact_id, _ in chosen})
    exps = Experiment.objects.in_bulk({a.experiment_id for a in artifacts.values()})
    users = User.objects.in_bulk({e.creator_id for e in exps.values()})
    for artifact in artifacts.values():
        artifact.experiment = exp = exps[artifact.experiment_id]
        exp.creator = users[exp.creator_id]
    return [AwaitingTriple(artifacts[artifact_id].experiment, artifacts[artifact_id], name)
            for _, _, _, artifact_id, name in chosen if artifact_id in artifacts]
