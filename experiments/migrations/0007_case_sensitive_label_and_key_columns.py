"""Label keys and values, and idempotency keys, compared exactly on MariaDB too.

Kubernetes label keys and values are case-sensitive, and so are idempotency keys (a client's
UUID in another case is another key). MariaDB's default collation (`utf8mb4_unicode_ci`)
ignored case: `Team` and `team` were one key to the unique constraint (an experiment created
with both answered 500), `label=team=LLAMA` found `llama` there but not on SQLite, and an
idempotency key in another case replayed or refused another request's experiment. The columns
get the binary collation (`utf8mb4_bin`), which compares as SQLite's default (BINARY) does;
SQLite is unchanged. The indexes on them are rebuilt by the ALTER.
"""

from django.db import migrations

COLUMNS = {
    "experiment_labels": [("key", 317), ("value", 63)],
    "experiment_idempotency_keys": [("key", 255)],
}


def _alter(apps, schema_editor, collation: str) -> None:
    if schema_editor.connection.vendor != "mysql":
        return
    for table, columns in COLUMNS.items():
        changes = ", ".join(f"MODIFY `{name}` varchar({size}) CHARACTER SET utf8mb4 "
                            f"COLLATE {collation} NOT NULL" for name, size in columns)
        schema_editor.execute(f"ALTER TABLE `{table}` {changes}")


def to_binary(apps, schema_editor):
    _alter(apps, schema_editor, "utf8mb4_bin")


def to_default(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA "
                       "WHERE SCHEMA_NAME = DATABASE()")
        (collation,) = cursor.fetchone()
    _alter(apps, schema_editor, collation)


class Migration(migrations.Migration):

    # MariaDB cannot run DDL inside a transaction (each statement commits on its own).
    atomic = False

    dependencies = [
        ('experiments', '0006_label_rows_in_list_order'),
    ]

    operations = [migrations.RunPython(to_binary, to_default)]
