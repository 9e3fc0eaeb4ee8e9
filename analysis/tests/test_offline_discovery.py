"""Offline discovery costs O(awaiting): the mark set by the transitions, settled by the poll.

Each poll of `services.analysis_offline_discovery` must answer what the naive query (every
Succeeded artifact, NOT EXISTS per plugin, no mark) answers, while the artifacts settled for the
catalog are never read again; the plan walks the mark's index without a sort.
"""
from __future__ import annotations

import json
import random

import pytest
from django.db import connection

from analysis import selectors, services
from analysis.models import AnalysisRecord
from analysis.tests.factories import RESULT_ROOT, make_finished_exp
from artifacts.models import Artifact
from artifacts.services import artifact_set_prune_state
from core.domain.statuses import AnalysisStatus, AnalysisType, ArtifactStatus, ExpStatus

pytestmark = pytest.mark.django_db

PLUGINS = [("summary", ["profiling"]), ("trace", ["profiling", "benchmark"])]


def naive(plugins, limit=1000):
    """The owed triples as (exp id, plugin), read without the mark, as the rule says."""
    owed = []
    for order, (name, types) in enumerate(plugins):
        rows = (Artifact.objects.filter(status=ArtifactStatus.SUCCEEDED, prune_state="",
                                        experiment__status=ExpStatus.SUCCEEDED,
                                        artifact_type__in=types)
                .exclude(pk__in=AnalysisRecord.objects.filter(
                    plugin_name=name, analysis_type=AnalysisType.OFFLINE).values("artifact_id"))
                .values_list("experiment__finished_at", "experiment_id"))
        owed += [(finished, exp_id, order, name) for finished, exp_id in rows]
    return [(exp_id, name) for _, exp_id, _, name in sorted(owed)][:limit]


def poll(plugins, limit=1000):
    return [(t.experiment.pk, t.plugin_name)
            for t in services.analysis_offline_discovery(limit=limit, plugins=plugins)]


def offline(exp_id: int, plugin: str) -> AnalysisRecord:
    from experiments.models import Experiment

    exp = Experiment.objects.select_related("creator").get(pk=exp_id)
    return services.analysis_record_create(
        exp_id=exp_id, analysis_type="offline", plugin_name=plugin, command="",
        script_content="", name="", creator_email=exp.creator.email, result_root=RESULT_ROOT)


def test_transitions_mark_only_what_may_owe():
    done = make_finished_exp()
    failed = make_finished_exp(status=ExpStatus.FAILED, artifact_status=ArtifactStatus.FAILED)
    running = make_finished_exp(status=ExpStatus.RUNNING, artifact_status=None)
    marks = dict(Artifact.objects.values_list("experiment_id", "offline_settled"))
    assert marks == {done.pk: "", failed.pk: None, running.pk: None}


def test_poll_settles_what_owes_nothing_and_never_reads_it_again():
    exps = [make_finished_exp(exp_type=t) for t in ("profiling", "benchmark", "training")]
    fingerprint = selectors.catalog_fingerprint(PLUGINS)
    assert poll(PLUGINS) == naive(PLUGINS) == [
        (exps[0].pk, "summary"), (exps[0].pk, "trace"), (exps[1].pk, "trace")]
    # The training artifact owes no plugin: settled at the first poll.
    assert Artifact.objects.get(experiment=exps[2]).offline_settled == fingerprint
    for exp_id, plugin in poll(PLUGINS):
        offline(exp_id, plugin)
    assert poll(PLUGINS) == naive(PLUGINS) == []
    assert selectors.offline_candidates(fingerprint=fingerprint) == []
    # Another catalog examines the settled artifacts again and finds what it owes.
    wider = [*PLUGINS, ("fit", ["training"])]
    assert poll(wider) == naive(wider) == [(exps[2].pk, "fit")]


def test_deleting_an_offline_record_makes_its_plugin_owed_again():
    exp = make_finished_exp()
    for plugin in ("summary", "trace"):
        offline(exp.pk, plugin)
    assert poll(PLUGINS) == []
    gone = AnalysisRecord.objects.get(plugin_name="trace")
    services.analysis_cancel_in_db(gone.analysis_id)
    services.analysis_record_delete(gone.analysis_id)
    assert poll(PLUGINS) == naive(PLUGINS) == [(exp.pk, "trace")]


def test_a_limit_never_settles_what_it_cut():
    exps = [make_finished_exp() for _ in range(3)]
    assert poll(PLUGINS, limit=1) == [(exps[0].pk, "summary")]
    assert Artifact.objects.filter(offline_settled="").count() == 3
    assert poll(PLUGINS) == naive(PLUGINS)


def test_pruned_artifacts_are_settled_and_owe_nothing():
    exp = make_finished_exp()
    artifact_set_prune_state(artifact_id=exp.artifact.pk, target="Pruning")
    assert poll(PLUGINS) == naive(PLUGINS) == []
    assert Artifact.objects.get(pk=exp.artifact.pk).offline_settled is not None


@pytest.mark.parametrize("seed", range(4))
def test_polls_answer_as_the_naive_query(seed):
    """Random experiments, records and catalogs; every poll equals the naive query's answer."""
    rng = random.Random(seed)
    types = ["profiling", "benchmark", "training"]
    catalogs = [PLUGINS, [("trace", ["benchmark"])], [*PLUGINS, ("fit", ["training"])]]
    exps = []
    for step in range(8):
        for _ in range(rng.randint(0, 3)):
            status = rng.choice([ExpStatus.SUCCEEDED, ExpStatus.SUCCEEDED, ExpStatus.FAILED])
            exps.append(make_finished_exp(
                exp_type=rng.choice(types), status=status,
                artifact_status=ArtifactStatus.SUCCEEDED if status == ExpStatus.SUCCEEDED
                else rng.choice([ArtifactStatus.SUCCEEDED, ArtifactStatus.FAILED])))
        plugins = rng.choice(catalogs)
        limit = rng.choice([1, 2, 1000])
        assert poll(plugins, limit) == naive(plugins, limit), step
        for exp_id, plugin in naive(plugins)[: rng.randint(0, 3)]:
            offline(exp_id, plugin)


