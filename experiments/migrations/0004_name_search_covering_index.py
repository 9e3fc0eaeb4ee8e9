"""The name search's index covers its page query: (name, created_at, id).

`search=text` is a case-insensitive prefix of the name, listed newest first. With an index on
the name alone, every matching row was read from the table for its `created_at` before the
matches were sorted (26 ms for 3,275 matches of 100,000 on SQLite); with the list keys in the
index the database sorts index entries only (3 ms). On SQLite the index is on the name
`COLLATE NOCASE` (what its `LIKE` needs), replacing 0002's `exp_name_nocase`; on MariaDB, whose
collation already ignores case, it replaces the name's own index. The new index is made before
the old one goes, so the search is never without one.
"""

from django.db import migrations, models

NAME_INDEX = "exp_name_nocase"  # SQLite
NAME_CREATED_INDEX = "exp_name_created"  # MariaDB


def create_covering_index(apps, schema_editor):
    """(name, created_at, id): NOCASE on SQLite, the column's own collation on MariaDB."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"DROP INDEX IF EXISTS {NAME_INDEX}")
        schema_editor.execute(f"CREATE INDEX {NAME_INDEX} ON experiments "
                              "(name COLLATE NOCASE, created_at, id)")
    elif schema_editor.connection.vendor == "mysql":
        schema_editor.execute(f"CREATE INDEX {NAME_CREATED_INDEX} ON experiments "
                              "(name, created_at, id)")


def drop_covering_index(apps, schema_editor):
    """Back to 0003: the SQLite NOCASE index on the name alone; nothing more on MariaDB."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"DROP INDEX IF EXISTS {NAME_INDEX}")
        schema_editor.execute(f"CREATE INDEX {NAME_INDEX} ON experiments (name COLLATE NOCASE)")
    elif schema_editor.connection.vendor == "mysql":
        schema_editor.execute(f"DROP INDEX {NAME_CREATED_INDEX} ON experiments")


def recreate_sqlite_index(apps, schema_editor):
    """SQLite may rebuild the table to alter the field, which drops indexes the models do not
    declare: make sure the covering one exists afterwards."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {NAME_INDEX} ON experiments "
                              "(name COLLATE NOCASE, created_at, id)")


class Migration(migrations.Migration):

    # MariaDB cannot run DDL inside a transaction (each statement commits on its own).
    atomic = False

    dependencies = [
        ('experiments', '0003_labels_idempotency_clone'),
    ]

    operations = [
        migrations.RunPython(create_covering_index, drop_covering_index),
        migrations.AlterField(
            model_name='experiment',
            name='name',
            field=models.CharField(max_length=255),
        ),
        migrations.RunPython(recreate_sqlite_index, migrations.RunPython.noop),
    ]
