"""The periodic loops' schedules (exp reconcile, resource sync, offline analysis discovery,
retention): read from django-celery-beat's tables, served to the controllers over gRPC.

`selectors.py` (the defaults and `schedule_get`), `grpc/schedule_servicer.py` (ScheduleService).
The app has no models of its own: the rows are django-celery-beat's `PeriodicTask`, and the data
migration that creates the defaults stays `core.0002_default_schedules`
(docs/decisions.md#dec-schedules-app).
"""
