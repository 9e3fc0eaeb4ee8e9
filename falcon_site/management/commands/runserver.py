"""`manage.py runserver` (what `runlocal` runs): staticfiles' runserver, structured access lines.

Django's development server logs one access line per request on the `django.server` logger,
which `core.observability.logs.logging_config` writes through the console handler like every other logger
(`FALCON_LOG_FORMAT`: JSON or readable text). This command gives that line its fields, through
Django's extension points (the command's `server_cls`, whose request handler is
`AccessLogHandler`), not by patching Django:

- `method`, `path` (without the query string, which may carry anything), `status`, `bytes`
  (the body bytes sent), `duration_ms` (from the parsed request line to the last byte sent),
  and `request_id`: the id the request is served under (`core.observability.context.new_request_id`: the
  client's valid `X-Request-ID`, else a new one), which the handler puts in the request's
  environ so the middleware (`core.http.middleware.RequestContextMiddleware`) serves and returns the
  same one, and `falcon.http`'s line and this one share it.

Under `json` what the command prints (the system check's summary, "Starting development server
at ...", Django's warning, "Error: That port is already in use.") is logged too
(`core.observability.commands.LoggedOutputMixin`), so every line it writes is a JSON object.
"""
from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit

from django.contrib.staticfiles.management.commands.runserver import Command as StaticRunserver
from django.core.servers.basehttp import WSGIRequestHandler, WSGIServer

from core.observability.commands import LoggedOutputMixin
from core.observability.context import new_request_id

log = logging.getLogger("django.server")


class AccessLogHandler(WSGIRequestHandler):
    """Django's request handler with one structured access line per request (module docstring).

    One handler serves one connection, its requests one after the other: what `get_environ`
    notes about a request is taken (and forgotten) by the `log_request` of its response.
    """

    _served: tuple[str, str, float] | None = None  # (request id, path, perf_counter at start)

    def get_environ(self) -> dict:
        """The WSGI environ of the request, its `HTTP_X_REQUEST_ID` the id it is served under."""
        environ = super().get_environ()
        request_id = new_request_id(environ.get("HTTP_X_REQUEST_ID"))
        environ["HTTP_X_REQUEST_ID"] = request_id
        self._served = (request_id, urlsplit(self.path).path, time.perf_counter())
        return environ

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Log the access line of the response just sent (`code`: its status, `size`: the body
        bytes), at INFO, WARNING for a 4xx and ERROR for a 5xx, as Django does.

        A request refused before it was parsed (400, 414) has no request id or path of its own:
        `request_id` is `-` and `path` what could be read of it.
        """
        served, self._served = self._served, None
        status = int(code) if str(code).isdigit() else None
        request_id, path, started = served or ("-", urlsplit(getattr(self, "path", "") or "").path,
                                               None)
        method = getattr(self, "command", None) or "-"
        fields = {"method": method, "path": path, "status": status,
                  "bytes": int(size) if str(size).isdigit() else None,
                  "request_id": request_id, "status_code": status}
        if started is not None:
            fields["duration_ms"] = round((time.perf_counter() - started) * 1000, 1)
        level = (logging.ERROR if (status or 0) >= 500 else
                 logging.WARNING if (status or 0) >= 400 else logging.INFO)
        log.log(level, "%s %s %s %s bytes%s", method, path, code, size,
                f" {fields['duration_ms']} ms" if "duration_ms" in fields else "", extra=fields)


class AccessLogServer(WSGIServer):
    """Django's development WSGI server, serving with `AccessLogHandler`."""

    def __init__(self, server_address, RequestHandlerClass, *args, **kwargs):  # noqa: N803
        if RequestHandlerClass is WSGIRequestHandler:
            RequestHandlerClass = AccessLogHandler  # noqa: N806
        super().__init__(server_address, RequestHandlerClass, *args, **kwargs)


class Command(LoggedOutputMixin, StaticRunserver):
    """staticfiles' runserver (`--insecure`, `--nostatic`) with structured access lines, and
    the local mode's start-up refusals."""

    server_cls = AccessLogServer

    def run(self, **options) -> None:
        """Refuse, in this process and before the autoreloader starts, what the local mode
        forbids: a non-loopback address without FALCON_LOCAL_ALLOW_NONLOOPBACK (as `rungrpc`,
        `runlocal` and gunicorn do), and user code run as the server (`core.processes.user_code`).

        Checked here rather than left to the served application: under the autoreloader a
        failure in the serving thread leaves the process waiting for file changes, with no
        exit status for a supervisor to see.

        Raises:
            CommandError: either refusal; the process exits non-zero.
        """
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured
        from django.core.management.base import CommandError

        from core.processes.ports import local_bind_problem
        from core.processes.user_code import require_isolated_user_code

        addr = f"[{self.addr}]:{self.port}" if self._raw_ipv6 or ":" in self.addr \
            else f"{self.addr}:{self.port}"
        refusal, warning = local_bind_problem(addr, mode=settings.FALCON_AUTH_MODE,
                                              opt_in=settings.FALCON_LOCAL_ALLOW_NONLOOPBACK)
        if refusal:
            raise CommandError(refusal)
        if warning:
            self.stderr.write(warning)
        try:
            require_isolated_user_code(tasks=True, analyses=False, warn=self.stderr.write)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        super().run(**options)
