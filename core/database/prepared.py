"""Queries compiled to SQL once and run many times with other values (a list page's queries).

Django compiles a queryset to SQL each time it is evaluated. For `experiment_id__in=[50 ids]`
compiling costs several times what running the query costs on an index: on a list page read
with three such queries (experiments, jobs, artifacts; one query since), compiling was about a
fifth of the request's CPU. `IdsQuery` compiles
the query once per bucket of id counts and reuses the SQL and Django's column converters.
`QueryShapes` does the same for the page of ids before it, whose filters vary: its SQL is
kept per shape of the query (its WHERE's SQL, the values left out).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.core.exceptions import EmptyResultSet, FullResultSet
from django.db import connections, models, router
from django.db.models import QuerySet
from django.db.models.signals import post_save, pre_save
from django.db.models.sql.datastructures import BaseTable, Join
from django.db.models.sql.where import WhereNode

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


class QueryShapes:
    """The SQL of `.values()` SELECTs, compiled once per shape and reused with other values.

    Compiling a queryset (`SQLCompiler.as_sql`: its select list, ORDER BY, joins, each filter)
    cost about as much CPU as running a list page's query of ids on its index. Queries of one
    shape (the same table and joins, columns, ordering, slice and WHERE with other values:
    page 2 of `status=Failed` after page 1, another status, another label) compile to the same
    SQL with other parameters. Here only the WHERE's conditions and the annotations are
    compiled per call (each a `Lookup` or a column, a few microseconds: its SQL text and its
    parameters, e.g. `"status" IN (%s, %s)` and `["Failed", "Aborted"]`); the statement is
    looked up by the rest of the query's parts and those SQL texts, so a condition's text, and
    so the SQL, differs whenever its number of values or its subquery does.

    A shape is compiled in full the first time, and kept only when the full compile's
    parameters are the annotations' and the conditions' parameters in order (what Django's
    compiler gives); a query this cannot describe (extra SQL, grouping, aggregates, a filtered
    relation, a condition that matches nothing or everything, such as `qs.none()`) is not
    kept, and its caller compiles it as usual. Kept per thread (a thread has its own
    connections) and database alias, at most `max_shapes` per thread (all are forgotten when
    that is reached).

    `statement_with` does the same for a shape plus one more condition whose values change on
    every call (a cursor's position), without building that condition on the query at all.
    """

    def __init__(self, max_shapes: int = 512):
        self.max_shapes = max_shapes
        self._local = threading.local()

    def _cache(self) -> dict:
        cache = self._local.__dict__.setdefault("shapes", {})
        if len(cache) >= self.max_shapes:
            cache.clear()
        return cache

    def statement(self, query, using: str):
        """Return `(sql, params, compiler)` for `query` on `using`, or None.

        None: the query is not of a shape kept here; compile and run it the usual way. The
        compiler is the one of the shape's first query, for its column converters
        (`SQLCompiler.results_iter`, `apply_converters`).
        """
        compiler = query.get_compiler(using=using)
        shape = _shape(query, compiler)
        if shape is None:
            return None
        key, params = shape
        cache = self._local.__dict__.setdefault("shapes", {})
        kept = cache.get(key)
        if kept is None:
            try:
                sql, full_params = compiler.as_sql()
            except (EmptyResultSet, FullResultSet):
                return None
            kept = self._cache()[key] = (sql, compiler) if list(full_params) == params else ()
        if not kept:
            return None
        return kept[0], params, kept[1]

    def statement_with(self, query, using: str, *, variant: Any,
                       build: Callable[[Sequence[Any]], Any], values: Sequence[Any],
                       sentinels: Sequence[Any], prepare: Callable[[int, Any], Any]):
        """Return `(sql, params, compiler)` for `query` narrowed by one more condition, or None.

        `build(vals)` is `query` with the condition for the values `vals` added (the caller's
        own, e.g. a cursor's `WHERE (created_at, id) < (...)`); it is called only the first
        time a shape is seen, with `sentinels`: values of the right types, distinct, which
        the full compile's parameters must show, after `query`'s own, each as
        `prepare(i, sentinels[i])` (the value made a parameter as the condition's lookups
        make it). The statement is kept by `query`'s shape and `variant` (what else decides
        the condition's SQL: its columns and direction), and later calls bind `query`'s
        parameters and `prepare(i, values[i])` where the sentinels were, without building or
        compiling the condition. None: not a shape kept here; build it and compile it as usual.
        """
        compiler = query.get_compiler(using=using)
        shape = _shape(query, compiler)
        if shape is None:
            return None
        key, params = shape
        key = (key, "with", variant)
        cache = self._local.__dict__.setdefault("shapes", {})
        kept = cache.get(key)
        if kept is None:
            kept = self._cache()[key] = _compile_with(build(sentinels), using, params,
                                                       [prepare(i, v)
                                                        for i, v in enumerate(sentinels)])
        if not kept:
            return None
        sql, slots, full_compiler = kept
        return sql, params + [prepare(i, values[i]) for i in slots], full_compiler


# The small queries a list page's plan is chosen with (a table's largest id, whether a filter
# has more than some number of matches), compiled once per shape.
_PROBES = QueryShapes()


def values_rows(queryset) -> list[tuple]:
    """Return the rows of a `.values()` queryset as tuples, its SQL compiled once per shape.

    What `list(queryset.values_list(...))` of the same columns gives (each value converted by
    Django's converters), for the small probes a request runs before its page (`QueryShapes`:
    the values change only the parameters). A queryset of a shape not kept is compiled and
    run as usual.
    """
    query = queryset.query
    prepared = _PROBES.statement(query, queryset.db)
    if prepared is None:
        compiler = query.get_compiler(using=queryset.db)
        return [tuple(row) for row in compiler.results_iter()]
    sql, params, compiler = prepared
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(sql, params)
        raw = cursor.fetchall()
    return [tuple(row) for row in compiler.results_iter(results=[raw])] if raw else []


def _compile_with(query, using: str, params: list[Any], prepared: list[Any]):
    """`(sql, slots, compiler)` of `query`, whose parameters are `params` and then values among
    `prepared` (the i-th slot holds `prepared[slots[i]]`); () when they are not."""
    compiler = query.get_compiler(using=using)
    try:
        sql, full_params = compiler.as_sql()
    except (EmptyResultSet, FullResultSet):
        return ()
    full_params = list(full_params)
    if full_params[:len(params)] != params:
        return ()
    slots = []
    for value in full_params[len(params):]:
        matches = [i for i, candidate in enumerate(prepared)
                   if type(candidate) is type(value) and candidate == value]
        if len(matches) != 1:
            return ()
        slots.append(matches[0])
    return sql, slots, compiler


def _shape(query, compiler) -> tuple[tuple, list[Any]] | None:
    """Return `(key, params)` of a query `QueryShapes` can keep, else None (see there)."""
    if (query.extra_select or query.extra or query.extra_order_by or query.combinator
            or query.group_by or query.select_for_update or query.select_related
            or query.distinct_fields or query.subquery or not query.values_select
            or any(not isinstance(term, str) for term in query.order_by)):
        return None
    where = query.where
    if where.contains_aggregate or where.contains_over_clause:
        return None
    tables = []
    for alias, table in query.alias_map.items():
        if isinstance(table, Join):
            if table.filtered_relation is not None:
                return None
            tables.append((alias, table.identity, table.join_type, table.nullable,
                           table.table_alias, query.alias_refcount.get(alias, 0) > 0))
        elif isinstance(table, BaseTable):
            tables.append((alias, table.identity, query.alias_refcount.get(alias, 0) > 0))
        else:
            return None
    params: list[Any] = []
    annotations = []
    try:
        for name, expression in query.annotation_select.items():
            if expression.contains_aggregate or expression.contains_over_clause:
                return None
            sql, expression_params = compiler.compile(expression)
            annotations.append((name, sql))
            params.extend(expression_params)
        where_key = _where_shape(where, compiler, params)
    except (EmptyResultSet, FullResultSet):
        return None
    selected = getattr(query, "selected", None)
    key = (compiler.using, query.model, tuple(tables), tuple(query.values_select),
           tuple(annotations), tuple(selected) if selected else (), tuple(query.order_by),
           query.default_ordering, query.standard_ordering, query.low_mark, query.high_mark,
           query.distinct, where_key)
    return key, params


def _where_shape(node, compiler, params: list[Any]) -> tuple:
    """The key of a WHERE node (its connector, negation and each condition's SQL); adds each
    condition's parameters to `params` in the order the SQL holds them."""
    parts: list[Any] = [node.connector, node.negated]
    for child in node.children:
        if isinstance(child, WhereNode):
            parts.append(_where_shape(child, compiler, params))
        else:
            sql, child_params = compiler.compile(child)
            parts.append(sql)
            params.extend(child_params)
    return tuple(parts)


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


# The columns and the INSERT head of `insert_one` and `insert_new`, by model and alias.
_inserts: dict[tuple[type, str], tuple[str, list]] = {}


def _insert_statement(model: type, using: str) -> tuple[str, list] | None:
    """`("INSERT INTO table (columns) VALUES ", fields)` of a new row of `model`, or None for a
    model this module does not insert (see `insert_one`)."""
    prepared = _inserts.get((model, using))
    if prepared is None:
        meta = model._meta
        if (meta.parents or meta.order_with_respect_to or meta.auto_field is None
                or list(meta.db_returning_fields) != [meta.auto_field]):
            return None
        fields = [f for f in meta.local_concrete_fields
                  if not f.generated and f is not meta.auto_field]
        qn = connections[using].ops.quote_name
        head = (f"INSERT INTO {qn(meta.db_table)} ({', '.join(qn(f.column) for f in fields)}) "
                "VALUES ")
        prepared = _inserts[(model, using)] = (head, fields)
    return prepared


# Django's own field classes (exactly these, not subclasses) whose `get_db_prep_save` gives
# back a value of the listed types unchanged on every backend: `to_python` of a str is the str,
# `int()` of an int the int, `adapt_integerfield_value` returns its value; None stays None.
_UNCHANGED: dict[type, tuple[type, ...]] = {
    **dict.fromkeys((models.CharField, models.TextField), (str, type(None))),
    **dict.fromkeys((models.IntegerField, models.BigIntegerField, models.SmallIntegerField,
                     models.PositiveIntegerField, models.PositiveBigIntegerField,
                     models.PositiveSmallIntegerField), (int, type(None))),
    models.BooleanField: (bool, type(None)),
    # A date-time not set yet (when it finished, started...): NULL as it is.
    models.DateTimeField: (type(None),),
}


def _values(obj, fields: list, connection) -> list | None:
    """The INSERT parameters of `obj` (as the compiler prepares them), or None when a value
    is an expression (which the compiler writes as SQL).

    A value `get_db_prep_save` would give back unchanged (`_UNCHANGED`: a str of a
    `CharField`, ...) is used as it is: about half a row's columns, and most of the cost of
    preparing them.
    """
    values = [field.pre_save(obj, True) for field in fields]
    if any(hasattr(value, "resolve_expression") for value in values):
        return None
    return [value if type(value) in _UNCHANGED.get(type(field), ())
            else field.get_db_prep_save(value, connection)
            for field, value in zip(fields, values)]


def insert_one(obj, *, using: str) -> None:
    """INSERT a new model instance as `obj.save(force_insert=True, using=using)` does.

    The statement is written once per model and database (Django compiles the INSERT again on
    every save: a third of a create's CPU for its three rows); each value is prepared by its
    field as the compiler does (`Field.pre_save(add=True)`, so `auto_now` dates are set on
    `obj`, then `get_db_prep_save`), the `pre_save` and `post_save` signals are sent, and the
    new primary key is set on `obj`, which is then saved (`_state`). A model this does not
    cover (a parent model, `order_with_respect_to`, no auto field, a column the database
    fills), a primary key given, or a value that is an expression, is saved by `save`.
    """
    model = type(obj)
    prepared = _insert_statement(model, using)
    if prepared is None or obj._is_pk_set(model._meta):
        obj.save(force_insert=True, using=using)
        return
    head, fields = prepared
    connection = connections[using]
    obj._prepare_related_fields_for_save(operation_name="save")
    pre_save.send(sender=model, instance=obj, raw=False, using=using, update_fields=None)
    params = _values(obj, fields, connection)
    if params is None:
        obj.save(force_insert=True, using=using)
        return
    with connection.cursor() as cursor:
        cursor.execute(f"{head}({', '.join(['%s'] * len(fields))})", params)
        pk = connection.ops.last_insert_id(cursor, model._meta.db_table, model._meta.pk.column)
    setattr(obj, model._meta.pk.attname, pk)
    obj._state.adding = False
    obj._state.db = using
    post_save.send(sender=model, instance=obj, created=True, update_fields=None, raw=False,
                   using=using)


def insert_new(objs: Sequence[Any], *, using: str) -> list[Any]:
    """INSERT new instances of one model in one statement, as `bulk_create(objs)` does.

    What `Model.objects.using(using).bulk_create(objs)` does for rows of a model `insert_one`
    covers, without compiling the statement each time (and so without signals, as
    bulk_create): one multi-row INSERT with `RETURNING` the new ids, set on each object with
    its saved state. Returns `objs`. Anything else (another model among them, a primary key
    given, an expression as a value, a database without `RETURNING` on a bulk insert, more
    values than one statement takes) is handed to `bulk_create`.
    """
    objs = list(objs)
    if not objs:
        return objs
    model = type(objs[0])
    connection = connections[using]
    prepared = _insert_statement(model, using)
    meta = model._meta
    params: list[Any] = []
    if (prepared is not None and connection.features.can_return_rows_from_bulk_insert
            and all(type(obj) is model and not obj._is_pk_set(meta) for obj in objs)):
        head, fields = prepared
        for obj in objs:
            obj._prepare_related_fields_for_save(operation_name="bulk_create")
            values = _values(obj, fields, connection)
            if values is None:
                break
            params.extend(values)
        else:
            if len(params) > (connection.features.max_query_params or len(params)):
                return model._base_manager.using(using).bulk_create(objs)  # in batches
            returning, returning_params = connection.ops.return_insert_columns([meta.pk])
            row = f"({', '.join(['%s'] * len(fields))})"
            with connection.cursor() as cursor:
                cursor.execute(f"{head}{', '.join([row] * len(objs))} {returning}",
                               params + list(returning_params))
                ids = [row[0] for row in cursor.fetchall()]
            if len(ids) != len(objs):
                raise RuntimeError(f"INSERT of {len(objs)} rows returned {len(ids)} ids")
            for obj, pk in zip(objs, ids):
                setattr(obj, meta.pk.attname, pk)
                obj._state.adding = False
                obj._state.db = using
            return objs
    return model._base_manager.using(using).bulk_create(objs)
