"""Label rows carry their experiment's `created_at`, indexed after the key and value.

A page of the experiments holding `key=value` was either every holder's id sorted (few
holders) or the list order walked until the page was full, testing each experiment's labels
(many): at 1,000,000 experiments a label on 1 % of them walked about 5,000 experiments a
page. With (key, value, created_at, experiment) the holders are in the list order in the
index, and a page reads its 51 entries (`experiments.filters.LabelSelectorFilter`). The copy is
filled from the experiments here and written with every label (`experiments.services`).
"""

from django.db import migrations, models


def copy_created_at(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute(
            "UPDATE experiment_labels l JOIN experiments e ON e.id = l.experiment_id "
            "SET l.created_at = e.created_at")
    else:
        schema_editor.execute(
            "UPDATE experiment_labels SET created_at = (SELECT e.created_at FROM experiments e "
            "WHERE e.id = experiment_labels.experiment_id)")


class Migration(migrations.Migration):

    # MariaDB cannot run DDL inside a transaction (each statement commits on its own).
    atomic = False

    dependencies = [
        ('experiments', '0005_list_order_index_covers_name'),
    ]

    operations = [
        migrations.AddField(
            model_name='explabel',
            name='created_at',
            field=models.DateTimeField(null=True),
        ),
        migrations.RunPython(copy_created_at, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='explabel',
            name='created_at',
            field=models.DateTimeField(),
        ),
        migrations.AddIndex(
            model_name='explabel',
            index=models.Index(fields=['key', 'value', 'created_at', 'experiment'],
                               name='explabel_key_value_created'),
        ),
        migrations.RemoveIndex(
            model_name='explabel',
            name='explabel_key_value_exp',
        ),
    ]
