from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    """The loops' schedules: no models, reads django-celery-beat's `PeriodicTask` rows."""

    name = "schedules"
