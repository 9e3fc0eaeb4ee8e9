"""gunicorn settings read from the working directory: the local mode listens on loopback only;
Prometheus metrics are added up across workers.

`gunicorn falcon_site.wsgi --bind ...` loads this file before binding. In the local mode
(`FALCON_AUTH_MODE` unset or `local`) a non-loopback `--bind` stops gunicorn unless
FALCON_LOCAL_ALLOW_NONLOOPBACK=1 (docs/decisions.md#auth-10), which prints a warning instead.

With several workers, `/metrics` must report every worker's counts, not the one that answered:
set `PROMETHEUS_MULTIPROC_DIR` to an empty, writable folder (prometheus-client's multiprocess
mode, `core.observability.metrics`). It is emptied when gunicorn starts (files of a previous run would be
added in), and `child_exit` marks a dead worker's live gauges gone.

Under `FALCON_LOG_FORMAT=json` gunicorn's own lines are JSON like the application's
(`FalconGunicornLogger`): its error log ("Starting gunicorn", "Booting worker", a worker's
traceback) and, when `--access-logfile` is given, its access lines, with the fields `method`,
`path` (no query string), `status`, `bytes`, `duration_ms` and `request_id` (the response's
`X-Request-ID`, the id the application served the request under). Under `text` gunicorn's own
formats are kept, written by `core.observability.logs.TextFormatter`: a control character a request put in a
field (its path, user agent, referer) is escaped, so each access line is one line. In both,
credentials are masked (`core.observability.logs.ContextFilter`).

A header line may hold the verifier's largest access token plus a margin (`core.limits.tokens`):
gunicorn's default, 8190 bytes, answered 431 to a legitimate 8 KiB token the verifier accepts.
The request line keeps gunicorn's 4094 bytes: no token ever travels in a URL.
"""
import logging
import os
import sys

from gunicorn.glogging import Logger as GunicornLogger

# gunicorn runs from the project's root (it adds the working directory to sys.path).
from core.limits.tokens import MAX_HEADER_FIELD_BYTES

limit_request_field_size = MAX_HEADER_FIELD_BYTES


class AccessFields(logging.Filter):
    """Give a `gunicorn.access` record its fields from gunicorn's atoms (its args), and a
    message without the query string: `GET /api/v1/exps 200 1234 bytes 5.2 ms`."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Set the fields and the message from the record's atoms; always True (kept)."""
        atoms = record.args if isinstance(record.args, dict) else None
        if atoms is None:
            return True
        status = str(atoms.get("s", ""))
        sent = atoms.get("B")
        duration_ms = round(atoms["D"] / 1000, 1) if isinstance(atoms.get("D"), int) else None
        record.method = atoms.get("m") or "-"
        record.path = atoms.get("U") or "-"
        record.status = int(status) if status.isdigit() else None
        record.bytes = sent if isinstance(sent, int) else None
        record.duration_ms = duration_ms
        request_id = atoms.get("{x-request-id}o")
        if request_id and request_id != "-":
            record.request_id = request_id
        record.msg, record.args = (f"{record.method} {record.path} {status} {sent} bytes"
                                   f"{'' if duration_ms is None else f' {duration_ms} ms'}"), None
        return True


class FalconGunicornLogger(GunicornLogger):
    """gunicorn's logger, writing JSON lines under `FALCON_LOG_FORMAT=json` (module docstring)."""

    def setup(self, cfg):
        """Set gunicorn's handlers up and give each the ids-and-redaction filter (`core.observability.logs`:
        credentials are masked in either format); under json also the JSON formatter, and the
        access log its fields; under text gunicorn's own format with control characters
        escaped."""
        super().setup(cfg)
        from core.observability.logs import ContextFilter, json_formatter, log_format, text_formatter

        json_lines = log_format() == "json"
        if json_lines and not any(isinstance(f, AccessFields) for f in self.access_log.filters):
            self.access_log.addFilter(AccessFields())
        for logger in (self.error_log, self.access_log):
            for handler in logger.handlers:
                if json_lines:
                    handler.setFormatter(json_formatter())
                else:
                    own = handler.formatter or logging.Formatter()
                    handler.setFormatter(text_formatter(own._fmt, own.datefmt))
                if not any(isinstance(f, ContextFilter) for f in handler.filters):
                    handler.addFilter(ContextFilter())


logger_class = FalconGunicornLogger


def on_starting(server):
    """Refuse (exit 1) or warn about the configured binds before gunicorn listens."""
    from core.processes.ports import local_bind_problem

    mode = os.environ.get("FALCON_AUTH_MODE", "local")
    opt_in = os.environ.get("FALCON_LOCAL_ALLOW_NONLOOPBACK", "").strip().lower() in {
        "1", "true", "yes", "on"}
    _reset_multiproc_dir()
    for addr in server.cfg.bind:
        if addr.startswith(("unix:", "fd://")):
            continue
        refusal, warning = local_bind_problem(addr, mode=mode, opt_in=opt_in)
        if refusal:
            sys.stderr.write(f"gunicorn --bind {refusal}\n")
            sys.exit(1)
        if warning:
            sys.stderr.write(warning + "\n")


def _reset_multiproc_dir() -> None:
    """Empty `PROMETHEUS_MULTIPROC_DIR` (create it if missing) before any worker starts."""
    import shutil
    from pathlib import Path

    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        return
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    for child in path.iterdir():
        if child.is_file() and child.suffix == ".db":
            child.unlink()
        elif child.is_dir():
            shutil.rmtree(child)


def child_exit(server, worker):
    """A worker exited: prometheus-client's multiprocess mode forgets its live gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
