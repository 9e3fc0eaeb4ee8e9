"""The loops' default schedules (schedules.selectors.DEFAULTS), as django-celery-beat rows
operators edit or pause in the admin. Existing rows of the same name are left as operators set
them. Applied history: it stays in core although the `schedules` app now reads the rows
(docs/decisions.md#dec-schedules-app)."""
from django.db import migrations

DEFAULTS = (
    ("exp-reconcile", "falcon.exp_reconcile", 2),
    ("resource-sync", "falcon.resource_sync", 2),
    ("offline-analysis-discovery", "falcon.offline_analysis_discovery", 10),
    ("retention", "falcon.prune_artifacts", 86400),
)


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, task, seconds in DEFAULTS:
        if PeriodicTask.objects.filter(name=name).exists():
            continue
        interval, _ = IntervalSchedule.objects.get_or_create(every=seconds, period="seconds")
        PeriodicTask.objects.create(name=name, task=task, interval=interval, enabled=True,
                                    description="A Falcon loop's interval (README, Operations).")


def remove(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name__in=[name for name, _task, _s in DEFAULTS]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_transition_history"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
