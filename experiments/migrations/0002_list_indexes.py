"""List indexes: each list filter with the list order and its tie-breaker (status, creator,
cluster_name, exp_type, each followed by created_at, id); the single-column indexes they lead
with are dropped. The composite indexes are created first, so the creator's foreign key is
never without an index on MariaDB.

The name search (`search=`, a case-insensitive prefix) needs, on SQLite, an index on the name
`COLLATE NOCASE` for its `LIKE 'text%'`; MariaDB's index on the name already serves it (its
collation ignores case), so that index is created on SQLite only."""

import core.domain.statuses
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


NAME_NOCASE_INDEX = "exp_name_nocase"


def create_name_nocase_index(apps, schema_editor):
    """On SQLite, index the name `COLLATE NOCASE`: the prefix search's LIKE then uses it."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"CREATE INDEX {NAME_NOCASE_INDEX} ON experiments "
                              "(name COLLATE NOCASE)")


def drop_name_nocase_index(apps, schema_editor):
    """Drop the SQLite name index again (nothing to do on other databases)."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"DROP INDEX IF EXISTS {NAME_NOCASE_INDEX}")


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name='experiment',
            index=models.Index(fields=['status', 'created_at', 'id'], name='exp_status_created'),
        ),
        migrations.AddIndex(
            model_name='experiment',
            index=models.Index(fields=['creator', 'created_at', 'id'], name='exp_creator_created'),
        ),
        migrations.AddIndex(
            model_name='experiment',
            index=models.Index(fields=['cluster_name', 'created_at', 'id'], name='exp_cluster_created'),
        ),
        migrations.AddIndex(
            model_name='experiment',
            index=models.Index(fields=['exp_type', 'created_at', 'id'], name='exp_type_created'),
        ),
        migrations.AlterField(
            model_name='experiment',
            name='cluster_name',
            field=models.CharField(max_length=255),
        ),
        migrations.AlterField(
            model_name='experiment',
            name='creator',
            field=models.ForeignKey(db_column='creator_id', db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='experiments', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='experiment',
            name='exp_type',
            field=models.CharField(max_length=255),
        ),
        migrations.AlterField(
            model_name='experiment',
            name='status',
            field=models.CharField(choices=[('Created', 'Created'), ('Running', 'Running'), ('Succeeded', 'Succeeded'), ('Failed', 'Failed'), ('Aborting', 'Aborting'), ('Aborted', 'Aborted')], default=core.domain.statuses.ExpStatus['CREATED'], max_length=16),
        ),
        migrations.RunPython(create_name_nocase_index, drop_name_nocase_index),
    ]
