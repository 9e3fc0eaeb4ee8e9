"""The outputs of an analysis in the store, as the API server reads them itself: the log
(`output.log`) and the results file (`{plugin}.jsonl`) under the record's `result_path`
(docs/analyzer.md, "Storage layout"). Used by the HTTP API and the admin."""
from __future__ import annotations

import json

import orjson

from artifacts.store import store_for
from core.limits import jsoninput
from core.errors import NotFound

from .models import AnalysisRecord

RESULTS_MAX_RECORDS = 10_000
RESULTS_MAX_BYTES = 16 * 1024 * 1024
UNPARSABLE_MAX = 100  # lines that are not JSON objects, reported by number
LOG_FILE = "output.log"


def log_from_store(record: AnalysisRecord, offset: int, limit: int) -> tuple[bytes, str]:
    """Read `output.log` from the store directly (the controller is unavailable)."""
    note = "read from the store: the analyzer controller is unavailable"
    if not record.result_path:
        return b"", note + "; the analysis has no output folder"
    try:
        return store_for(record.result_path + LOG_FILE).read_range(
            record.result_path + LOG_FILE, offset, limit), note
    except FileNotFoundError:
        return b"", note + "; no log has been written yet"


JSON_TYPES = {list: "an array", str: "a string", bool: "a boolean", int: "a number",
              float: "a number", type(None): "null"}


def parse_line(line: bytes) -> tuple[dict | None, str]:
    """Parse one line of a results file: `(object, "")`, or `(None, why not)`.

    Why not: `not UTF-8`; `not JSON: <the parser's error> at column N`; the strict parser's
    refusal (NaN, a duplicate key, ...); or `not a JSON object (an array)`.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:
        value = jsoninput.loads(text)
    except jsoninput.JSONInputError as exc:
        try:
            json.loads(text)
        except json.JSONDecodeError as error:
            return None, f"not JSON: {error.msg} at column {error.colno}"
        except (ValueError, RecursionError):
            # The standard parser recurses per level: a line of 200,000 `[` exhausts the
            # stack here although the strict parser refused it within its depth limit.
            pass
        return None, str(exc)
    if not isinstance(value, dict):
        return None, f"not a JSON object ({JSON_TYPES.get(type(value), 'a value')})"
    return value, ""


def _with_non_finite(line: bytes) -> object | None:
    """The value of a line orjson refuses for a non-finite number: `NaN`, `Infinity`,
    `-Infinity` (what Python's `json.dumps` writes for non-finite floats, so what a user's own
    script writes) or a literal past the double range (`1e400`), each read as null or
    infinity, both a non-finite number to the compare. None when the line still is not JSON,
    or holds what orjson refuses to write (a lone surrogate)."""
    try:
        value = json.loads(line.decode("utf-8"), parse_constant=lambda _name: None)
        orjson.dumps(value)
    except (UnicodeDecodeError, ValueError, RecursionError, orjson.JSONEncodeError):
        return None
    return value


def parse_line_fast(line: bytes) -> tuple[dict | None, str]:
    """`parse_line` for readers that keep only numbers and names (the compare document): orjson,
    which refuses invalid UTF-8 and lone surrogates as the strict parser does, but lets the
    last of two equal keys win and allows deeper nesting; about 50 times faster. A line with
    `NaN`/`Infinity` (Python's `json.dumps` of a non-finite float) is read with each as null
    rather than dropped whole: one diverged loss must not hide the record's other metrics."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        value = _with_non_finite(line)
        if value is None:
            return None, f"not JSON: {exc}"
    if not isinstance(value, dict):
        return None, f"not a JSON object ({JSON_TYPES.get(type(value), 'a value')})"
    return value, ""


def parse_results(data: bytes, *, max_records: int = RESULTS_MAX_RECORDS,
                  max_unparsable: int = UNPARSABLE_MAX,
                  strict: bool = True) -> tuple[list[dict], list[dict], bool]:
    """Parse a results file: one JSON object a line (blank lines skipped); `strict` False reads
    the lines with `parse_line_fast` instead of `parse_line`.

    Returns `(records, unparsable, truncated)`: the objects in order; `{"line": n, "error":
    why}` (1-based) for each line that is not one (`parse_line`), kept apart so a record of any
    shape is never mistaken for one; truncated when more than `max_records` lines hold records
    or more than `max_unparsable` lines do not.
    """
    records: list[dict] = []
    unparsable: list[dict] = []
    parse = parse_line if strict else parse_line_fast
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        value, error = parse(line)
        if value is not None:
            if len(records) >= max_records:
                return records, unparsable, True
            records.append(value)
        else:
            if len(unparsable) >= max_unparsable:
                return records, unparsable, True
            unparsable.append({"line": number, "error": error})
    return records, unparsable, False


def results_url(record: AnalysisRecord) -> str:
    """The results file of an analysis: `{result_path}{plugin_name or 'result'}.jsonl`."""
    return f"{record.result_path}{record.plugin_name or 'result'}.jsonl"


def read_results(record: AnalysisRecord, *, max_records: int = RESULTS_MAX_RECORDS,
                 max_bytes: int = RESULTS_MAX_BYTES, strict: bool = True) -> dict:
    """Read and parse the results file from the store (the API server reads it itself).

    Returns `{"file", "records", "truncated", "unparsable"}` (`parse_results`); at most
    `max_records` records from the first `max_bytes` bytes (a line cut by the byte cap is
    dropped).

    Raises:
        NotFound: the file does not exist (yet).
    """
    url = results_url(record)
    try:
        data = store_for(url).read_range(url, 0, max_bytes + 1) if record.result_path else None
    except FileNotFoundError:
        data = None
    if data is None:
        yet = "" if record.is_terminal else " yet"
        raise NotFound(f"Analysis {record.analysis_id} has no results{yet}: {url} does not "
                       f"exist; it is {record.status}.")
    truncated = len(data) > max_bytes
    if truncated:
        data = data[: data.rfind(b"\n", 0, max_bytes) + 1]
    records, unparsable, more = parse_results(data, max_records=max_records, strict=strict)
    return {"file": url, "records": records, "truncated": truncated or more,
            "unparsable": unparsable}
