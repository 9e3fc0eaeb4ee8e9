"""Structured logs: JSON lines in production, readable lines locally, one setting to switch.

`FALCON_LOG_FORMAT=json` writes one JSON object per line (python-json-logger's `JsonFormatter`:
`time`, `level`, `logger`, `message`, `request_id`, and the ids of the experiment, job or
analysis the line is about); `text` (the default) writes
`2026-01-02 03:04:05,678 INFO falcon.transitions [req 3f2a…] Job 7 Pending -> Running exp_id=5 job_id=7`.

Every record goes through `ContextFilter` (installed on the handler, so it sees every logger's
records), which

- adds `request_id`: the HTTP request's or gRPC call's id (`core.observability.context`), `-` outside one;
- adds the ids of the current `log_context` (`exp_id`, `job_id`, `artifact_id`,
  `analysis_id`) unless the call passed its own in `extra`;
- masks credentials that reached a message anyway (`Bearer <token>`, a JWT, `token=...`), so no
  token or secret is ever written, whatever a library logs.

A `text` line is one line whatever its fields hold (`TextFormatter`): a request path, user agent,
user, experiment name or error text may carry a newline, a carriage return, ESC or a Unicode line
separator from anyone who can send a request, and written raw it would start a forged record or
drive the reader's terminal. `escape_controls` writes every control character of the record's
line as a visible escape (`\\n`, `\\r`, `\\x1b`, `\\u2028`); a traceback keeps its real newlines,
but each of its lines is escaped and indented under the record, so no line of it can begin like
a record (decisions.md#dec-sec-surface). The `json` format escapes them inside its strings.

Django's own loggers go through the same handler: `django.server` (runserver's access lines,
`falcon_site/management/commands/runserver.py` adds their fields) and `django` (no handler of
its own, so no second, plain-text copy under `DJANGO_DEBUG`). A record's `request` (Django's
request object, or runserver's socket) and `server_time` are not written as fields: the request's
repr holds its query string. Under `json`, `apply_config` (Django's `LOGGING_CONFIG`) also
routes Python warnings and uncaught exceptions (of the main thread and of other threads)
through logging, and `LogWriter` turns what a management command prints into records, so every
line a process writes is a JSON object.

No Django imports: controllers configure their logging with `configure` too.
"""
from __future__ import annotations

import contextvars
import io
import logging
import logging.config
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from core.observability.context import current_request_id
from core.observability.redaction import REDACTED, SECRET_PATTERNS, redact  # noqa: F401 (re-exported)

# The ids a log line about an entity carries, as JSON keys and `key=value` text.
CONTEXT_KEYS = ("exp_id", "job_id", "artifact_id", "analysis_id")
FORMATS = ("text", "json")
# What `escape_controls` rewrites: C0 (with \t \n \r ESC), DEL, C1 (with NEL U+0085), the
# Unicode line and paragraph separators (which `str.splitlines` and many viewers break on) and
# the bidirectional overrides and isolates (which make a viewer show text in another order).
_CONTROL_CODES = (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029,
                  *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_NAMED_ESCAPES = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_ESCAPES = {code: _NAMED_ESCAPES.get(code) or (f"\\x{code:02x}" if code <= 0xFF
                                               else f"\\u{code:04x}")
            for code in _CONTROL_CODES}
# Under a record, each line of its traceback starts with this: a record starts with a date.
TRACEBACK_INDENT = "    | "

_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "falcon_log_context", default={})


class log_context:  # noqa: N801 (used as a function: `with log_context(exp_id=5):`)
    """Make every log line in the block carry `ids` (e.g. `exp_id=5, job_id=7`).

    Nested blocks add to the outer ones; None values are left out. A class rather than a
    generator (`contextmanager`), at half the cost: the resource manager enters one per job
    each tick, 100,000 at a time.
    """

    __slots__ = ("_ids", "_token")

    def __init__(self, **ids: Any):
        self._ids = ids

    def __enter__(self) -> None:
        self._token = _context.set({**_context.get(),
                                    **{k: v for k, v in self._ids.items() if v is not None}})

    def __exit__(self, *exc_info: object) -> None:
        _context.reset(self._token)


