"""`core.database.sqlite3`: Django's SQLite backend whose placeholder conversion is kept per
statement gives what Django's gives, and runs statements as Django's does."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.backends.sqlite3.base import SQLiteCursorWrapper as DjangoCursor
from hypothesis import given, settings, strategies as st

from core.database.sqlite3 import base

pytestmark = pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite backend")

_PIECES = st.sampled_from(["%s", "%%", "%%s", "%", "s", "'%s'", " ", "x", "?", "%%%s"])


@given(pieces=st.lists(_PIECES, max_size=30))
@settings(max_examples=300)
def test_a_statement_is_converted_as_django_converts_it(pieces):
    query = "SELECT " + "".join(pieces)
    django_cursor = DjangoCursor.__new__(DjangoCursor)
    ours = base.SQLiteCursorWrapper.__new__(base.SQLiteCursorWrapper)
    expected = django_cursor.convert_query(query)
    assert ours.convert_query(query) == expected
    assert ours.convert_query(query) == expected  # kept
    assert base._converted[query] == expected


def test_named_parameters_are_left_to_django():
    ours = base.SQLiteCursorWrapper.__new__(base.SQLiteCursorWrapper)
    assert ours.convert_query("SELECT %(a)s", param_names=["a"]) == "SELECT :a"


@pytest.mark.django_db
def test_the_connection_runs_statements_through_it(monkeypatch):
    monkeypatch.setattr(base, "MAX_CONVERTED", 2)
    base._converted.clear()
    with connection.cursor() as cursor:
        assert isinstance(cursor.cursor, base.SQLiteCursorWrapper)
        for value in range(3):  # a third statement forgets the two kept
            cursor.execute(f"SELECT %s, '%%', {value}", [value])
            assert cursor.fetchall() == [(value, "%", value)]
    assert list(base._converted) == ["SELECT %s, '%%', 2"]
