"""A list page's row read (`core.database.prepared.IdsQuery`) returns what the ORM returns, compiled once
per size bucket, for any number of ids."""
from __future__ import annotations

import pytest
from django.db import models
from hypothesis import HealthCheck, given, settings, strategies as st

from core.database.prepared import BUCKETS, IdsQuery, bucket
from experiments.api.serializers import ARTIFACT_SUMMARY_FIELDS, JOB_SUMMARY_FIELDS
from experiments.models import Experiment
from experiments.selectors import _exp_rows
from experiments.tests.factories import make_exp
from jobs.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def exps(user):
    from accounts.tests.factories import UserFactory

    other = UserFactory()
    return [make_exp(creator=user if i % 2 else other, name=f"exp-{i}",
                     roles=("main", "worker") if i % 3 else ("main",)) for i in range(7)]


def test_buckets_cover_every_page_size():
    assert [bucket(n) for n in (1, 3, 50, 51, 52, 500, 501)] == [1, 4, 51, 51, 64, 501, 501]
    assert bucket(BUCKETS[-1] + 1) is None


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_row_reads_equal_the_orm(exps, count):
    ids = [exp.pk for exp in exps][:count]
    query = _exp_rows(tuple(JOB_SUMMARY_FIELDS), tuple(ARTIFACT_SUMMARY_FIELDS))
    rows = sorted(query(ids), key=lambda row: row["id"])
    assert rows == sorted(query.build(ids), key=lambda row: row["id"])  # evaluated by the ORM
    assert [row["id"] for row in rows] == sorted(
        Experiment.objects.filter(pk__in=ids).values_list("id", flat=True))
    assert query._local.compiled[("default", bucket(count))]  # compiled, not the ORM fallback


def test_a_query_is_compiled_once_per_bucket_and_falls_back_beyond_the_largest(exps, monkeypatch):
    query = IdsQuery(lambda ids: Job.objects.filter(experiment_id__in=ids).order_by("id")
                     .values("id", "role"))
    compiled = []
    original = IdsQuery._compile
    monkeypatch.setattr(IdsQuery, "_compile",
                        lambda self, alias, size: compiled.append(size) or original(self, alias,
                                                                                       size))
    ids = [exp.pk for exp in exps]
    expected = list(Job.objects.filter(experiment_id__in=ids).order_by("id").values("id", "role"))
    assert query(ids) == query(ids[::-1]) == expected
    assert query(ids + list(range(10**6, 10**6 + BUCKETS[-1]))) == expected  # no bucket: ORM
    assert compiled == [8]


def test_a_query_with_other_parameters_is_run_by_the_orm(exps):
    query = IdsQuery(lambda ids: Job.objects.filter(experiment_id__in=ids, role="worker")
                     .order_by("id").values("id"))
    ids = [exp.pk for exp in exps]
    assert query(ids) == list(Job.objects.filter(experiment_id__in=ids, role="worker")
                              .order_by("id").values("id"))
    assert query._local.compiled == {("default", 8): ()}


def count_compiles(monkeypatch) -> list:
    """A list that gets an item each time Django compiles a query (`SQLCompiler.as_sql`)."""
    compiles: list = []
    compiler_class = type(Experiment.objects.all().query.get_compiler(using="default"))
    original = compiler_class.as_sql
    monkeypatch.setattr(compiler_class, "as_sql",
                        lambda self, *a, **k: compiles.append(1) or original(self, *a, **k))
    return compiles


def _page(status=None, after=None, ids=None, size=3):
    qs = Experiment.objects.values("id", "created_at").order_by("-created_at", "-id")
    if status is not None:
        qs = qs.filter(status__in=status)
    if ids is not None:
        qs = qs.filter(pk__in=ids)
    if after is not None:
        qs = qs.filter(created_at__lte=after.created_at).exclude(pk=after.pk)
    return qs[:size]


def test_a_page_query_is_compiled_once_per_shape_and_answers_as_the_orm(exps, monkeypatch):
    """`QueryShapes`: queries that differ in their values only share one compiled statement;
    another number of values, another filter or another slice is another shape."""
    from django.db import connection

    from core.database.prepared import QueryShapes

    shapes = QueryShapes()
    compiles = count_compiles(monkeypatch)

    def run(qs):
        sql, params, _compiler = shapes.statement(qs.query, "default")
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [row[0] for row in cursor.fetchall()]

    def orm(qs):
        return [row["id"] for row in qs]

    cases = [_page(), _page(status=["Created"]), _page(status=["Running"]),
             _page(status=["Created", "Running"]), _page(after=exps[3]),
             _page(after=exps[5]), _page(ids=[exps[0].pk, exps[2].pk]),
             _page(ids=[exps[1].pk, exps[4].pk]), _page(size=2)]
    for qs in cases:
        expected = orm(qs)  # compiles through the ORM: not counted below
        compiles.clear()
        assert run(qs) == expected
        compiles.clear()
        assert run(qs) == expected and not compiles  # the same shape: no compile
    assert len(shapes._local.shapes) == 6  # none, status x1, status x2, cursor, ids x2, size 2


