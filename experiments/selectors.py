"""Experiment queries that read: GetExp, ListExps (filtered by `experiments.filters`)."""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import transaction
from django.db.models import Case, F, Prefetch, QuerySet, TextField, Value, When

from artifacts.models import Artifact
from core.errors import NotFound
from core.http.jsonrows import RelatedJsonArray, json_row
from core.database.prepared import IdsQuery
from jobs.models import Job

from .filters import ExperimentFilter
from .models import Experiment


def exp_queryset() -> QuerySet[Experiment]:
    """Experiments with creator, artifact and jobs loaded in a constant number of queries."""
    return (Experiment.objects.select_related("creator", "artifact")
            .prefetch_related(Prefetch("jobs", queryset=Job.objects.order_by("role"))))


def exp_summary_queryset() -> QuerySet[Experiment]:
    """Experiments with creator and artifact joined, `config` deferred and jobs not loaded.

    A page of these costs one query and stays small whatever the configs' sizes (a config may
    be almost 128 KiB, docs/limits.md): the shape of ListExps over gRPC, where callers fetch
    jobs with ListJobs.
    """
    return Experiment.objects.select_related("creator", "artifact").defer("config")


# The columns of a list row: no config, no task specs (both may be large, and a list never
# shows them; GetExp does). `creator` is the creator's email.
LIST_FIELDS = ("id", "name", "creator", "creator_id", "cluster_name", "exp_type",
               "artifact_path", "priority", "status", "reason", "message", "created_at",
               "updated_at", "started_at", "finished_at", "aborting_at", "aborted_at", "labels",
               "cloned_from")


def exp_list_queryset() -> QuerySet:
    """The experiments of the HTTP ListExps: `.values()` rows of their ids, no join.

    With the default order's key (`created_at`), in that order; the paginator sets the
    columns and the order of another ordering (`ExpCursorPagination.keys_only`: the cursor is
    made of them) and nothing else; the rows' contents are read afterwards by id
    (`exp_list_rows`). Without a join the database starts from the experiments table and
    walks the index of the filter in list order (`Experiment.Meta.indexes`), and a sort,
    where one is needed (a name search), sorts narrow rows.
    """
    return _list_base().all()


@functools.cache
def _list_base() -> QuerySet:
    """The list's base queryset with the default order's keys, in that order, built once (never
    evaluated: `exp_list_queryset` hands out copies, which the paginator then need not narrow
    or order again)."""
    return Experiment.objects.values("id", "created_at").order_by("-created_at", "-id")


def exp_list_rows(ids: Sequence[int], *, job_fields: Sequence[str],
                  artifact_fields: Sequence[str]) -> list[orjson.Fragment]:
    """The list rows of the experiments `ids`, in that order: one query for the page.

    An id whose experiment was deleted after the page's ids were read has no row.

    The database renders each experiment, with its jobs (sorted by role) and its artifact, as
    one JSON object (`core.http.jsonrows`: date-times as ISO 8601 with `Z`, labels as an object), so
    a page converts no value in Python; the query is compiled once per process and thread
    (`core.database.prepared.IdsQuery`). Each row holds `LIST_FIELDS`, then `jobs` (their
    `job_fields`) and, when the experiment has one, `artifact` (its `artifact_fields`), and is
    an `orjson.Fragment`, embedded as it is by the orjson renderer.

    Args:
        ids: experiment ids, at most `core.database.prepared.BUCKETS[-1]` for one compiled query.
        job_fields, artifact_fields: the columns of a job and of the artifact to show.
    """
    if not ids:
        return []
    found = {row["id"]: row for row in _exp_rows(tuple(job_fields), tuple(artifact_fields))(ids)}
    rows = []
    for exp_id in ids:
        row = found.get(exp_id)
        if row is None:  # deleted since the page's ids were read: gone from the page too
            continue
        text, artifact = row["row"], row["artifact_row"]
        if artifact is not None:  # as DRF does: no artifact, no key
            # A JSON object's text ends with its closing brace: the artifact goes in before it.
            text = f'{text[:-1]}, "artifact": {artifact}}}'
        rows.append(orjson.Fragment(text))
    return rows


