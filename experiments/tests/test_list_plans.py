"""The list's queries are served by the indexes: no sort of the filtered rows, experiments first.

Each filter of ListExps, on page 1 and after a cursor, is EXPLAINed on a seeded table: SQLite's
plan must not sort (`USE TEMP B-TREE FOR ORDER BY`), MariaDB's must not filesort and must start
from the experiments table. These check plans, never timings (bench/api.py measures those).
"""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.http import QueryDict
from django.utils import timezone

from accounts.models import User
from core.http import keyset
from experiments import selectors
from experiments.filters import ExperimentFilter
from experiments.models import Experiment

STATUSES = ["Created", "Running", "Succeeded", "Failed", "Aborting", "Aborted"]
ROWS = 3000

FILTERS = ["", "status=Failed", "creator=u1@example.com", "creator=u2", "cluster_name=c2",
           "exp_type=t3"]


@pytest.fixture
def seeded(django_db_reset_sequences):
    """ROWS experiments over 6 users, 6 statuses, 4 clusters and 5 types; statistics gathered."""
    users = User.objects.bulk_create([User(user_id=f"u{i}", email=f"u{i}@example.com")
                                      for i in range(6)])
    field = Experiment._meta.get_field("created_at")
    field.auto_now_add = False
    try:
        start = timezone.now() - timedelta(days=30)
        Experiment.objects.bulk_create([
            Experiment(name=f"exp-{i}", creator=users[i % 6], cluster_name=f"c{i % 4}",
                       exp_type=f"t{i % 5}", role_to_task_spec={"main": {"command": "x"}},
                       config="k: v\n" * 20, status=STATUSES[i % 6],
                       created_at=start + timedelta(minutes=i))
            for i in range(ROWS)], batch_size=500)
    finally:
        field.auto_now_add = True
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE" if connection.vendor == "sqlite" else "ANALYZE TABLE experiments")
        if connection.vendor != "sqlite":
            cursor.fetchall()