def add_log_ids(**ids: Any) -> None:
    """Add `ids` to the innermost `log_context` block, for the rest of it: for an id learnt
    inside the block (the experiment of an analysis once its record is read). The block's end
    drops them with its own ids; call it only inside a block. None values are left out."""
    _context.set({**_context.get(), **{k: v for k, v in ids.items() if v is not None}})


def escape_controls(text: str) -> str:
    """Return `text` on one line: every control character written as a visible escape.

    `\\n`, `\\r` and `\\t` by name, other C0, DEL and C1 characters as `\\xNN`, the line and
    paragraph separators and the bidirectional controls as `\\uNNNN`. A backslash already
    in `text` stays as it is: the `json` format is the unambiguous record, this one is read.
    """
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """The `text` format: the record's line with `escape_controls` applied to all of it (the
    message and every field the format string names), then its traceback and stack, each
    line escaped and indented by `TRACEBACK_INDENT` (module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one escaped line, plus its indented traceback lines."""
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = escape_controls(self.formatMessage(record))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        extra = [text for text in (record.exc_text,
                                   record.stack_info and self.formatStack(record.stack_info))
                 if text]
        for text in extra:
            line += "".join(f"\n{TRACEBACK_INDENT}{escape_controls(part)}"
                            for part in text.splitlines())
        return line


def text_formatter(fmt: str | None = None, datefmt: str | None = None) -> TextFormatter:
    """A new `TextFormatter` of `fmt` (the `text` format's by default), for handlers made
    elsewhere (gunicorn's, `gunicorn.conf.py`, which keeps its own formats)."""
    return TextFormatter(fmt or logging_config()["formatters"]["text"]["fmt"], datefmt)


