"""The HTTP body parser: JSON only, bounded in size and depth, strict (`core.limits.jsoninput`).

Kept apart from `core.http.drf`, which imports DRF's views: DRF's settings import this parser.
"""
from __future__ import annotations

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

from core.limits import jsoninput


def too_large_message(size: int | None = None) -> str:
    """The message of a request body over `DATA_UPLOAD_MAX_MEMORY_SIZE`."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    got = f"is {size} bytes" if size is not None else "is larger than that"
    return (f"The request body {got}; the limit is {limit} bytes (docs/limits.md). Keep large "
            "data in the artifact store and reference it from the config.")


class RequestTooLarge(APIException):
    """The request body is over `DATA_UPLOAD_MAX_MEMORY_SIZE`: HTTP 413 `too_large`."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "The request body is too large."


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, bounded and strict (`core.limits.jsoninput`).

    Reads at most `DATA_UPLOAD_MAX_MEMORY_SIZE` bytes (413 `too_large` beyond), and refuses
    nesting deeper than `MAX_JSON_DEPTH`, a key given twice in one object, NaN/Infinity and lone
    surrogate escapes with a 400 `parse_error` saying which.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge(too_large_message())
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error: the body is not {encoding} text ({exc}).")
        try:
            return jsoninput.loads(text)
        except jsoninput.JSONInputError as exc:
            raise ParseError(f"JSON parse error: {exc}") from None


class MergePatchParser(StrictJSONParser):
    """`application/merge-patch+json` (RFC 7396, section 4), read as `StrictJSONParser` reads
    JSON: what `kubectl patch --type merge` and Kubernetes clients send for a merge patch.
    Only views whose PATCH is a JSON merge patch list it."""

    media_type = "application/merge-patch+json"
