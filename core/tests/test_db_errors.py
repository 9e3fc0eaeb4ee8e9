"""Which database errors tell a client to retry (`core.database.db.is_unavailable`): a lost connection
or a lock conflict does; an error the query itself causes (an input no check bounded) does
not, on both databases."""
from __future__ import annotations

import pytest
from django.db import OperationalError, connection

from core.database.db import is_unavailable

pytestmark = pytest.mark.django_db


def _input_caused_error() -> OperationalError:
    """Run a query that fails because of its parameter alone, and return its error."""
    with connection.cursor() as cursor:
        try:
            if connection.vendor == "sqlite":
                # SQLite refuses a LIKE pattern over 50,000 bytes.
                cursor.execute("SELECT 1 WHERE 'a' LIKE %s", ["a%" * 40_000])
            else:
                # MariaDB's regexp library refuses an unbalanced group.
                cursor.execute("SELECT 'a' REGEXP %s", ["(a"])
        except OperationalError as exc:
            return exc
    pytest.fail("the query did not fail")


def test_an_error_caused_by_the_query_is_not_a_database_outage():
    exc = _input_caused_error()
    assert not is_unavailable(exc), exc


@pytest.mark.parametrize("args", [(2006, "MySQL server has gone away"),
                                  (2013, "Lost connection to server during query"),
                                  (1213, "Deadlock found"), (1205, "Lock wait timeout"),
                                  (1040, "Too many connections"), ("database is locked",)])
def test_a_lost_connection_or_lock_conflict_is_one(args):
    assert is_unavailable(OperationalError(*args))


def test_other_errors_are_not():
    assert not is_unavailable(ValueError("x"))
    assert not is_unavailable(OperationalError())
