"""Keyset positions on `(sort keys..., id)` for the HTTP list cursors (decisions.md#dec-paging).

A page is `WHERE (k1, ..., id) > (v1, ..., last id) ORDER BY k1, ..., id LIMIT n + 1`, the
tuple comparison written out as `k1 > v1 OR (k1 = v1 AND (... OR (kn = vn AND id > last)))`
with each key's own direction. The id makes every position unique, so rows sharing a sort key
are neither skipped nor repeated when others are created, deleted or changed between pages
(an offset among equal keys, as DRF's cursor keeps, shifts when a seen row goes away).

A cursor is `base64url(JSON {"v": 1, "o": [ordering], "k": [values], "r": 0|1})`: the ordering
it belongs to, the key values of the row it continues from, and whether it walks backwards
(the `previous` link). Every part is checked before it reaches SQL; a cursor this module did not
make is a `ValidationFailed` on the cursor's query parameter, never a server error.
"""
from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain
from datetime import datetime, timezone
from typing import Any

import orjson

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, models
from django.db.models import Q
from django.db.models.sql.constants import MULTI

from core.database.prepared import QueryShapes
from core.errors import ValidationFailed
from core.limits.jsoninput import has_surrogate

VERSION = 1
# Bounds of a 64-bit signed integer column: larger numbers would fail in the driver.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
# A cursor longer than this was not made here (keys are short: ids, names, timestamps).
MAX_CURSOR_CHARS = 4096


@dataclass(frozen=True)
class Key:
    """One sort key: a model field name and its direction."""

    name: str
    descending: bool

    @property
    def term(self) -> str:
        return f"-{self.name}" if self.descending else self.name


@dataclass(frozen=True)
class Position:
    """A decoded cursor: the key values of a row, and the walk's direction."""

    values: tuple[Any, ...]
    reverse: bool


def keys_for(model: type[models.Model], ordering: tuple[str, ...] | list[str]) -> list[Key]:
    """Return the sort keys of `ordering`, made total by the primary key.

    Duplicates are dropped; keys after the primary key are dropped (they never decide); the
    primary key is appended, in the first key's direction, when the ordering lacks it.

    Raises:
        ImproperlyConfigured: a key is nullable (NULLs have no place in a tuple comparison).
    """
    pk_name = model._meta.pk.name
    keys: list[Key] = []
    seen: set[str] = set()
    for term in ordering:
        descending = term.startswith("-")
        name = term.lstrip("-")
        name = pk_name if name == "pk" else name
        if name in seen:
            continue
        field = model._meta.get_field(name)
        if getattr(field, "null", False):
            raise ImproperlyConfigured(f"keyset pagination cannot order by nullable {name!r}")
        seen.add(name)
        keys.append(Key(name, descending))
        if name == pk_name:
            return keys
    keys.append(Key(pk_name, keys[0].descending if keys else False))
    return keys


# A queryset may give a key's values from another table, equal to the model field's in every
# row it returns: an annotation named `order_<field>` (e.g. a label filter's join, whose rows
# are indexed in the list order: `experiments.filters.LabelSelectorFilter`). The page is then
# ordered, and the cursor compared, on that column, so the database walks that index.
ORDER_ALIAS = "order_{}"


def order_alias(name: str) -> str:
    """The annotation that stands for the key `name` in a queryset that provides one."""
    return ORDER_ALIAS.format(name)


def ordered_on(queryset, keys: list[Key]) -> list[Key]:
    """Return `keys` renamed to the queryset's `order_alias` annotations when it annotates
    every one of them (an index holds them in that order), else `keys` as they are."""
    annotations = queryset.query.annotations
    if not all(order_alias(k.name) in annotations for k in keys):
        return keys
    return [Key(order_alias(k.name), k.descending) for k in keys]


def order_by(keys: list[Key], *, reverse: bool = False) -> list[str]:
    """Return the `order_by` terms of `keys` (each direction flipped for a backward walk)."""
    return [Key(k.name, k.descending != reverse).term for k in keys]


