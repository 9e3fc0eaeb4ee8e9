"""Conversions shared by every app's gRPC mappers: timestamps, ids, optional fields, filters.

Thin translation only: values are parsed into the shapes the selectors and services take, and
malformed input becomes a `ValidationFailed` naming the request field.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from google.protobuf.timestamp_pb2 import Timestamp

from core.limits import jsoninput
from core.errors import ValidationFailed

if TYPE_CHECKING:
    from core.http.filters import FalconFilterSet
    from core.domain.statemachine import StatusChange

# CommonListReq field -> the filter it sets in the entity's FilterSet (`core.http.filters`): the one
# place where the proto's names meet the names of the HTTP API and the admin.
LIST_FILTER_NAMES: dict[str, str] = {
    "statuses": "status",
    "exp_statuses": "exp_status",
    "cluster_names": "cluster_name",
    "exp_types": "exp_type",
    "ids": "id",
    "exp_ids": "exp_id",
    "updated_since": "updated_since",
    "labels": "label",
}
PROTO_FIELD_OF: dict[str, str] = {name: field for field, name in LIST_FILTER_NAMES.items()}


def timestamp(value: datetime | None) -> Timestamp | None:
    """Return `value` as a protobuf Timestamp (UTC); None stays None (the field stays unset)."""
    if value is None:
        return None
    ts = Timestamp()
    ts.FromDatetime(value.astimezone(timezone.utc) if value.tzinfo else value)
    return ts


# A Timestamp's valid range (google/protobuf/timestamp.proto), which is also Python's datetime's:
# 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
TIMESTAMP_MIN_SECONDS = -62_135_596_800
TIMESTAMP_MAX_SECONDS = 253_402_300_799
MAX_NANOS = 999_999_999


def datetime_of(message: Any, field: str) -> datetime | None:
    """Return the aware UTC datetime in Timestamp field `field` of `message`, None if unset.

    Raises:
        ValidationFailed: `seconds` is outside years 1 to 9999 or `nanos` outside
            0..999,999,999, reported under `field`.
    """
    if not message.HasField(field):
        return None
    value = getattr(message, field)
    if not TIMESTAMP_MIN_SECONDS <= value.seconds <= TIMESTAMP_MAX_SECONDS:
        raise ValidationFailed({field: [
            f"seconds {value.seconds} is outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59Z "
            f"({TIMESTAMP_MIN_SECONDS}..{TIMESTAMP_MAX_SECONDS}); send a real instant."]})
    if not 0 <= value.nanos <= MAX_NANOS:
        raise ValidationFailed({field: [
            f"nanos {value.nanos} is outside 0..{MAX_NANOS}; carry whole seconds in seconds."]})
    return value.ToDatetime(tzinfo=timezone.utc)


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


def repeated_values(values: Sequence[Any], field: str, *,
                    choices: Iterable[str] | None = None) -> list[Any]:
    """Return a repeated filter field's values, de-duplicated in order (a state read's
    `statuses` and `cluster_names`, outside the FilterSets).

    Args:
        values: the request's repeated field; its length is checked before any value is read.
        field: its name, for errors.
        choices: the allowed values (`JobStatus`), None for any.

    Raises:
        ValidationFailed: more than `core.http.filters.MAX_FILTER_VALUES` values, or a value not
            one of `choices`; reported under `field`.
    """
    from core.http.filters import check_value_count

    check_value_count(field, len(values))
    if choices is not None:
        known = list(choices)
        for value in dict.fromkeys(values):
            require_choice(value, field, known)
    return list(dict.fromkeys(values))


def parse_items(items: Iterable[Any], parse: Callable[[Any], Any]) -> list[Any]:
    """Return `[parse(item) for item in items]` for a batch request's repeated `items`.

    Raises:
        ValidationFailed: `parse` refused an item; its fields are keyed `items[<index>].<field>`
            (`items[3].status`), so the caller knows which item to fix.
    """
    out = []
    for index, item in enumerate(items):
        try:
            out.append(parse(item))
        except ValidationFailed as exc:
            raise ValidationFailed({f"items[{index}].{field}": messages
                                    for field, messages in exc.errors.items()}) from None
    return out


def status_changes(items: Sequence[Any], statuses: Iterable[str], *,
                   extra_fields: tuple[str, ...] = (),
                   with_start: bool = False) -> list[StatusChange]:
    """The `core.domain.statemachine.StatusChange`s of a batch status call's items
    (UpdateExpStatuses, UpdateJobStatuses: repeated `Update<X>StatusReq`).

    Args:
        items: the request's `items`; their number is checked before any is read.
        statuses: the entity's status names (`JobStatus`).
        extra_fields: optional text fields of an item set with the transition
            (`("cluster_job_name",)`).
        with_start: items have a Timestamp `started_at` (UpdateJobStatusReq).

    Raises:
        ValidationFailed: more than `MAX_STATUS_BATCH` items (keyed `items`), or a malformed
            item (keyed `items[<index>].<field>`: a bad id, status, expected or
            started_at).
    """
    from core.domain.statemachine import StatusChange, check_batch_size

    check_batch_size(len(items))  # before reading any: a huge request costs little
    known = list(statuses)

    def parse(item: Any) -> StatusChange:
        expected = optional(item, "expected")
        return StatusChange(
            require_id(item.id), require_choice(item.status, "status", known),
            reason=optional(item, "reason"), message=optional(item, "message"),
            expected=None if expected is None else require_choice(expected, "expected", known),
            extra=tuple((name, value) for name in extra_fields
                        if (value := optional(item, name)) is not None),
            started_at=datetime_of(item, "started_at") if with_start else None)

    return parse_items(items, parse)


def json_value(text: str, field: str) -> Any:
    """Parse a `*_json` request field as strict JSON (`core.limits.jsoninput`: bounded depth, no
    duplicate keys, NaN or lone surrogates); None when empty. The domain validates the content.

    Raises:
        ValidationFailed: the text is not such JSON, reported under `field`.
    """
    if not text:
        return None
    try:
        return jsoninput.loads(text)
    except jsoninput.JSONInputError as exc:
        raise ValidationFailed({field: [str(exc)]}) from None


def list_filters(request: Any, filterset_class: type[FalconFilterSet], *,
                 rpc: str) -> dict[str, Any]:
    """Return a CommonListReq's filters as the validated values of the entity's FilterSet.

    The proto's fields map onto the FilterSet's filter names through `LIST_FILTER_NAMES`, so
    `statuses` is the HTTP API's and the admin's `status`, and so on; the values are checked by
    the same FilterSet as over HTTP, and errors are reported under the request's field names.

    Args:
        request: a `falcon.v1.CommonListReq`.
        filterset_class: the listed entity's FilterSet (`ExperimentFilter`, `JobFilter`,
            `ArtifactFilter`): the filters it declares are the ones this RPC applies.
        rpc: the RPC's name, for messages (`ListJobs`).

    Returns:
        `{"status": [...], "id": [...], "updated_since": datetime, ...}` with only the filters
        given, as `FalconFilterSet.validate` returns them: pass it to the entity's selector.

    Raises:
        ValidationFailed: a filter this RPC does not apply is set, a repeated field has more
            than `core.http.filters.MAX_FILTER_VALUES` values, a status is unknown, or an id is not
            positive; each reported under its request field (`statuses`, `ids`, ...).
    """
    from core.http.filters import too_many_values

    declared = set(filterset_class.filter_names())
    supported = sorted(field for field, name in LIST_FILTER_NAMES.items() if name in declared)
    errors: dict[str, list[str]] = {}
    data: dict[str, Any] = {}
    for field, name in LIST_FILTER_NAMES.items():
        if field == "updated_since":
            value = datetime_of(request, field)
        else:
            repeated = getattr(request, field)
            # Its length first: a list over the limit is refused before a value is copied.
            if (problem := too_many_values(len(repeated))) is not None:
                errors[field] = [problem]
                continue
            value = list(repeated) or None
        if value is None:
            continue
        if name not in declared:
            errors[field] = [f"is not a filter of {rpc}; use {', '.join(supported)} or leave it "
                             "empty."]
            continue
        data[name] = value
    try:
        values = filterset_class.validate(data)
    except ValidationFailed as exc:
        errors.update({PROTO_FIELD_OF.get(name, name): messages
                       for name, messages in exc.errors.items()})
    if errors:
        raise ValidationFailed(errors)
    return values