@functools.cache
def _exp_rows(job_fields: tuple[str, ...], artifact_fields: tuple[str, ...]) -> IdsQuery:
    """The query of a page's rows: each experiment's JSON with its jobs, and its artifact's
    (one per pair of field lists, for the process)."""
    # The creator and the artifact are joined (each a probe of a unique index per row: a
    # correlated subquery each cost SQLite about a tenth more of the page).
    fields = [name if name != "creator" else ("creator", F("creator__email"))
              for name in LIST_FIELDS]
    fields.append(("jobs", RelatedJsonArray(Job, "experiment_id", job_fields, "role")))
    artifact = Case(When(artifact__id__isnull=True, then=Value(None)),
                    default=json_row(Artifact, artifact_fields, through="artifact"),
                    output_field=TextField())
    # No ORDER BY anywhere: a user and an artifact are unique per experiment, and the page's
    # order is the ids' (`exp_list_rows`), so the database sorts nothing.
    return IdsQuery(lambda ids: Experiment.objects.filter(pk__in=ids).order_by().values(
        "id", row=json_row(Experiment, fields), artifact_row=artifact))


def exp_get_summary(*, exp_id: int) -> Experiment:
    """The experiment the write RPCs answer with (CreateExp, UpdateExpStatus, AbortExp).

    Creator and artifact joined; config and task specs not loaded, jobs not loaded: the reply
    stays small however large the experiment is (256 env values of 64 KiB make a 16 MiB spec,
    which a reply carrying it twice could not hold). GetExp has everything.

    Raises:
        NotFound: no experiment has this id.
    """
    exp = (Experiment.objects.select_related("creator", "artifact")
           .defer("config", "role_to_task_spec").filter(pk=exp_id).first())
    if exp is None:
        raise NotFound(f"Experiment {exp_id} does not exist.")
    return exp


def exp_get(*, exp_id: int) -> Experiment:
    """GetExp: return one experiment with its jobs and artifact.

    Raises:
        NotFound: no experiment has this id.
    """
    exp = exp_queryset().filter(pk=exp_id).first()
    if exp is None:
        raise NotFound(f"Experiment {exp_id} does not exist.")
    return exp


def exp_list(*, filters: Mapping[str, Any] | None = None,
             queryset: QuerySet[Experiment] | None = None) -> QuerySet[Experiment]:
    """ListExps: the experiments matching every filter given, newest first.

    Args:
        filters: validated values by `ExperimentFilter` name, as `ExperimentFilter.validate`
            (HTTP) or `core.grpc.from_proto.list_filters` (gRPC) return them:
            `{"status": ["Running"], "exp_type": [...], "cluster_name": [...], "id": [3],
            "updated_since": datetime, "creator": "bob@example.com", "search": "llama"}`.
        queryset: the experiments to filter (default `exp_queryset()`).

    Raises:
        ValueError: `filters` names a filter `ExperimentFilter` does not declare.
    """
    qs = exp_queryset() if queryset is None else queryset
    return ExperimentFilter.apply(qs, filters or {})


# What `experiments.diff` compares, read in one query (config and task specs included), and
# `created_at`, which the compare document shows.
DIFF_FIELDS = ("id", "name", "cluster_name", "exp_type", "priority", "labels", "status",
               "reason", "cloned_from", "created_at", "started_at", "finished_at",
               "role_to_task_spec", "config")


def exp_diff_rows(*, exp_ids: Sequence[int], max_experiments: int) -> list[dict[str, Any]]:
    """The `DIFF_FIELDS` rows of 2 to `max_experiments` distinct experiments, in the order given
    (one query): what `experiments.diff.diff_experiments` compares.

    Raises:
        ValidationFailed: fewer than 2 or more than `max_experiments` ids, or a repeated id;
            keyed `ids`.
        NotFound: an id names no experiment (the message lists the missing ids), as reading
            that experiment answers.
    """
    from core.errors import ValidationFailed

    from .diff import MIN_EXPERIMENTS

    ids = list(exp_ids)
    if len(set(ids)) != len(ids):
        raise ValidationFailed({"ids": ["lists an experiment twice; give each id once."]})
    if not MIN_EXPERIMENTS <= len(ids) <= max_experiments:
        raise ValidationFailed({"ids": [f"give {MIN_EXPERIMENTS} to {max_experiments} "
                                        f"experiment ids to compare; got {len(ids)}."]})
    rows = {row["id"]: row for row in Experiment.objects.filter(pk__in=ids).values(*DIFF_FIELDS)}
    missing = [i for i in ids if i not in rows]
    if missing:
        raise NotFound(f"Experiment(s) {', '.join(map(str, missing))} do not exist.")
    return [rows[i] for i in ids]


