"""Offline discovery's mark on the artifact, and "" on every artifact that may owe analysis now.

The backfill is one UPDATE: the artifacts that are Succeeded and kept, of Succeeded experiments
(the artifacts ListExpsAwaitingAnalysis considers). The next poll settles those that owe nothing.
"""
from django.db import migrations, models


def mark_awaiting(apps, schema_editor):
    Artifact = apps.get_model("artifacts", "Artifact")
    Artifact.objects.filter(status="Succeeded", prune_state="",
                            experiment__status="Succeeded").update(offline_settled="")


class Migration(migrations.Migration):

    dependencies = [
        ("artifacts", "0002_manifest_pruned"),
        ("experiments", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="artifact",
            name="offline_settled",
            field=models.CharField(blank=True, db_index=True, max_length=64, null=True),
        ),
        migrations.RunPython(mark_awaiting, migrations.RunPython.noop, elidable=True),
    ]
