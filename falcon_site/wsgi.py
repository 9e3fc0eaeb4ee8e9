"""WSGI entry point (`gunicorn falcon_site.wsgi`, and `runserver`'s WSGI_APPLICATION).

Refuses to load when the configured clusters would run users' tasks as this server's OS user
while more than one person can log in (`core.processes.user_code`): gunicorn runs no system checks, and
an API server that accepted such work would queue tasks that must never run. The worker then
fails to boot and gunicorn exits non-zero with the message.
"""
import os
import sys

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "falcon_site.settings")
application = get_wsgi_application()

# A chunked request body is read (bounded) or refused before Django, which reads none.
from core.http.middleware import ChunkedBodyWSGIMiddleware  # noqa: E402  (needs the apps loaded)

application = ChunkedBodyWSGIMiddleware(application)

from core.processes.user_code import require_isolated_user_code  # noqa: E402  (needs the apps loaded)

require_isolated_user_code(tasks=True, analyses=False,
                           warn=lambda text: sys.stderr.write(text + "\n"))
