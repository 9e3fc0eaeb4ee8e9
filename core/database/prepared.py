"""Queries compiled to SQL once and run many times with other ids (a list page's rows).

Django compiles a queryset to SQL each time it is evaluated. For `experiment_id__in=[50 ids]`
compiling costs several times what running the query costs on an index: on a list page read
with three such queries (experiments, jobs, artifacts; one query since), compiling was about a
fifth of the request's CPU. `IdsQuery` compiles
the query once per bucket of id counts and reuses the SQL and Django's column converters.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections, router
from django.db.models import QuerySet

# Id lists are padded up to one of these sizes (repeating the last id, which changes no `IN`
# result), so a handful of compiled statements serve every page size up to the largest (5,000
# experiments: a ListExpStates page, where compiling `IN` of 5,000 ids took longer than
# running it).
BUCKETS = (1, 2, 4, 8, 16, 32, 51, 64, 128, 256, 501, 1001, 2001, 5001)


def bucket(count: int) -> int | None:
    """Return the padded size for `count` ids, or None when it is larger than every bucket."""
    for size in BUCKETS:
        if count <= size:
            return size
    return None


class IdsQuery:
    """A `.values()` queryset whose only parameters are a list of ids, compiled once.

    Args:
        build: returns the queryset for a list of ids, e.g.
            `lambda ids: Job.objects.filter(experiment_id__in=ids).values("id", "role")`;
            the ids must be its only SQL parameters, in order.
        sentinel: returns the i-th (from 1) placeholder id compiled into the SQL, distinct and
            of the ids' own type (default `-i`; a text key needs text).

    Calling it with ids returns the rows as `list(build(ids))` would (dicts with the same keys
    and values, converted by the same converters). The compiled SQL is kept per thread (a
    thread has its own connection) and per database alias and bucket size. A query that does
    not compile to exactly the ids as its parameters, or more ids than the largest bucket, is
    evaluated as a queryset instead: the result never differs, only the cost.
    """

    def __init__(self, build: Callable[[list[Any]], QuerySet], *,
                 sentinel: Callable[[int], Any] = lambda i: -i):
        self.build = build
        self.sentinel = sentinel
        self.model = build([sentinel(1)]).model
        self._local = threading.local()

    def __call__(self, ids: Sequence[Any]) -> list[dict[str, Any]]:
        """Return the rows of `build(ids)` as dicts."""
        ids = list(ids)
        if not ids:
            return []
        size = bucket(len(ids))
        if size is None:
            return list(self.build(ids))
        alias = router.db_for_read(self.model)
        cache = self._local.__dict__.setdefault("compiled", {})
        compiled = cache.get((alias, size))
        if compiled is None:
            compiled = cache[(alias, size)] = self._compile(alias, size)
        if not compiled:
            return list(self.build(ids))
        sql, names, converters, compiler = compiled
        params = ids + [ids[-1]] * (size - len(ids))
        with connections[alias].cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        if converters:
            rows = compiler.apply_converters(rows, converters)
        return [dict(zip(names, row)) for row in rows]

    def _compile(self, alias: str, size: int):
        """Return `(sql, names, converters, compiler)` for `size` ids, or () when unusable."""
        sentinels = [self.sentinel(i + 1) for i in range(size)]  # distinct: order is checked
        query = self.build(sentinels).query
        if query.extra_select or not (query.values_select or query.annotation_select):
            return ()
        # The names ValuesIterable gives the columns (Django 5.2 keeps them in `selected`).
        names = list(getattr(query, "selected", None) or query.values_select)
        compiler = query.get_compiler(using=alias)
        sql, params = compiler.as_sql()
        if list(params) != sentinels:
            return ()
        fields = [select[0] for select in compiler.select[:compiler.col_count]]
        return sql, names, compiler.get_converters(fields), compiler


def insert_rows(model: type, fields: Sequence[str], rows: Sequence[Sequence[Any]], *,
                using: str) -> None:
    """INSERT `rows` into `model`'s table with one prepared statement (`executemany`).

    What `QuerySet.bulk_create` writes, for append-only rows whose ids nobody reads back (the
    transition history): Django's bulk insert compiles every value of every row into the SQL
    (`SQLInsertCompiler.field_as_sql`), which cost most of a 1,000-item status batch. Here the
    statement is written once and each value is converted by its field for the connection
    (`Field.get_db_prep_save`, as the compiler does); mysqlclient sends an `executemany` of an
    INSERT as multi-row INSERTs, sqlite3 runs the prepared statement per row. No signal is
    sent and no default is applied: every column without a database default must be named.

    Args:
        model: the model whose table receives the rows.
        fields: the names of the fields given, in the order of each row's values.
        rows: one sequence of values per row, in `fields` order.
        using: the database alias (the caller's transaction).
    """
    if not rows:
        return
    connection = connections[using]
    qn = connection.ops.quote_name
    meta = model._meta
    model_fields = [meta.get_field(name) for name in fields]
    sql = (f"INSERT INTO {qn(meta.db_table)} ({', '.join(qn(f.column) for f in model_fields)}) "
           f"VALUES ({', '.join(['%s'] * len(model_fields))})")
    # A column's value often repeats from row to row (the time, the actor, the status
    # entered): it is converted once per run of equal values.
    last: list[tuple[Any, Any] | None] = [None] * len(model_fields)
    params = []
    for row in rows:
        converted = []
        for i, (field, value) in enumerate(zip(model_fields, row)):
            seen = last[i]
            if seen is None or type(seen[0]) is not type(value) or seen[0] != value:
                seen = last[i] = (value, field.get_db_prep_save(value, connection))
            converted.append(seen[1])
        params.append(converted)
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