def after(keys: list[Key], values: tuple[Any, ...], *, reverse: bool = False) -> Q:
    """Return the filter of the rows strictly after `values` in the order of `keys`.

    With `reverse`, the rows strictly before it (the previous page, walked backwards).

    The tuple comparison is written out (`k1 > v1 OR (k1 = v1 AND ...)`) and, in front of it,
    the bound it implies on the first key alone (`k1 >= v1`): a plain range both SQLite and
    MariaDB use to start the index scan at the cursor (an index on `(filter, k1, ..., id)`), the
    OR then only decides among the few rows sharing `v1`.
    """
    condition: Q | None = None
    for key, value in zip(reversed(keys), reversed(values)):
        forward = key.descending == reverse  # ascending forward, or descending backward
        step = Q(**{f"{key.name}__{'gt' if forward else 'lt'}": value})
        condition = step if condition is None else step | (Q(**{key.name: value}) & condition)
    if condition is None:
        return Q()
    if len(keys) > 1:
        first = keys[0]
        forward = first.descending == reverse
        condition = Q(**{f"{first.name}__{'gte' if forward else 'lte'}": values[0]}) & condition
    return condition


def values_of(row: models.Model | Mapping[str, Any], keys: list[Key]) -> tuple[Any, ...]:
    """Return the key values of `row`: a model instance, or a `.values()` row (a dict)."""
    if isinstance(row, Mapping):
        return tuple(row[key.name] for key in keys)
    return tuple(getattr(row, key.name) for key in keys)


def encode(keys: list[Key], values: tuple[Any, ...], *, reverse: bool = False) -> str:
    """Return the opaque cursor of the position `values` in the order of `keys`."""
    payload = {"v": VERSION, "o": [k.term for k in keys], "k": [_to_json(v) for v in values],
               "r": int(reverse)}
    # orjson writes what `json.dumps(separators=(",", ":"))` does, a non-ASCII name as UTF-8
    # rather than escaped: `decode` reads both.
    return base64.urlsafe_b64encode(orjson.dumps(payload)).decode().rstrip("=")


