"""Structured logs: JSON lines in production, readable lines locally, one setting to switch.

`FALCON_LOG_FORMAT=json` writes one JSON object per line (python-json-logger's `JsonFormatter`:
`time`, `level`, `logger`, `message`, `request_id`, and the ids of the experiment, job or
analysis the line is about); `text` (the default) writes
`2026-01-02 03:04:05,678 INFO falcon.transitions [req 3f2a…] Job 7 Pending -> Running exp_id=5 job_id=7`.

Every record goes through `ContextFilter` (installed on the handler, so it sees every logger's
records), which

- adds `request_id`: the HTTP request's or gRPC call's id (`core.context`), `-` outside one;
- adds the ids of the current `log_context` (`exp_id`, `job_id`, `artifact_id`,
  `analysis_id`) unless the call passed its own in `extra`;
- masks credentials that reached a message anyway (`Bearer <token>`, a JWT, `token=...`), so no
  token or secret is ever written, whatever a library logs.

No Django imports: controllers configure their logging with `configure` too.
"""
from __future__ import annotations

import contextvars
import logging
import logging.config
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from core.context import current_request_id

# The ids a log line about an entity carries, as JSON keys and `key=value` text.
CONTEXT_KEYS = ("exp_id", "job_id", "artifact_id", "analysis_id")
FORMATS = ("text", "json")
REDACTED = "[redacted]"
# Credentials as they appear in text: an Authorization value, a JWT (three base64url parts, the
# first a JSON header `{"...` = `eyJ`), a `token=`/`secret=`/`password=` pair, a URL's password.
SECRET_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
    re.compile(r"(?i)\b((?:access_|refresh_|internal_)?token|secret|password|api_key)"
               r"(\s*[=:]\s*)(['\"]?)[^\s'\",;&]{6,}"),
    re.compile(r"(?<=://)([^/@\s:]+):([^/@\s]+)@"),
)

_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "falcon_log_context", default={})


@contextmanager
def log_context(**ids: Any) -> Iterator[None]:
    """Make every log line in the block carry `ids` (e.g. `exp_id=5, job_id=7`).

    Nested blocks add to the outer ones; None values are left out.
    """
    token = _context.set({**_context.get(), **{k: v for k, v in ids.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def redact(text: str) -> str:
    """Return `text` with every credential `SECRET_PATTERNS` finds replaced by `[redacted]`."""
    for pattern in SECRET_PATTERNS:
        if pattern.groups >= 3:
            text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
        elif pattern.groups == 2 and "://" in pattern.pattern:
            text = pattern.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
        elif pattern.groups == 1:
            text = pattern.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


class ContextFilter(logging.Filter):
    """Add `request_id`, the `log_context` ids and `context` (their text) to every record, and
    mask credentials in its message and exception text (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = getattr(record, "request_id", None) or current_request_id() or "-"
        for key, value in _context.get().items():
            if getattr(record, key, None) is None:
                setattr(record, key, value)
        record.context = "".join(f" {key}={getattr(record, key)}" for key in CONTEXT_KEYS
                                 if getattr(record, key, None) is not None)
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
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
        "filters": {"context": {"()": "core.logs.ContextFilter"}},
        "formatters": {
            "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] "
                               "%(message)s%(context)s"},
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
                "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
                # `context` is the text form of the ids, which are keys of their own here.
                "reserved_attrs": [*RESERVED_ATTRS, "context"],
                "timestamp": False,
            },
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": fmt,
                                 "filters": ["context"]}},
        "root": {"handlers": ["console"], "level": level},
    }


def configure(fmt: str | None = None, level: str | None = None) -> None:
    """Configure the process's logging (`logging_config`), from the environment by default."""
    logging.config.dictConfig(logging_config(
        fmt or log_format(), level or os.environ.get("FALCON_LOG_LEVEL", "INFO")))
