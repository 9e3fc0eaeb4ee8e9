"""core.observability.logs: the format switch, the ids every line carries, and credentials never written."""
from __future__ import annotations

import io
import json
import logging
import logging.config
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.observability.context import reset_request_id, set_request_id
from core.observability.logs import (
    TRACEBACK_INDENT, escape_controls, log_context, log_format, logging_config, redact,
)


def _capture(fmt: str):
    stream = io.StringIO()
    config = logging_config(fmt, "DEBUG")
    config["handlers"]["console"]["stream"] = stream
    config["root"] = {"handlers": [], "level": "WARNING"}
    config["loggers"] = {"falcon.test": {"handlers": ["console"], "level": "DEBUG",
                                         "propagate": False}}
    logging.config.dictConfig(config)
    return logging.getLogger("falcon.test"), stream


@pytest.fixture(autouse=True)
def _restore_logging():
    yield
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


def test_json_lines_carry_request_and_entity_ids():
    log, stream = _capture("json")
    token = set_request_id("req-1")
    try:
        with log_context(exp_id=5):
            with log_context(job_id=7):
                log.info("job %s moved", 7)
            log.info("own id wins", extra={"exp_id": 6})
    finally:
        reset_request_id(token)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first == {"time": first["time"], "level": "INFO", "logger": "falcon.test",
                     "message": "job 7 moved", "request_id": "req-1", "exp_id": 5, "job_id": 7}
    assert second["exp_id"] == 6 and "job_id" not in second


def test_text_lines_are_readable_with_ids_at_the_end():
    log, stream = _capture("text")
    with log_context(analysis_id="an-0123"):
        log.warning("analysis stalled")
    line = stream.getvalue().strip()
    assert line.endswith("WARNING falcon.test [-] analysis stalled analysis_id=an-0123")


def test_credentials_are_masked_in_messages_and_tracebacks():
    log, stream = _capture("text")
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    log.info("headers: %s", {"authorization": f"Bearer {jwt}"})
    try:
        raise ValueError(f"bad token={jwt[:20]} at mysql://root:hunter2secret@db/falcon")
    except ValueError:
        log.exception("failed")
    out = stream.getvalue()
    assert jwt not in out and jwt[:20] not in out and "hunter2secret" not in out
    assert out.count("[redacted]") >= 3 and "ValueError" in out


def test_credentials_are_masked_in_every_field_of_a_json_line():
    """A field carries what the message does (a path with a token in it): masked the same."""
    log, stream = _capture("json")
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    log.info("POST %s", f"/api/v1/exps/{jwt}/abort",
             extra={"path": f"/api/v1/exps/{jwt}/abort", "status": 404})
    line = json.loads(stream.getvalue())
    assert jwt not in stream.getvalue()
    assert line["path"] == "/api/v1/exps/[redacted]/abort" and line["status"] == 404


def test_a_credential_sent_as_the_request_id_is_replaced():
    from core.observability.context import new_request_id

    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    assert new_request_id("trace-0af7651916cd43dd8448eb211c80319c") == (
        "trace-0af7651916cd43dd8448eb211c80319c")
    replaced = new_request_id(jwt)
    assert replaced != jwt and len(replaced) == 32


def test_redact_keeps_ordinary_text():
    text = "Experiment 5: Running -> Succeeded (Completed) by alice@example.com"
    assert redact(text) == text
    assert redact("Authorization: Bearer abcdefgh12345678") == "Authorization: Bearer [redacted]"


def test_format_setting_accepts_text_and_json_only():
    assert log_format({}) == "text" and log_format({"FALCON_LOG_FORMAT": "JSON"}) == "json"
    with pytest.raises(ValueError, match="FALCON_LOG_FORMAT='xml' is not valid"):
        log_format({"FALCON_LOG_FORMAT": "xml"})