def decode(cursor: str, model: type[models.Model], keys: list[Key], *,
           param: str = "cursor") -> Position:
    """Return the position a cursor stands for, every value checked against its field.

    Raises:
        ValidationFailed: keyed `param`: not a cursor of this module, made for another
            ordering, or a value of the wrong type (a "timestamp" that is not one, a
            non-integer or out-of-range id, an overlong name).
    """
    def refuse(why: str) -> ValidationFailed:
        return ValidationFailed({param: [
            f"is not a cursor this API gave out ({why}); follow the `next` or `previous` link "
            "unchanged, or start again without it."]})

    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR_CHARS:
        raise refuse("too long")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = json.loads(raw.decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        # RecursionError: JSON nested deeper than Python recurses (`[[[[...`), never a 500.
        raise refuse("not encoded as one") from None
    if not isinstance(payload, dict) or payload.get("v") != VERSION:
        raise refuse("unknown version")
    if payload.get("o") != [k.term for k in keys]:
        raise refuse("it belongs to another ordering")
    values, reverse = payload.get("k"), payload.get("r")
    if not isinstance(values, list) or len(values) != len(keys) or reverse not in (0, 1) \
            or isinstance(reverse, bool):
        raise refuse("malformed")
    checked = []
    for key, value in zip(keys, values):
        problem, parsed = _from_json(model._meta.get_field(key.name), value)
        if problem:
            raise refuse(f"{key.name}: {problem}")
        checked.append(parsed)
    return Position(tuple(checked), bool(reverse))


def _to_json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _from_json(field: models.Field, value: Any) -> tuple[str | None, Any]:
    """Check one cursor value against its model field; return `(problem or None, value)`."""
    if isinstance(field, models.DateTimeField):
        if not isinstance(value, str):
            return "not a timestamp", None
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return "not a timestamp", None
        if parsed.tzinfo is None:
            return "a timestamp without a time zone", None
        try:  # the database compares in UTC; year 1 to 9999 only
            parsed = parsed.astimezone(timezone.utc)
        except OverflowError:
            return "a timestamp out of range", None
        return None, parsed
    if isinstance(field, (models.IntegerField, models.AutoField)):
        if type(value) is not int or not INT_MIN <= value <= INT_MAX:
            return "not a 64-bit integer", None
        return None, value
    if isinstance(field, models.CharField):
        if not isinstance(value, str) or (field.max_length and len(value) > field.max_length):
            return "not a string of at most the field's length", None
        if "\x00" in value:
            return "contains NUL", None
        if has_surrogate(value):
            return "contains a lone surrogate", None
        return None, value
    return "a key of a type cursors do not carry", None


# The page queries of every list, compiled once per shape (filters, ordering, cursor, size).
_PAGE_QUERIES = QueryShapes()


def page_rows(queryset, page_size: int, keys: list[Key], *, columns: list[Key] | None = None,
              position: Position | None = None) -> list[dict[str, Any]]:
    """Return the first `page_size + 1` rows of a `.values()` queryset as `{"id": ...}` dicts.

    What `list(queryset.filter(after(columns, position.values, ...))[:page_size + 1])` gives
    (the row after the page tells whether another page follows), less the work of the rows
    nobody reads: the compiler's raw rows are read (`SQLCompiler.execute_sql`) and only the
    page's first and last rows get every key converted by Django's converters
    (`results_iter`; a date-time parsed, on SQLite) and kept, as the cursors of the
    `previous` and `next` links are made of them (walking backwards, the page is these rows
    reversed: the same two); the others keep only their id (an integer as the driver reads
    it). On a page of 50 that is about half the page query's CPU. The SQL is compiled once per
    shape of the query (`core.database.prepared.QueryShapes`: the filters' values change only
    its parameters), and the cursor's condition is compiled once per shape and direction and
    never built again: its values are bound where the first compile put them
    (`QueryShapes.statement_with`).

    Args:
        queryset: `.values()` of `id` and each key's field, ordered (on `columns`, for the
            walk's direction) and filtered; not yet narrowed to the cursor.
        page_size: the rows of a page.
        keys: the ordering's keys (`keys_for`), `id` last.
        columns: the columns the page is ordered on (`ordered_on`; default `keys`).
        position: the cursor's position (the page starts after it), or None for the first.

    Raises:
        ValueError: the queryset does not read every key (a caller's bug).
    """
    # The columns' names as `.values()` gives them (Django 5.2 keeps them in `selected`,
    # annotations included; `core.database.prepared.IdsQuery` reads them the same way).
    names = list(getattr(queryset.query, "selected", None) or queryset.query.values_select)
    if any(key.name not in names for key in keys):
        raise ValueError(f"the page query reads {names}, not every key of "
                         f"{[key.term for key in keys]}")
    columns = keys if columns is None else columns
    db = queryset.db
    limit = page_size + 1
    if position is None:
        query = queryset[:limit].query
        prepared = _PAGE_QUERIES.statement(query, db)
    else:
        reverse = position.reverse
        fields = [queryset.model._meta.get_field(key.name) for key in keys]
        connection = connections[db]
        prepared = _PAGE_QUERIES.statement_with(
            queryset[:limit].query, db, variant=(tuple(columns), reverse),
            build=lambda values: queryset.filter(
                after(columns, tuple(values), reverse=reverse))[:limit].query,
            values=position.values, sentinels=[_sentinel(field, i) for i, field in
                                               enumerate(fields)],
            prepare=lambda i, value: fields[i].get_db_prep_value(value, connection))
    if prepared is None:  # a shape not kept (`qs.none()`, ...): compiled as usual
        if position is not None:
            query = queryset.filter(after(columns, position.values,
                                          reverse=position.reverse))[:limit].query
        compiler = query.get_compiler(using=db)
        raw = list(chain.from_iterable(compiler.execute_sql(MULTI)))  # [] for `qs.none()`
    else:
        sql, params, compiler = prepared
        with connections[db].cursor() as cursor:
            cursor.execute(sql, params)
            raw = cursor.fetchall()
    id_at = names.index("id")
    rows: list[dict[str, Any]] = [{"id": row[id_at]} for row in raw]
    edges = sorted({0, min(len(raw), page_size) - 1}) if raw else []
    converted = compiler.results_iter(results=[[raw[index] for index in edges]])
    for index, values in zip(edges, converted):
        rows[index] = dict(zip(names, values))
    return rows


def _sentinel(field: models.Field, index: int) -> Any:
    """A value of `field`'s type, distinct for each `index`, that no cursor compares with: the
    placeholder `page_rows` compiles a cursor's condition with (never sent to a database)."""
    if isinstance(field, models.DateTimeField):
        return datetime(1971, 1, 1, 0, 0, 0, index + 1, tzinfo=timezone.utc)
    if isinstance(field, (models.IntegerField, models.AutoField)):
        return -(index + 1)
    return f"\x00sentinel-{index}"