# What every LogRecord has (not a caller's field): never user data, but for msg and args.
_RECORD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class ContextFilter(logging.Filter):
    """Add `request_id`, the `log_context` ids and `context` (their text) to every record, and
    mask credentials in its message and exception text (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        # Django logs a response (`django.request`) after the middleware reset the id: the
        # request object it passes still has it (`core.http.middleware.RequestContextMiddleware`).
        record.request_id = (getattr(record, "request_id", None) or current_request_id()
                             or getattr(getattr(record, "request", None), "request_id", None)
                             or "-")
        for key, value in _context.get().items():
            if getattr(record, key, None) is None:
                setattr(record, key, value)
        record.context = "".join(f" {key}={getattr(record, key)}" for key in CONTEXT_KEYS
                                 if getattr(record, key, None) is not None)
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        for key, value in record.__dict__.items():  # the fields a JSON line carries too
            if key not in _RECORD_ATTRIBUTES and isinstance(value, str):
                masked = redact(value)
                if masked != value:
                    record.__dict__[key] = masked
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def log_format(environ: Mapping[str, str] | None = None) -> str:
    """The log format from `FALCON_LOG_FORMAT`: `text` (default) or `json`.

    Raises:
        ValueError: another value, naming the setting and the allowed values.
    """
    value = (environ if environ is not None else os.environ).get("FALCON_LOG_FORMAT", "text")
    value = (value or "text").strip().lower()
    if value not in FORMATS:
        raise ValueError(f"FALCON_LOG_FORMAT={value!r} is not valid: use text (readable lines, "
                         "the default) or json (one JSON object per line, for production).")
    return value


def logging_config(fmt: str = "text", level: str = "INFO") -> dict[str, Any]:
    """Return a `logging.config.dictConfig` dict: one console handler in `fmt` at `level`.

    Args:
        fmt: `text` or `json` (`log_format`).
        level: the root logger's level name (`INFO`).
    """
    from pythonjsonlogger.core import RESERVED_ATTRS

    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": "core.observability.logs.ContextFilter"}},
        "formatters": {
            "text": {"()": "core.observability.logs.TextFormatter",
                     "fmt": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] "
                               "%(message)s%(context)s"},
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
                "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
                # `context` is the text form of the ids, which are keys of their own here;
                # `request` and `server_time` are Django's objects, not fields (see above).
                "reserved_attrs": [*RESERVED_ATTRS, "context", "request", "server_time"],
                "timestamp": False,
            },
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": fmt,
                                 "filters": ["context"]}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # runserver's access lines: Django gives them a plain-text handler of their own.
            "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
            # Django's console (DEBUG only) and mail handlers: the root's handler writes them.
            "django": {"handlers": [], "level": "INFO", "propagate": True},
        },
    }


def json_formatter() -> logging.Formatter:
    """A new formatter of the `json` format (`logging_config`), for handlers made elsewhere
    (gunicorn's, `gunicorn.conf.py`)."""
    from pythonjsonlogger.json import JsonFormatter

    spec = dict(logging_config("json")["formatters"]["json"])
    spec.pop("()")
    return JsonFormatter(**spec)


def apply_config(config: dict[str, Any]) -> None:
    """Apply a `logging_config` dict; under `json` also log warnings and uncaught exceptions.

    Django's `LOGGING_CONFIG` (falcon_site/settings/base.py) names this function, so Django
    calls it with `LOGGING` after its own defaults.

    Args:
        config: a `logging.config.dictConfig` dict (`logging_config`).
    """
    logging.config.dictConfig(config)
    if config.get("handlers", {}).get("console", {}).get("formatter") == "json":
        logging.captureWarnings(True)  # `py.warnings` records instead of text on stderr
        sys.excepthook = _log_uncaught
        threading.excepthook = lambda args: _log_uncaught(
            args.exc_type, args.exc_value, args.exc_traceback,
            thread=getattr(args.thread, "name", "?"))


def _log_uncaught(exc_type, exc_value, exc_traceback, thread: str | None = None) -> None:
    """Log an exception nothing caught (`sys.excepthook`, `threading.excepthook`) as one record."""
    if issubclass(exc_type, KeyboardInterrupt) and thread is None:
        sys.__excepthook__(exc_type, exc_value, exc_traceback)
        return
    where = f" in thread {thread}" if thread else ""
    logging.getLogger("falcon.uncaught").critical(
        "uncaught %s%s: %s", exc_type.__name__, where, exc_value,
        exc_info=(exc_type, exc_value, exc_traceback))


def configure(fmt: str | None = None, level: str | None = None) -> None:
    """Configure the process's logging (`logging_config`, `apply_config`), from the
    environment by default (`FALCON_LOG_FORMAT`, `FALCON_LOG_LEVEL`).

    Raises:
        ValueError: `FALCON_LOG_FORMAT` is neither `text` nor `json` (`log_format`).
    """
    apply_config(logging_config(
        fmt or log_format(), level or os.environ.get("FALCON_LOG_LEVEL", "INFO")))


class LogWriter(io.TextIOBase):
    """A text stream that logs each line written to it as one record of `logger` at `level`.

    Under `json`, what a management command prints (`self.stdout`, `self.stderr`: runserver's
    banner, `Falcon is running`, ...) goes through it, so it is a JSON line like the rest
    (`core.management.LoggedOutputMixin`). Blank lines are dropped; a last line without a
    newline is logged by `flush`.

    Args:
        logger: the `logging.Logger` to log to.
        level: the records' level (`logging.INFO`, ...).
    """

    def __init__(self, logger: logging.Logger, level: int):
        super().__init__()
        self.logger = logger
        self.level = level
        self._partial = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        """Always True: a writable stream."""
        return True

    def isatty(self) -> bool:
        """Always False: no terminal, so no colours."""
        return False

    def write(self, text: str) -> int:
        """Log every complete line of `text` (with what an earlier write left); returns its
        length."""
        with self._lock:
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        """Log the last line when it did not end with a newline."""
        with self._lock:
            line, self._partial = self._partial, ""
        self._emit(line)

    def _emit(self, line: str) -> None:
        line = line.rstrip()
        if line.strip():
            self.logger.log(self.level, "%s", line)
