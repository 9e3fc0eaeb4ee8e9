"""The name search chooses its plan by the prefix's matches, against a bound that follows the
table (`core.http.filters.few_matches`), and both plans answer what the plain prefix query answers.

Plans are read with EXPLAIN on a seeded table on both databases; never timings (bench/api.py).
"""
from __future__ import annotations

from math import isqrt

import pytest
from django.db import connection
from django.db.models import Max
from django.http import QueryDict

from core.http.filters import FEW_FLOOR, PLAN_PAGE, PrefixSearchFilter, few_matches
from experiments import selectors
from experiments.filters import ExperimentFilter
from experiments.models import Experiment
from experiments.tests.test_list_plans import explain, page_query, seeded  # noqa: F401


def plan_text(query: str) -> str:
    return "\n".join(" ".join(str(part) for part in row)
                     for row in explain(*page_query(query, after_row=False)))


def test_the_bound_follows_the_table(seeded):  # noqa: F811
    top = Experiment.objects.aggregate(top=Max("pk"))["top"]
    assert few_matches(Experiment) == max(FEW_FLOOR, isqrt(PLAN_PAGE * top))
    assert isqrt(PLAN_PAGE * 1_000_000) == 7071  # the worst page's reads at 1M


def test_a_rare_prefix_reads_the_name_index_and_a_common_one_walks_the_list_order(seeded):  # noqa: F811
    # "exp-12" is held by 111 of 3,000 rows (under the bound, 387), "exp-1" by 1,111 (over).
    assert Experiment.objects.filter(name__istartswith="exp-12").count() < few_matches(Experiment)
    assert Experiment.objects.filter(name__istartswith="exp-1").count() > few_matches(Experiment)
    rare, common = plan_text("search=exp-12"), plan_text("search=exp-1")
    if connection.vendor == "sqlite":
        assert "exp_name_nocase" in rare, rare
        assert "exp_name_nocase" not in common and "TEMP B-TREE" not in common, common
        # The walk tests names in the list order's index: no table row is read.
        assert "COVERING INDEX exp_created_id_name" in common, common
    else:
        assert "exp_name" in rare or "name" in rare, rare
        assert "Using filesort" not in common and "exp_name_created" not in common, common
        assert "exp_created_id_name" in common and "Using index" in common, common


@pytest.mark.parametrize("few", [0, 10**9], ids=["walk", "sort"])
@pytest.mark.parametrize("query", ["search=exp-1", "search=EXP-12", "search=exp-2999",
                                   "search=exp-1&status=Failed", "search=nothing",
                                   "search=exp-&cluster_name=c2"])
def test_both_plans_answer_as_the_plain_prefix_query(seeded, monkeypatch, query, few):  # noqa: F811
    monkeypatch.setattr(PrefixSearchFilter, "few", few)
    values = ExperimentFilter.validate(QueryDict(query))
    got = list(ExperimentFilter.apply(selectors.exp_list_queryset(), values)
               .order_by("-created_at", "-id").values_list("id", flat=True)[:50])
    plain = Experiment.objects.filter(name__istartswith=values["search"])
    for name, value in values.items():
        if name != "search":
            plain = plain.filter(**{f"{name}__in": value})
    assert got == list(plain.order_by("-created_at", "-id").values_list("id", flat=True)[:50])



@pytest.mark.parametrize("query", ["search=exp-1", "label=team"])
def test_the_plan_probes_sort_nothing(seeded, query):  # noqa: F811
    """A plan's probe asks whether more than the bound match: any (bound + 1)th match will do.
    Ordered (the model's default ordering), it sorted every match of a common prefix: 77 ms a
    page at 1,000,000 experiments. Each probe's plan is read with EXPLAIN."""
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        ExperimentFilter.apply(selectors.exp_list_queryset(),
                               ExperimentFilter.validate(QueryDict(query)))
    probes = [q["sql"] for q in queries.captured_queries if "OFFSET" in q["sql"]]
    assert probes, queries.captured_queries
    for sql in probes:
        assert "ORDER BY" not in sql, sql
        prefix = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
        with connection.cursor() as cursor:
            cursor.execute(prefix + sql)
            plan = " ".join(str(part) for row in cursor.fetchall() for part in row)
        assert "TEMP B-TREE" not in plan and "filesort" not in plan, plan