@pytest.mark.django_db
def test_lines_an_http_view_logs_carry_the_ids_of_its_path(client, caplog):
    """RequestContextMiddleware.process_view: a line logged while the view runs (here DRF's
    authentication refusing a token) carries the path's exp_id, and so does the request's line."""
    from core.observability.logs import ContextFilter

    caplog.handler.addFilter(ContextFilter())
    with caplog.at_level(logging.INFO):
        reply = client.get("/api/v1/exps/5", HTTP_AUTHORIZATION="Bearer not-a-token",
                           HTTP_X_REQUEST_ID="req-view-1")
    assert reply.status_code == 401
    refused = [r for r in caplog.records if r.name == "accounts.authentication"]
    [line] = [r for r in caplog.records if r.name == "falcon.http"]
    assert refused and all((r.exp_id, r.request_id) == (5, "req-view-1") for r in refused)
    assert (line.exp_id, line.method, line.path, line.status) == (5, "GET", "/api/v1/exps/5",
                                                                  401)


# -- control characters: one record, one line (text), one object per line (json) ---------------

_LINE_BREAKERS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@given(st.text())
def test_escape_controls_leaves_one_line_without_control_characters(text):
    out = escape_controls(text)
    assert len(out.splitlines()) <= 1
    assert not any(unicodedata.category(ch) == "Cc" or ch in "\u2028\u2029" for ch in out)
    # Printable text is kept as it is.
    if not any(unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cf") for ch in text):
        assert out == text


def test_escape_controls_writes_visible_escapes():
    assert escape_controls("a\nb\rc\td\x1b[31me\x7f\x85\u2028\u202e") == (
        "a\\nb\\rc\\td\\x1b[31me\\x7f\\x85\\u2028\\u202e")


def test_every_field_of_a_text_line_is_escaped():
    """The message, the request id and the ids' values: none can start a line of its own."""
    log, stream = _capture("text")
    token = set_request_id("req\n2026-01-01 00:00:00,000 INFO forged")
    try:
        with log_context(exp_id="5\r\x1b[2K"):
            log.warning("exp %s by %s", "name\u2028forged", "agent\x85x",
                        extra={"job_id": "7\nforged"})
    finally:
        reset_request_id(token)
    out = stream.getvalue()
    [line] = out.splitlines()
    assert "[req\\n2026-01-01 00:00:00,000 INFO forged]" in line
    assert "exp name\\u2028forged by agent\\x85x" in line
    assert line.endswith(" exp_id=5\\r\\x1b[2K job_id=7\\nforged")


def test_a_traceback_keeps_its_lines_indented_and_escaped():
    log, stream = _capture("text")
    try:
        raise ValueError("bad\n2026-01-01 00:00:00,000 INFO forged\x1b[0m")
    except ValueError:
        log.exception("failed")
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("ERROR falcon.test [-] failed")
    assert len(lines) > 2 and all(line.startswith(TRACEBACK_INDENT) for line in lines[1:])
    # A newline in the exception's text is a line of the traceback: indented like the rest.
    assert lines[-2:] == [f"{TRACEBACK_INDENT}ValueError: bad",
                          f"{TRACEBACK_INDENT}2026-01-01 00:00:00,000 INFO forged\\x1b[0m"]


def test_a_stack_is_indented_under_its_record():
    log, stream = _capture("text")
    log.info("where", stack_info=True)
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith(" where")
    assert lines[1] == f"{TRACEBACK_INDENT}Stack (most recent call last):"
    assert all(line.startswith(TRACEBACK_INDENT) for line in lines[1:])


@settings(max_examples=50)
@given(st.text(), st.text())
def test_json_lines_hold_any_text_on_one_line(message, path):
    log, stream = _capture("json")
    log.info("%s", message, extra={"path": path})
    out = stream.getvalue()
    assert out.endswith("\n") and len(out[:-1].splitlines()) == 1
    assert not any(ch in _LINE_BREAKERS for ch in out[:-1])
    record = json.loads(out)
    assert record["message"] == redact(message) and record["path"] == redact(path)