def test_candidates_walk_the_mark_index_without_a_sort():
    make_finished_exp()
    fingerprint = selectors.catalog_fingerprint(PLUGINS)
    for lookup in ("lt", "gt"):
        sql, params = (Artifact.objects.filter(**{f"offline_settled__{lookup}": fingerprint})
                       .order_by("offline_settled", "id").values_list("id")[:10]
                       .query.sql_with_params())
        with connection.cursor() as cursor:
            prefix = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
            cursor.execute(prefix + sql, params)
            text = " ".join(str(part) for row in cursor.fetchall() for part in row)
        assert "offline_settled" in text, text
        assert "TEMP B-TREE" not in text and "filesort" not in text, text


@pytest.fixture
def seeded_marks():
    """15,000 experiments (most Succeeded) with a Succeeded artifact each, as the benchmark
    seeds them: nine in ten settled for PLUGINS' catalog, the rest owed."""
    from accounts.models import User
    from experiments.models import Experiment

    user = User.objects.create_user("plans@falcon.local")
    fingerprint = selectors.catalog_fingerprint(PLUGINS)
    statuses = [ExpStatus.SUCCEEDED] * 4 + [ExpStatus.FAILED, ExpStatus.RUNNING]
    Experiment.objects.bulk_create([
        Experiment(name=f"plan-{i}", creator=user, cluster_name="local",
                   exp_type="profiling" if i % 2 else "benchmark",
                   role_to_task_spec={"main": {"command": "true"}},
                   status=statuses[i % len(statuses)]) for i in range(15000)], batch_size=1000)
    Artifact.objects.bulk_create([
        Artifact(experiment_id=pk, path=f"file:///tmp/plans/{pk}", artifact_type=exp_type,
                 status=ArtifactStatus.SUCCEEDED,
                 offline_settled=fingerprint if pk % 10 else "")
        for pk, exp_type in Experiment.objects.values_list("pk", "exp_type")], batch_size=1000)
    AnalysisRecord.objects.bulk_create([
        AnalysisRecord(name=f"{name} of {exp_id}", experiment_id=exp_id, artifact_id=pk,
                       creator=user, analysis_type=AnalysisType.OFFLINE, plugin_name=name,
                       status=AnalysisStatus.SUCCEEDED, dedupe_key=f"{pk}/{name}")
        for pk, exp_id, artifact_type in Artifact.objects.filter(
            offline_settled=fingerprint).values_list("pk", "experiment_id", "artifact_type")
        for name, types in PLUGINS if artifact_type in types], batch_size=1000)


def test_a_poll_reads_the_rows_it_examines_by_key(seeded_marks, monkeypatch):
    """Every query of a poll, EXPLAINed: the candidates walk the mark's index, every other
    read of experiments and artifacts looks its ids up by primary key. A condition on an
    indexed column next to `id IN (...)` (the experiments' status) made SQLite, which has no
    statistics, walk that index through every Succeeded experiment: O(N) per poll."""
    from django.test.utils import CaptureQueriesContext

    # Fewer candidates than rows, as in a large database (2,000 of 1,000,000): with a large
    # share of the table in `id IN (...)`, MariaDB rightly prefers reading all of it. Still
    # over 1,000 ids, where MariaDB turns the list into a derived table it joins
    # (in_predicate_conversion_threshold), as it does with 2,000.
    monkeypatch.setattr(selectors, "OFFLINE_SCAN", 1200)
    with CaptureQueriesContext(connection) as queries:
        assert services.analysis_offline_discovery(limit=100, plugins=PLUGINS)
    assert len(queries.captured_queries) >= 5
    for query in queries.captured_queries:
        sql = query["sql"]
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                cursor.execute("EXPLAIN QUERY PLAN " + sql)
                steps = [row[3] for row in cursor.fetchall()]
                for step in steps:
                    assert not step.startswith("SCAN"), (step, sql[:200])
                    if step.startswith(("SEARCH experiments", "SEARCH artifacts")):
                        assert ("PRIMARY KEY" in step or "rowid=?" in step
                                or "offline_settled" in step), (step, sql[:200])
            else:
                cursor.execute("EXPLAIN FORMAT=JSON " + sql)
                for table in json_tables(json.loads(cursor.fetchone()[0])):
                    if table["table_name"].startswith("<"):  # the ids' derived table
                        continue
                    assert table["access_type"] not in ("ALL", "index"), (table, sql[:200])
                    if table["table_name"] in ("experiments", "artifacts"):
                        # InnoDB's secondary keys end with the primary key: a range on
                        # (status, id) looks the ids up as PRIMARY does.
                        assert (table.get("key") == "PRIMARY"
                                or "id" in table.get("used_key_parts", [])
                                or "offline_settled" in table.get("key", "")), (table, sql[:200])


def json_tables(node):
    """Every "table" object of a MariaDB EXPLAIN FORMAT=JSON plan, subqueries included."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "table" and isinstance(value, dict) and "table_name" in value:
                yield value
            yield from json_tables(value)
    elif isinstance(node, list):
        for item in node:
            yield from json_tables(item)
