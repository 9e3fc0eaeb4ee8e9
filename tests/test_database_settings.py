"""Database settings and checks: health checks on reused connections, utf8mb4 everywhere.

Each MariaDB test creates what it needs (a latin1 database, a latin1 table, a connection the
server then kills) and removes it; SQLite has neither server-side drops nor character sets.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.core import checks
from django.db import close_old_connections, connection, connections

from falcon_site.db_checks import charset_errors

ROOT = Path(__file__).resolve().parent.parent
mariadb_only = pytest.mark.skipif(
    connection.vendor != "mysql",
    reason="MySQL/MariaDB only: SQLite has no server to drop connections and no character sets")


def _database_settings(**env) -> dict:
    # The settings module alone (no `django.setup()`: the apps add nothing to these values).
    code = ("import json; from django.conf import settings; "
            "print(json.dumps({k: v for k, v in settings.DATABASES['default'].items() "
            "if k in ('CONN_MAX_AGE', 'CONN_HEALTH_CHECKS')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, text=True,
                         capture_output=True,
                         env={**os.environ, "DJANGO_SETTINGS_MODULE": "falcon_site.settings",
                              "PYTHONPATH": str(ROOT), **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.every_database  # the settings of the DATABASE_URL the pass runs on
def test_reused_connections_are_health_checked():
    assert _database_settings(FALCON_DB_CONN_MAX_AGE="60") == {
        "CONN_MAX_AGE": 60, "CONN_HEALTH_CHECKS": True}
    assert _database_settings(FALCON_DB_CONN_MAX_AGE="0") == {
        "CONN_MAX_AGE": 0, "CONN_HEALTH_CHECKS": False}


def test_an_sqlite_file_is_written_ahead_without_an_fsync_per_commit(tmp_path):
    """The embedded SQLite file runs in WAL mode with synchronous=NORMAL: readers go on while a
    write commits, and a commit does not wait for the disk (settings, dec-database).

    The pragmas are the connection's `init_command` (settings), so a fresh process opens the
    connection without `django.setup()`, which would load every app for nothing."""
    code = ("from django.db import connection; "
            "cursor = connection.cursor(); cursor.execute('PRAGMA journal_mode'); "
            "mode = cursor.fetchone()[0]; cursor.execute('PRAGMA synchronous'); "
            "print(mode, cursor.fetchone()[0])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, text=True,
                         capture_output=True,
                         env={**os.environ, "DJANGO_SETTINGS_MODULE": "falcon_site.settings",
                              "PYTHONPATH": str(ROOT), "FALCON_VAR_DIR": str(tmp_path),
                              "DATABASE_URL": f"sqlite:///{tmp_path / 'falcon.sqlite3'}"})
    assert out.stdout.split() == ["wal", "1"]  # 1 is NORMAL


def _sqlite_pragma(tmp_path, pragma: str, mmap_bytes: str | None) -> subprocess.CompletedProcess:
    """Read `PRAGMA <pragma>` in a fresh process on an SQLite file, FALCON_SQLITE_MMAP_BYTES
    set to `mmap_bytes` (None: unset)."""
    code = ("from django.db import connection; "
            f"print(connection.cursor().execute('PRAGMA {pragma}').fetchone()[0])")
    env = {key: value for key, value in os.environ.items() if key != "FALCON_SQLITE_MMAP_BYTES"}
    if mmap_bytes is not None:
        env["FALCON_SQLITE_MMAP_BYTES"] = mmap_bytes
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, capture_output=True,
                          env={**env, "DJANGO_SETTINGS_MODULE": "falcon_site.settings",
                               "PYTHONPATH": str(ROOT), "FALCON_VAR_DIR": str(tmp_path),
                               "DATABASE_URL": f"sqlite:///{tmp_path / 'falcon.sqlite3'}"})


@pytest.mark.parametrize("mmap_bytes,expected", [(None, str(256 * 1024 * 1024)),
                                                 ("1048576", "1048576"), ("0", "0")])
def test_an_sqlite_file_is_read_through_a_memory_map_of_the_configured_size(
        tmp_path, mmap_bytes, expected):
    """256 MiB by default (pages come from the OS cache, shared by every process); the
    variable sets another size, 0 none."""
    assert _sqlite_pragma(tmp_path, "mmap_size", mmap_bytes).stdout.split() == [expected]


@pytest.mark.parametrize("mmap_bytes", ["256MB", "-1", "", "1e9"])
def test_a_memory_map_size_that_is_not_a_byte_count_stops_the_settings(tmp_path, mmap_bytes):
    bad = _sqlite_pragma(tmp_path, "mmap_size", mmap_bytes)
    assert bad.returncode != 0
    assert "FALCON_SQLITE_MMAP_BYTES must be a size in bytes" in bad.stderr


@mariadb_only
@pytest.mark.django_db(transaction=True)
def test_a_connection_dropped_by_the_server_does_not_fail_the_next_request():
    """A thread keeps its connection (CONN_MAX_AGE > 0); the server kills it while idle; the
    next request on that thread reconnects instead of failing."""
    result: dict = {}

    def worker(step: threading.Event, go: threading.Event):
        conn = connections["default"]
        conn.settings_dict.update(CONN_MAX_AGE=600, CONN_HEALTH_CHECKS=True)
        try:
            close_old_connections()  # request_started
            with conn.cursor() as cursor:
                cursor.execute("SELECT CONNECTION_ID()")
                result["id"] = cursor.fetchone()[0]
            close_old_connections()  # request_finished: the connection is kept
            step.set()
            go.wait(10)
            close_old_connections()  # the next request_started
            with conn.cursor() as cursor:
                cursor.execute("SELECT 1")
                result["answer"] = cursor.fetchone()[0]
        except Exception as exc:  # the failure under test
            result["error"] = exc
        finally:
            conn.close()
            step.set()

    step, go = threading.Event(), threading.Event()
    thread = threading.Thread(target=worker, args=(step, go))
    thread.start()
    step.wait(10)
    with connection.cursor() as cursor:
        cursor.execute(f"KILL {int(result['id'])}")
    go.set()
    thread.join(20)
    assert result.get("answer") == 1, result


@mariadb_only
@pytest.mark.django_db(transaction=True)
def test_charset_check_refuses_a_latin1_database_and_table_with_the_fix():
    from django.db.backends.mysql.base import DatabaseWrapper

    name = f"{connection.settings_dict['NAME']}_latin1"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET latin1")
    probe = DatabaseWrapper({**connection.settings_dict, "NAME": name}, alias="charset_probe")
    try:
        with probe.cursor() as cursor:
            cursor.execute("CREATE TABLE experiments (id INT PRIMARY KEY, name VARCHAR(10))")
            cursor.execute("CREATE TABLE not_falcon (id INT PRIMARY KEY)")
        errors = charset_errors(probe)
    finally:
        probe.close()
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE `{name}`")
    assert [e.id for e in errors] == ["falcon.E004", "falcon.E005"], errors
    assert errors[0].hint == (f"Run: ALTER DATABASE `{name}` CHARACTER SET utf8mb4 "
                              "COLLATE utf8mb4_unicode_ci;")
    assert errors[1].hint == ("Run: ALTER TABLE `experiments` CONVERT TO CHARACTER SET utf8mb4 "
                              "COLLATE utf8mb4_unicode_ci;")
    assert "latin1" in errors[0].msg and "latin1" in errors[1].msg


@mariadb_only
@pytest.mark.django_db(transaction=True)
def test_a_latin1_falcon_table_fails_the_database_checks_that_migrate_runs():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE charset_probe_table (id INT) CHARACTER SET latin1")
    try:
        assert checks.run_checks(databases=["default"], tags=[checks.Tags.database]) == []
        from falcon_site import db_checks

        original = db_checks.falcon_tables
        db_checks.falcon_tables = lambda: original() | {"charset_probe_table"}
        try:
            errors = checks.run_checks(databases=["default"], tags=[checks.Tags.database])
        finally:
            db_checks.falcon_tables = original
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE charset_probe_table")
    assert [e.id for e in errors] == ["falcon.E005"]
    assert "ALTER TABLE `charset_probe_table` CONVERT TO CHARACTER SET utf8mb4" in errors[0].hint


def test_the_charset_check_passes_on_the_test_database(db):
    # On SQLite there is nothing to check; on MariaDB the suite's database is utf8mb4.
    assert checks.run_checks(databases=["default"], tags=[checks.Tags.database]) == []
