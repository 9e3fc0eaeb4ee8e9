"""Numbers read from requests: ASCII decimal digits only, within bounds.

`int()` and `str.isdigit()` accept far more than a decimal number: `int(" +1_0 ")` is 10,
`int("١٢")` (Arabic-Indic digits) is 12, and `"²".isdigit()` is True while `int("²")` raises.
Every number a request carries (a query parameter, a path segment, a page token, a port) is
read through `parse_decimal`, so such input is a 400 naming the parameter, never a 500 and
never a silently different number.
"""
from __future__ import annotations

import re

from core.errors import ValidationFailed

_DECIMAL = re.compile(r"[0-9]{1,20}")  # ASCII only (no re.UNICODE \d); 20 digits > 2^64


class BadNumber(ValueError):
    """`raw` is not an ASCII decimal integer within the bounds; `str(exc)` says what is allowed."""


def parse_decimal(raw: object, *, minimum: int, maximum: int) -> int:
    """Return `raw` as an int when it is 1-20 ASCII digits whose value is in `minimum..maximum`.

    Args:
        raw: the value as the request gave it (normally a `str`).
        minimum, maximum: the inclusive bounds (`minimum` >= 0: no sign is ever accepted).

    Raises:
        BadNumber: not a str, empty, a sign, spaces, `_`, non-ASCII digits (`²`, `١`), more than
            20 digits, or out of bounds; the message is "must be an integer from MIN to MAX".
    """
    if not isinstance(raw, str) or not _DECIMAL.fullmatch(raw):
        raise BadNumber(f"must be an integer from {minimum} to {maximum} (ASCII digits only)")
    number = int(raw)
    if not minimum <= number <= maximum:
        raise BadNumber(f"must be an integer from {minimum} to {maximum}")
    return number


def parse_param(raw: object, *, field: str, minimum: int, maximum: int) -> int:
    """`parse_decimal` for a named request parameter.

    Raises:
        core.errors.ValidationFailed: `{field: ["must be an integer from MIN to MAX; got '…'"]}`
            (HTTP 400, gRPC INVALID_ARGUMENT); the echoed value is cut at 40 characters and
            shown with `repr`, so control characters never reach the body raw.
    """
    try:
        return parse_decimal(raw, minimum=minimum, maximum=maximum)
    except BadNumber as exc:
        shown = repr(raw[:40]) if isinstance(raw, str) else type(raw).__name__
        raise ValidationFailed({field: [f"{exc}; got {shown}."]}) from None
