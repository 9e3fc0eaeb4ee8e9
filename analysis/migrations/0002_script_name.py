"""AnalysisRecord.script_name: the script's file name in the run's work folder."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('analysis', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='analysisrecord',
            name='script_name',
            field=models.CharField(blank=True, default='', max_length=255),
        ),
    ]
