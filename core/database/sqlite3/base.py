"""Django's SQLite backend, with each statement's placeholders converted once per process.

Django writes SQL with `%s` placeholders and its SQLite cursor turns them into sqlite3's `?`
on every execute (`SQLiteCursorWrapper.convert_query`: a regular expression with a
look-behind, run over the whole statement). For the statements a request repeats, which
`core.database.prepared` keeps compiled (a list page's rows query is over 2,000 characters),
that scan cost more than running the statement on its index. Here the converted text is kept
per statement text (at most `MAX_CONVERTED`, all forgotten when that is reached); everything
else is Django's backend as it is (`ENGINE = "core.database.sqlite3"`, set by the settings
for every SQLite `DATABASE_URL`; docs/decisions.md#dec-request-cpu).
"""
from __future__ import annotations

from django.db.backends.sqlite3 import base

MAX_CONVERTED = 2048

_converted: dict[str, str] = {}


class SQLiteCursorWrapper(base.SQLiteCursorWrapper):
    """Django's cursor, whose format-to-qmark conversion is looked up before it is made."""

    def convert_query(self, query, *, param_names=None):
        if param_names is not None:  # named parameters: Django's own conversion
            return super().convert_query(query, param_names=param_names)
        converted = _converted.get(query)
        if converted is None:
            converted = super().convert_query(query)
            if len(_converted) >= MAX_CONVERTED:
                _converted.clear()
            _converted[query] = converted
        return converted


class DatabaseWrapper(base.DatabaseWrapper):
    def create_cursor(self, name=None):
        return self.connection.cursor(factory=SQLiteCursorWrapper)