def exp_diff(*, exp_ids: Sequence[int], include_equal: bool = False) -> dict[str, Any]:
    """Compare experiments by key path (`experiments.diff.diff_experiments`), in the order given.

    Args:
        exp_ids: 2 to `diff.MAX_EXPERIMENTS` distinct experiment ids.
        include_equal: also list the paths whose values are all equal.

    Raises:
        ValidationFailed: fewer than 2 or more than `MAX_EXPERIMENTS` ids, or a repeated id;
            keyed `ids`.
        NotFound: an id names no experiment (the message lists the missing ids).
    """
    from django.utils import timezone

    from .diff import MAX_EXPERIMENTS, diff_experiments

    rows = exp_diff_rows(exp_ids=exp_ids, max_experiments=MAX_EXPERIMENTS)
    return diff_experiments(rows, now=timezone.now(), include_equal=include_equal)


# What the exp controller decides from (ListExpStates): no config, task specs, labels or
# timestamps, which a tick never reads and which cost most of a list's time to load and encode.
STATE_EXP_FIELDS = ("id", "name", "status", "reason", "message", "cluster_name", "exp_type",
                    "artifact_path")
STATE_JOB_FIELDS = ("id", "experiment_id", "role", "status", "reason", "message")
STATE_ARTIFACT_FIELDS = ("id", "experiment_id", "path", "artifact_type", "status", "reason",
                         "message")


@dataclass(frozen=True)
class ExpStates:
    """One page of `exp_states`.

    Attributes:
        exps: experiment rows (`STATE_EXP_FIELDS` dicts), by ascending id, each with `jobs`
            (every job of the experiment, `STATE_JOB_FIELDS` dicts by ascending id) and
            `artifact` (a `STATE_ARTIFACT_FIELDS` dict, or None when it has none).
        more: another page follows the last row.
    """

    exps: list[dict[str, Any]]
    more: bool


def exp_states(*, statuses: Sequence[str], after: int | None, size: int) -> ExpStates:
    """ListExpStates: a page of experiments with all their jobs and their artifact.

    Three queries in one transaction: the experiments (`WHERE status IN (...) AND id > after
    ORDER BY id LIMIT size + 1`: the status index, then a sort of the matching rows), then
    their jobs and their artifacts by `experiment_id IN (the page's ids)` on the foreign-key
    indexes, compiled once per bucket of id counts (`core.database.prepared.IdsQuery`). The jobs and
    the artifact are those of the experiments read, whatever changed in between. Rows are
    `.values()` dicts of the columns named above: no model instance is built.

    Args:
        statuses: keep experiments in these statuses (validated names); empty keeps all.
        after: the last id of the previous page, None for the first page.
        size: experiments per page (>= 1).
    """
    with transaction.atomic():
        qs = Experiment.objects.order_by("id")
        if statuses:
            qs = qs.filter(status__in=list(statuses))
        if after is not None:
            qs = qs.filter(pk__gt=after)
        rows = list(qs.values(*STATE_EXP_FIELDS)[: size + 1])
        more = len(rows) > size
        rows = rows[:size]
        by_id = {}
        for row in rows:
            row["jobs"], row["artifact"] = [], None
            by_id[row["id"]] = row
        ids = list(by_id)
        for job in _state_jobs(ids):
            by_id[job["experiment_id"]]["jobs"].append(job)
        for artifact in _state_artifacts(ids):
            by_id[artifact["experiment_id"]]["artifact"] = artifact
    return ExpStates(rows, more)


_state_jobs = IdsQuery(lambda ids: Job.objects.filter(experiment_id__in=ids)
                       .order_by("experiment_id", "id").values(*STATE_JOB_FIELDS))
_state_artifacts = IdsQuery(lambda ids: Artifact.objects.filter(experiment_id__in=ids)
                            .order_by("experiment_id").values(*STATE_ARTIFACT_FIELDS))