def test_a_page_query_that_matches_nothing_is_left_to_the_orm(exps):
    from core.database.prepared import QueryShapes

    shapes = QueryShapes()
    assert shapes.statement(_page().none().query, "default") is None
    assert shapes.statement(_page(ids=[]).query, "default") is None  # `IN ()`: nothing


def _labelled(key, value, size=3):
    """A label page's query as `LabelSelectorFilter` makes it: a join, ordered on its copy of
    the list keys (annotations)."""
    from django.db.models import F

    return (Experiment.objects.filter(label_rows__key=key, label_rows__value=value)
            .annotate(order_created_at=F("label_rows__created_at"),
                      order_id=F("label_rows__experiment_id"))
            .values("id", "created_at").order_by("-order_created_at", "-order_id")[:size])


def test_a_joined_and_annotated_page_query_is_compiled_once_per_shape(exps, monkeypatch):
    from django.db import connection

    from core.database.prepared import QueryShapes
    from experiments.services import exp_update_labels

    for i, exp in enumerate(exps):
        exp_update_labels(exp_id=exp.pk, actor=exp.creator,
                          set_labels={"team": "a" if i % 2 else "b", "tier": str(i % 3)})
    shapes = QueryShapes()
    compiles = count_compiles(monkeypatch)
    joined = Experiment.objects.filter(creator__email=exps[0].creator.email).values("id")
    counts = []
    for qs in (_labelled("team", "a"), _labelled("team", "b"), _labelled("tier", "1"),
               _labelled("team", "a", size=5), joined):
        expected = [row["id"] for row in qs]
        assert expected  # every case matches some experiments
        compiles.clear()
        sql, params, _compiler = shapes.statement(qs.query, "default")
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            assert [row[0] for row in cursor.fetchall()] == expected
        counts.append(len(compiles))
    assert counts == [1, 0, 0, 1, 1]  # another label's page is the first page's shape
    assert len(shapes._local.shapes) == 3


def _cursor_page(position, keys, columns, size=2, shapes=None, status=None):
    from core.http import keyset

    qs = Experiment.objects.values("id", "created_at")
    if status:
        qs = qs.filter(status__in=status)
    reverse = bool(position and position.reverse)
    qs = qs.order_by(*keyset.order_by(columns, reverse=reverse))
    if shapes is not None:
        keyset._PAGE_QUERIES = shapes
    return [row["id"] for row in keyset.page_rows(qs, size, keys, columns=columns,
                                                  position=position)]


@pytest.mark.parametrize("reverse", [False, True])
def test_a_cursor_condition_is_compiled_once_and_answers_as_the_orm(exps, monkeypatch, reverse):
    """`QueryShapes.statement_with`: every page after a cursor equals the ORM's filter, and
    the cursor's condition is compiled once per shape and direction, whatever the position."""
    from core.database.prepared import QueryShapes
    from core.http import keyset

    monkeypatch.setattr(keyset, "_PAGE_QUERIES", QueryShapes())
    compiles = count_compiles(monkeypatch)
    keys = keyset.keys_for(Experiment, ["-created_at"])
    ordered = list(Experiment.objects.order_by("-created_at", "-id").values("id", "created_at"))
    for status in (None, ["Created"]):
        total = 0
        for row in ordered:
            position = keyset.Position(keyset.values_of(row, keys), reverse)
            qs = Experiment.objects.values("id", "created_at")
            if status:
                qs = qs.filter(status__in=status)
            expected = [r["id"] for r in qs.order_by(*keyset.order_by(keys, reverse=reverse))
                        .filter(keyset.after(keys, position.values, reverse=reverse))[:3]]
            compiles.clear()
            assert _cursor_page(position, keys, keys, status=status) == expected
            total += len(compiles)
        assert total == 1  # the first position's; every other one bound its values
    shapes = keyset._PAGE_QUERIES._local.shapes
    assert len(shapes) == 2 and all(shapes.values())  # one per filter shape, both kept


