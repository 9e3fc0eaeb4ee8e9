"""Conversions shared by every app's gRPC mappers: timestamps, ids, optional fields, filters.

Thin translation only: values are parsed into the shapes the selectors and services take, and
malformed input becomes a `ValidationFailed` naming the request field.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from core.errors import ValidationFailed

LIST_FILTER_FIELDS = ("statuses", "exp_statuses", "cluster_names", "exp_types", "ids", "exp_ids")


def timestamp(value: datetime | None) -> Timestamp | None:
    """Return `value` as a protobuf Timestamp (UTC); None stays None (the field stays unset)."""
    if value is None:
        return None
    ts = Timestamp()
    ts.FromDatetime(value.astimezone(timezone.utc) if value.tzinfo else value)
    return ts


def datetime_of(message: Any, field: str) -> datetime | None:
    """Return the aware UTC datetime in Timestamp field `field` of `message`, None if unset."""
    if not message.HasField(field):
        return None
    return getattr(message, field).ToDatetime(tzinfo=timezone.utc)


def optional(message: Any, field: str) -> Any:
    """Return a proto3 `optional` field's value, or None when the sender did not set it."""
    return getattr(message, field) if message.HasField(field) else None


def require_id(value: int, field: str = "id") -> int:
    """Return `value` if it is a valid id (>= 1).

    Raises:
        ValidationFailed: `value` is 0 (unset) or negative, reported under `field`.
    """
    if value < 1:
        raise ValidationFailed({field: [f"is required: a positive integer id; got {value}."]})
    return value


def require_choice(value: str, field: str, choices: Iterable[str]) -> str:
    """Return `value` if it is one of `choices`.

    Raises:
        ValidationFailed: it is not, with the allowed values, reported under `field`.
    """
    choices = list(choices)
    if value not in choices:
        raise ValidationFailed({field: [f"{value!r} is not one of {', '.join(choices)}."]})
    return value


def json_value(text: str, field: str) -> Any:
    """Parse a `*_json` request field; None when empty. The domain validates the content.

    Raises:
        ValidationFailed: the text is not JSON, reported under `field`.
    """
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValidationFailed({field: [f"is not valid JSON ({exc})."]}) from None


def list_filters(request: Any, *, rpc: str, supported: Iterable[str],
                 status_choices: Iterable[str],
                 exp_status_choices: Iterable[str] = ()) -> dict[str, Any]:
    """Return a CommonListReq's filters as selector keyword arguments.

    Args:
        request: a `falcon.v1.CommonListReq`.
        rpc: the RPC's name, for messages (`ListJobs`).
        supported: the filter fields this RPC applies (of `LIST_FILTER_FIELDS`).
        status_choices: the listed entity's statuses.
        exp_status_choices: the experiment statuses (for `exp_statuses`).

    Returns:
        `{"statuses": [...], ..., "updated_since": datetime | None}` with only the filters given.

    Raises:
        ValidationFailed: a filter this RPC does not apply is set, a status is unknown, or an
            id is not positive; each reported under its field.
    """
    supported = set(supported)
    errors: dict[str, list[str]] = {}
    out: dict[str, Any] = {}
    for field in LIST_FILTER_FIELDS:
        values = list(getattr(request, field))
        if not values:
            continue
        if field not in supported:
            errors[field] = [f"is not a filter of {rpc}; use "
                             f"{', '.join(sorted(supported))} or leave it empty."]
            continue
        if field in ("statuses", "exp_statuses"):
            choices = list(status_choices if field == "statuses" else exp_status_choices)
            bad = [value for value in values if value not in choices]
            if bad:
                errors[field] = [f"{', '.join(map(repr, bad))} not known; use "
                                 f"{', '.join(choices)}."]
        if field in ("ids", "exp_ids") and any(value < 1 for value in values):
            errors[field] = ["must hold positive integer ids."]
        out[field] = values
    if errors:
        raise ValidationFailed(errors)
    out["updated_since"] = datetime_of(request, "updated_since")
    return out
