"""Rows the database itself renders as JSON objects, for list pages built without Python per row.

A list page of 50 experiments with their jobs and artifacts holds about 450 date-times and 50
label maps. Read as Python values, each date-time is parsed by the driver or Django's
converter and formatted again for the response, and each label map decoded and encoded again:
most of a page's CPU. `json_row` asks SQLite (`json_object`, `json`) or MariaDB
(`JSON_OBJECT`, `JSON_EXTRACT`, `DATE_FORMAT`) for the finished JSON text of the row instead;
the view embeds it in the response as it is (`orjson.Fragment`).

The text is what the API's serializers give for the same columns: date-times as ISO 8601 in
UTC with a `Z` and microseconds only when not zero (`experiments.api.serializers.utc_iso`),
JSON columns as their JSON value, everything else as its JSON scalar. Only SQLite and MariaDB
(MySQL) are supported, the two databases Falcon runs on (docs/architecture.md).
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from django.db import NotSupportedError, models
from django.db.models import Aggregate, F, Func, OuterRef, Subquery

_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")


class _SQLiteAndMySQLOnly:
    """Refuse to compile on a database other than SQLite and MySQL/MariaDB (their `as_sqlite`
    and `as_mysql` do the work), naming the expression and the vendor."""

    def as_sql(self, compiler, connection, **extra):
        raise NotSupportedError(f"{type(self).__name__} supports SQLite and MySQL/MariaDB, "
                                f"not {connection.vendor}")


class IsoUTC(_SQLiteAndMySQLOnly, Func):
    """A date-time column as ISO 8601 text in UTC: `2026-12-01T18:52:44.516012Z` (or NULL).

    Django keeps date-times in UTC (USE_TZ): SQLite as `YYYY-MM-DD HH:MM:SS[.ffffff]` text,
    MariaDB as DATETIME(6). Python's `isoformat` leaves out a zero fraction; so does this.
    """

    arity = 1
    output_field = models.TextField()

    def as_sqlite(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"(REPLACE({sql}, ' ', 'T') || 'Z')", params

    def as_mysql(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        # %% is a literal % in Django's format-style SQL.
        return (f"IF(MICROSECOND({sql}) = 0, DATE_FORMAT({sql}, '%%Y-%%m-%%dT%%H:%%i:%%sZ'), "
                f"DATE_FORMAT({sql}, '%%Y-%%m-%%dT%%H:%%i:%%s.%%fZ'))",
                [*params, *params, *params])


class JsonValue(_SQLiteAndMySQLOnly, Func):
    """A JSON column as a JSON value inside a JSON object (not as a string holding JSON)."""

    arity = 1
    output_field = models.TextField()

    def as_sqlite(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"json({sql})", params

    def as_mysql(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"JSON_EXTRACT({sql}, '$')", params


class JsonObject(_SQLiteAndMySQLOnly, Func):
    """`JSON_OBJECT('key', value, ...)` with the keys written into the SQL, not as parameters.

    Django's own `JSONObject` passes each key as a query parameter; keeping the keys in the
    text leaves a query's parameters to its filter values (`core.database.prepared.IdsQuery` compiles
    a query once and binds only ids).

    Args:
        fields: `{key: expression}` in output order; keys are lower-case identifiers.

    Raises:
        ValueError: a key that is not `[a-z_][a-z0-9_]*`.
    """

    output_field = models.TextField()

    def __init__(self, fields: dict[str, models.Expression]):
        bad = [key for key in fields if not _KEY.match(key)]
        if bad:
            raise ValueError(f"JSON keys must be lower-case identifiers; got {bad}")
        self.keys = list(fields)
        super().__init__(*fields.values())

    def _render(self, compiler):
        parts, params = [], []
        for key, expression in zip(self.keys, self.source_expressions):
            sql, expression_params = compiler.compile(expression)
            parts.append(f"'{key}', {sql}")
            params.extend(expression_params)
        return f"JSON_OBJECT({', '.join(parts)})", params

    def as_sqlite(self, compiler, connection, **extra):
        return self._render(compiler)

    def as_mysql(self, compiler, connection, **extra):
        return self._render(compiler)


def json_row(model: type[models.Model],
             fields: Sequence[str | tuple[str, models.Expression]], *,
             through: str = "") -> JsonObject:
    """The JSON object of a row of `model`, its keys in the order of `fields`.

    Args:
        fields: field names of `model` (a foreign key by its attname, `creator_id`), or
            `(key, expression)` pairs for computed values (a subquery, say). Date-times
            become `IsoUTC`, JSON fields `JsonValue`, other fields their column.
        through: the relation from the query's model to `model` (`"artifact"`: the columns
            are the joined row's, `artifact__path`); empty for the query's own model.

    Raises:
        django.core.exceptions.FieldDoesNotExist: a name that is not a field of `model`.
        ValueError: a key that is not a lower-case identifier.
    """
    expressions: dict[str, models.Expression] = {}
    for item in fields:
        if not isinstance(item, str):
            key, expression = item
            expressions[key] = expression
            continue
        field = model._meta.get_field(item)  # also finds a foreign key by its attname
        column = F(f"{through}__{field.attname}" if through else field.attname)
        if isinstance(field, models.DateTimeField):
            expressions[item] = IsoUTC(column)
        elif isinstance(field, models.JSONField):
            expressions[item] = JsonValue(column)
        else:
            expressions[item] = column
    return JsonObject(expressions)


class _JsonTextArray(Aggregate):
    """MySQL's and MariaDB's `CONCAT('[', GROUP_CONCAT(value ORDER BY key SEPARATOR ','), ']')`.

    The text of a JSON array of JSON values, in `key` order. `GROUP_CONCAT ... ORDER BY` is
    in MySQL and MariaDB alike, where `JSON_ARRAYAGG(... ORDER BY ...)` is MariaDB's only
    (MySQL 8 has no ORDER BY inside it). The text is at most `group_concat_max_len` bytes
    long, which the settings raise for every connection (`init_command`: MySQL's default is
    1,024 bytes, three or four jobs): beyond it the server would cut the array short.
    """

    function = "GROUP_CONCAT"
    output_field = models.TextField()

    def as_mysql(self, compiler, connection, **extra):
        value, order = self.source_expressions[:2]
        value_sql, value_params = compiler.compile(value)
        order_sql, order_params = compiler.compile(order)
        return (f"CONCAT('[', GROUP_CONCAT({value_sql} ORDER BY {order_sql} SEPARATOR ','), ']')",
                [*value_params, *order_params])

    def as_sql(self, compiler, connection, **extra):
        raise NotSupportedError("_JsonTextArray is MySQL's; SQLite aggregates a sorted subquery")


class RelatedJsonArray(_SQLiteAndMySQLOnly, Func):
    """The JSON array of a related model's rows (`json_row`), ordered: `[]` when it has none.

    For the outer row's experiment, say, its jobs: `RelatedJsonArray(Job, "experiment_id",
    ["id", "role"], order="role")` is `[{"id": .., "role": ..}, ...]` sorted by role, as one
    JSON value inside the outer `JsonObject` (one query for a page and its related rows).
    SQLite aggregates a sorted correlated subquery (`json_group_array` keeps the order its rows
    come in; SQLite before 3.44 has no ORDER BY inside an aggregate); MySQL and MariaDB
    concatenate the rows' JSON in order (`_JsonTextArray`) and read the text back as JSON
    (`JSON_EXTRACT(..., '$')`), as neither keeps the order of a derived table.

    Args:
        model: the related model.
        fk: its field holding the outer row's primary key (`experiment_id`).
        fields: what `json_row` takes, for each related row.
        order: the field the array is sorted by (unique per outer row, `role`).
    """

    output_field = models.TextField()

    def __init__(self, model: type[models.Model], fk: str,
                 fields: Sequence[str | tuple[str, models.Expression]], order: str):
        related = model.objects.filter(**{fk: OuterRef("pk")})
        row = json_row(model, fields)
        ordered = related.order_by(order).values(r=row)
        grouped = related.order_by().values(fk).annotate(a=_JsonTextArray(row, F(order)))
        grouped = grouped.values("a")
        super().__init__(Subquery(ordered), Subquery(grouped))

    def as_sqlite(self, compiler, connection, **extra):
        # The rows' texts joined in their order and read as JSON once (`json_group_array`
        # would parse each row's text again: a JSON subtype does not cross a subquery).
        sql, params = compiler.compile(self.source_expressions[0])
        return (f"""(SELECT json(COALESCE('[' || group_concat("r", ',') || ']', '[]')) """
                f"FROM {sql})", params)

    def as_mysql(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[1])
        return f"JSON_EXTRACT(COALESCE({sql}, '[]'), '$')", params