def page_query(query: str, *, after_row: bool) -> tuple[str, tuple]:
    """The SQL of one ListExps page as the HTTP list builds it (filters, keyset, LIMIT)."""
    qs = ExperimentFilter.apply(selectors.exp_list_queryset(),
                                ExperimentFilter.validate(QueryDict(query)))
    keys = keyset.keys_for(Experiment, ["-created_at"])
    columns = keyset.ordered_on(qs, keys)  # as the paginator orders it
    qs = qs.order_by(*keyset.order_by(columns))
    if after_row:
        row = Experiment.objects.order_by("-created_at", "-id")[ROWS // 2]
        qs = qs.filter(keyset.after(columns, keyset.values_of(row, keys)))
    return qs.values("id", "created_at")[:51].query.sql_with_params()


def explain(sql: str, params: tuple) -> list[tuple]:
    with connection.cursor() as cursor:
        prefix = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
        cursor.execute(prefix + sql, params)
        return list(cursor.fetchall())


@pytest.mark.parametrize("after_row", [False, True], ids=["page1", "cursor"])
@pytest.mark.parametrize("query", FILTERS)
def test_list_page_plan_uses_an_index_in_list_order(seeded, query, after_row):
    plan = explain(*page_query(query, after_row=after_row))
    text = "\n".join(" ".join(str(part) for part in row) for row in plan)
    if connection.vendor == "sqlite":
        assert "USE TEMP B-TREE" not in text, text
        assert "experiments USING" in text and "INDEX" in text, text
    else:
        assert "Using filesort" not in text, text
        assert "Using temporary" not in text, text
        first_table = plan[0][2]
        assert first_table == "experiments", text
        assert plan[0][5], f"no index used: {text}"


@pytest.fixture
def labelled_rows(seeded):
    """Labels on the seeded experiments: `baseline=true` on 1 in 100, `team=t<i % 6>` on all."""
    from experiments.models import ExpLabel

    rows = []
    for exp in Experiment.objects.order_by("id").only("id", "created_at"):
        rows.append(ExpLabel(experiment_id=exp.id, key="team", value=f"t{exp.id % 6}",
                             created_at=exp.created_at))
        if exp.id % 100 == 0:
            rows.append(ExpLabel(experiment_id=exp.id, key="baseline", value="true",
                                 created_at=exp.created_at))
    ExpLabel.objects.bulk_create(rows, batch_size=1000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE" if connection.vendor == "sqlite"
                       else "ANALYZE TABLE experiment_labels")
        if connection.vendor != "sqlite":
            cursor.fetchall()


@pytest.mark.parametrize("after_row", [False, True], ids=["page1", "cursor"])
@pytest.mark.parametrize("query", ["label=baseline=true", "label=team=t1",
                                   "label=team=t1&cluster_name=c2",
                                   "label=team=t1,baseline=true"])
def test_a_label_page_reads_the_label_index_in_list_order(labelled_rows, query, after_row):
    """`key=value`: the page is the next entries of (key, value, created_at, experiment), read
    in list order whether 1 in 100 or 1 in 6 experiments hold the label; no sort, no walk of
    the experiments testing labels."""
    plan = explain(*page_query(query, after_row=after_row))
    text = "\n".join(" ".join(str(part) for part in row) for row in plan)
    if connection.vendor == "sqlite":
        assert "USE TEMP B-TREE" not in text, text
        assert "INDEX explabel_key_value_created (key=? AND value=?" in text, text
        assert text.index("explabel_key_value_created") < text.index("PRIMARY KEY"), text
    else:
        assert "Using filesort" not in text and "Using temporary" not in text, text
        assert plan[0][5] == "explabel_key_value_created", text  # its first table's index


@pytest.mark.parametrize("query", ["label=baseline=true", "label=team=t1",
                                   "label=team=t1&cluster_name=c2", "label=team=t4,baseline=true",
                                   "label=team=t4,baseline"])
def test_a_label_page_answers_as_the_plain_query(labelled_rows, query):
    """Pages through the label's index give the rows the plain filter gives, in list order,
    with every cursor."""
    from experiments.models import ExpLabel

    values = ExperimentFilter.validate(QueryDict(query))
    expected = ExperimentFilter.apply(Experiment.objects.all(),
                                      {k: v for k, v in values.items() if k != "label"})
    for selector in values["label"]:
        held = ExpLabel.objects.filter(key=selector.key)
        if selector.value is not None:
            held = held.filter(value=selector.value)
        expected = expected.filter(pk__in=held.values("experiment_id"))
    expected_ids = list(expected.order_by("-created_at", "-id").values_list("id", flat=True))
    keys = keyset.keys_for(Experiment, ["-created_at"])
    got, after = [], None
    while True:
        qs = ExperimentFilter.apply(selectors.exp_list_queryset(), values)
        columns = keyset.ordered_on(qs, keys)
        qs = qs.order_by(*keyset.order_by(columns))
        if after is not None:
            qs = qs.filter(keyset.after(columns, after))
        page = list(qs.values("id", "created_at")[:37])
        got += [row["id"] for row in page]
        if len(page) < 37:
            break
        after = keyset.values_of(page[-1], keys)
    assert got == expected_ids and len(got) > 0


def test_search_is_a_name_prefix_served_by_an_index(seeded):
    """`search=` is a case-insensitive prefix of the name, and an index on the name serves it
    (on SQLite the migration's `exp_name_nocase`, which a table rebuild would silently drop)."""
    qs = ExperimentFilter.apply(Experiment.objects.all(),
                                ExperimentFilter.validate(QueryDict("search=EXP-12")))
    names = set(qs.values_list("name", flat=True))
    assert "exp-12" in names and "exp-1234" in names and "exp-312" not in names
    sql, params = Experiment.objects.filter(name__istartswith="exp-12").only("id").query \
        .sql_with_params()
    text = "\n".join(" ".join(str(part) for part in row) for row in explain(sql, params))
    if connection.vendor == "sqlite":
        assert "exp_name_nocase" in text, text
    else:
        assert "range" in text and "name" in text, text


@pytest.mark.parametrize("after_row", [False, True])
def test_a_search_page_reads_the_name_index_alone(seeded, after_row, monkeypatch):
    """When the search sorts its matches (the plan for a prefix held by few rows, forced here
    for 1,111 of 3,000 so the sort has work), its page query (ids and list keys) is answered
    from the covering index (name, created_at, id): the matches are sorted as index entries,
    never read from the table first (migration 0004). MariaDB may instead walk the list
    order's index and stop at the page's end (no sort at all). The plan choice itself is
    tested in test_search_plans.py."""
    from core.http.filters import PrefixSearchFilter

    monkeypatch.setattr(PrefixSearchFilter, "few", 10**9)
    sql, params = page_query("search=exp-1", after_row=after_row)
    text = "\n".join(" ".join(str(part) for part in row) for row in explain(sql, params))
    if connection.vendor == "sqlite":
        assert "COVERING INDEX exp_name_nocase" in text, text
    else:
        sorts_table_rows = "Using filesort" in text and "Using index" not in text
        assert ("exp_name_created" in text or "created_at" in text) and not sorts_table_rows, text
