"""System check: on MySQL/MariaDB the database and every Falcon table are utf8mb4.

A database created with another default character set (latin1 on many servers) takes the
migrations without a word, and the first experiment whose config holds an emoji then fails with
"Incorrect string value". The check runs with the database checks (`manage.py migrate`,
`manage.py check --database default`), so `migrate` refuses such a database before creating a
table, and names the SQL that fixes it. Other backends have nothing to check.
"""
from __future__ import annotations

from django.apps import apps
from django.core.checks import Error
from django.db import connections

CHARSET = "utf8mb4"
COLLATION = "utf8mb4_unicode_ci"


def falcon_tables() -> set[str]:
    """Return the tables of every installed model: Falcon's apps and the Django apps it uses."""
    return {model._meta.db_table for model in apps.get_models(include_auto_created=True)
            if not model._meta.proxy and model._meta.managed}


def charset_errors(connection) -> list[Error]:
    """Return one Error for the database and one per table whose character set is not utf8mb4.

    Args:
        connection: a Django database connection; only `mysql` ones are inspected.
    """
    if connection.vendor != "mysql":
        return []
    errors: list[Error] = []
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute("SELECT DATABASE(), DEFAULT_CHARACTER_SET_NAME FROM "
                       "information_schema.SCHEMATA WHERE SCHEMA_NAME = DATABASE()")
        name, charset = cursor.fetchone()
        if charset != CHARSET:
            errors.append(Error(
                f"The database {name} has the default character set {charset}, not {CHARSET}: "
                "tables created in it would refuse names and configs outside "
                f"{charset} (an emoji in a config fails).",
                hint=f"Run: ALTER DATABASE {quote(name)} CHARACTER SET {CHARSET} "
                     f"COLLATE {COLLATION};",
                id="falcon.E004"))
        cursor.execute(
            "SELECT t.TABLE_NAME, c.CHARACTER_SET_NAME FROM information_schema.TABLES t "
            "JOIN information_schema.COLLATION_CHARACTER_SET_APPLICABILITY c "
            "ON c.COLLATION_NAME = t.TABLE_COLLATION "
            "WHERE t.TABLE_SCHEMA = DATABASE() AND t.TABLE_TYPE = 'BASE TABLE'")
        rows = cursor.fetchall()
    known = falcon_tables()
    for table, charset in sorted(rows):
        if table in known and charset != CHARSET:
            errors.append(Error(
                f"The table {table} has the character set {charset}, not {CHARSET}.",
                hint=f"Run: ALTER TABLE {quote(table)} CONVERT TO CHARACTER SET {CHARSET} "
                     f"COLLATE {COLLATION};",
                id="falcon.E005"))
    return errors


def check_database_charset(app_configs=None, databases=None, **kwargs) -> list[Error]:
    """System check (tag `database`): refuse a MySQL/MariaDB database or table not in utf8mb4."""
    errors: list[Error] = []
    for alias in databases or ():
        errors.extend(charset_errors(connections[alias]))
    return errors