def test_a_cursor_whose_values_the_compile_does_not_show_is_left_to_the_orm(exps):
    """A `prepare` that does not give the parameters the lookups make: nothing is kept, and
    the page is still the ORM's."""
    from core.database.prepared import QueryShapes
    from core.http import keyset

    shapes = QueryShapes()
    keys = keyset.keys_for(Experiment, ["-created_at"])
    qs = Experiment.objects.values("id", "created_at").order_by("-created_at", "-id")
    sentinels = [keyset._sentinel(Experiment._meta.get_field(k.name), i)
                 for i, k in enumerate(keys)]
    row = qs[2]
    assert shapes.statement_with(
        qs[:3].query, "default", variant="x",
        build=lambda values: qs.filter(keyset.after(keys, tuple(values)))[:3].query,
        values=keyset.values_of(row, keys), sentinels=sentinels,
        prepare=lambda i, value: repr(value)) is None
    assert list(shapes._local.shapes.values()) == [()]


@given(text=st.text(), number=st.integers(min_value=-2**63, max_value=2**63 - 1),
       flag=st.booleans())
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_values_insert_uses_unchanged_are_what_django_prepares(text, number, flag):
    """`insert_one` skips `get_db_prep_save` for the field classes and value types of
    `_UNCHANGED`: Django's own preparation gives back those values unchanged, on this
    database."""
    from django.db import connection

    from core.database.prepared import _UNCHANGED

    samples = {str: [text, ""], int: [number, 0], bool: [flag], type(None): [None]}
    for field_class, types in _UNCHANGED.items():
        field = field_class(max_length=255) if field_class is models.CharField else field_class()
        for kind in types:
            for value in samples[kind]:
                prepared = field.get_db_prep_save(value, connection)
                assert type(prepared) is type(value) and prepared == value


def test_insert_one_stores_what_save_stores(user):
    """`insert_one` writes the row `Model.objects.create` writes (defaults, `auto_now` dates,
    JSON), sets the new id and the saved state, and sends `pre_save` and `post_save`."""
    from django.db.models.signals import post_save, pre_save

    from core.database.prepared import insert_one

    fields = dict(creator=user, name="same", cluster_name="local", exp_type="benchmark",
                  artifact_path="file:///tmp/a", role_to_task_spec={"main": {"command": "x"}},
                  labels={"team": "a"}, config="lr: 1\n")
    saved = Experiment.objects.create(**fields)
    sent = []
    receiver = lambda sender, instance, **kwargs: sent.append(  # noqa: E731
        (kwargs.get("created"), instance.pk))
    pre_save.connect(receiver, sender=Experiment)
    post_save.connect(receiver, sender=Experiment)
    try:
        exp = Experiment(**fields)
        insert_one(exp, using="default")
    finally:
        pre_save.disconnect(receiver, sender=Experiment)
        post_save.disconnect(receiver, sender=Experiment)
    assert exp.pk and exp.pk != saved.pk and not exp._state.adding and exp.created_at
    assert sent == [(None, None), (True, exp.pk)]
    stored, expected = (Experiment.objects.filter(pk=pk).values().get()
                        for pk in (exp.pk, saved.pk))
    assert stored.pop("id") == exp.pk and expected.pop("id")
    for key in ("created_at", "updated_at"):
        assert stored.pop(key) == getattr(exp, key) and expected.pop(key)
    assert stored == expected


def test_insert_new_stores_what_bulk_create_stores(exps, django_assert_num_queries):
    """`insert_new` writes the rows `bulk_create` writes, in one statement, and sets their ids."""
    from core.database.prepared import insert_new

    exp = exps[0]

    def jobs(prefix):
        return [Job(experiment=exp, role=f"{prefix}{i}", cluster_name="local", exp_type="t",
                    task_spec={"command": "x"}, artifact_path=f"p/{i}") for i in range(3)]

    expected = Job.objects.bulk_create(jobs("b"))
    with django_assert_num_queries(1):
        written = insert_new(jobs("n"), using="default")
    assert all(job.pk and not job._state.adding for job in written)
    assert len({job.pk for job in written + expected}) == 6

    def stored(rows):  # each row as read back by its id, its role's prefix left out
        read = {row["id"]: row for row in Job.objects.filter(pk__in=[r.pk for r in rows])
                .values()}
        return [{k: v for k, v in read[row.pk].items() if k not in ("id", "created_at",
                                                                   "updated_at")}
                | {"role": read[row.pk]["role"][1:]} for row in rows]

    assert stored(written) == stored(expected)
    assert [row["role"] for row in stored(written)] == ["0", "1", "2"]  # ids set in order
