"""Keyset pages on the primary key for the List RPCs (falcon.v1 CommonListReq).

A page is `WHERE <filters> AND id > <last id> ORDER BY id LIMIT size + 1`: one query per page,
constant cost however deep the page, and rows inserted while a client pages never shift or repeat
a page (unlike OFFSET). The extra row only tells whether another page follows. The token is the
last id sent, base64-encoded with a version prefix: opaque to clients, so it can change later.

One bad row never fails a list: a row the mapper cannot encode (a value out of its proto field's
range, a task spec that is not JSON, any exception while mapping it, or a message larger than
any reply may carry, `MAX_ITEM_BYTES`) is logged with its id and the reason, left out of the page
and returned in `Page.skipped` (the replies' `skipped` field), and the page goes on past it. Otherwise every page that met the row would answer INTERNAL, and
the controllers, which list every tick, would stop.
"""
from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from core.http import keyset
from core.errors import ValidationFailed
from core.grpc.channel import MAX_MESSAGE_BYTES

log = logging.getLogger("falcon.grpc.paging")

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
# Responses stay under this many encoded bytes (the server and client accept 16 MiB messages):
# a page of jobs each carrying a large config ends early instead of failing the call.
PAGE_BYTE_BUDGET = 8 * 1024 * 1024
# One row's message must leave room in the reply for the rest of it (the next page token, the
# skipped rows of a page of up to MAX_PAGE_SIZE, each item's own tag and length). A larger row
# cannot be sent in any page: it is skipped like a row that cannot be encoded.
REPLY_RESERVE_BYTES = 64 * 1024
MAX_ITEM_BYTES = MAX_MESSAGE_BYTES - REPLY_RESERVE_BYTES
_TOKEN_PREFIX = "k1:"
_MAX_ID = 2**63 - 1  # the largest BIGINT id


def encode_page_token(last_id: int) -> str:
    """Return the opaque token of the page that follows the row `last_id`."""
    return base64.urlsafe_b64encode(f"{_TOKEN_PREFIX}{last_id}".encode()).decode().rstrip("=")


def decode_page_token(token: str) -> int | None:
    """Return the last id a token stands for; None for an empty token (the first page).

    Raises:
        ValidationFailed: the token was not made by `encode_page_token` (field `page_token`).
    """
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("ascii")
        if raw.startswith(_TOKEN_PREFIX):
            from core.limits.numbers import parse_decimal

            # ASCII digits within BIGINT: a larger id fails in the database driver.
            return parse_decimal(raw[len(_TOKEN_PREFIX):], minimum=0, maximum=_MAX_ID)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise ValidationFailed({"page_token": [
        "is not a token this server issued; send the next_page_token of the previous response "
        "unchanged, or none for the first page."]})


def page_size_of(requested: int, *, default: int = DEFAULT_PAGE_SIZE,
                 maximum: int = MAX_PAGE_SIZE) -> int:
    """Return the page size to use for a request's `page_size` (0 means `default`).

    Args:
        requested: the request's `page_size`.
        default: the size of a request that names none (rows).
        maximum: the largest size a request may name (rows): `MAX_PAGE_SIZE` for the List
            RPCs, more for a lean list such as ListExpStates.

    Raises:
        ValidationFailed: `requested` is negative or over `maximum` (field `page_size`).
    """
    if requested == 0:
        return default
    if requested < 0 or requested > maximum:
        raise ValidationFailed({"page_size": [
            f"must be between 1 and {maximum} (0 for {default}); got {requested}."
        ]})
    return requested


@dataclass(frozen=True)
class Page:
    """One page of messages, the token of the next page ("" on the last page), and the rows of
    this page that could not be mapped (left out of `items`, already logged)."""

    items: list[Any]
    next_page_token: str
    skipped: list[Any] = field(default_factory=list)


def keyset_page(queryset: QuerySet, *, page_size: int, page_token: str,
                to_message: Callable[[Any], Any],
                byte_budget: int = PAGE_BYTE_BUDGET, rpc: str = "") -> Page:
    """Return the page of `queryset` after `page_token`, mapped with `to_message`.

    A row `to_message` cannot map, or whose message alone passes `MAX_ITEM_BYTES`, is skipped:
    logged (rpc, model, id, reason, and the page's count of skipped rows), left out of `items`,
    returned in `Page.skipped`; the page goes on. A page therefore never passes the message
    limit: its rows stay under `byte_budget`, or it holds one row under `MAX_ITEM_BYTES`.

    Args:
        queryset: the filtered rows; its ordering is replaced by `id`.
        page_size: the request's `page_size` (0 = default, at most `MAX_PAGE_SIZE`).
        page_token: the request's `page_token` ("" for the first page).
        to_message: maps one row to its protobuf message.
        byte_budget: the page ends early, after at least one row, once its messages' encoded
            size would pass this many bytes.
        rpc: the list's name for the log ("ListJobs").

    Raises:
        ValidationFailed: `page_size` or `page_token` is invalid.
    """
    size = page_size_of(page_size)
    after = decode_page_token(page_token)
    qs = queryset.order_by("pk")
    if after is not None:
        qs = qs.filter(pk__gt=after)
    rows = list(qs[: size + 1])
    return fill_page(rows, size, to_message=to_message, byte_budget=byte_budget, rpc=rpc,
                 token_of=lambda row: encode_page_token(row.pk))


def ordered_keyset_page(queryset: QuerySet, *, ordering: tuple[str, ...], page_size: int,
                        page_token: str, to_message: Callable[[Any], Any],
                        byte_budget: int = PAGE_BYTE_BUDGET, rpc: str = "") -> Page:
    """Return the page of `queryset` in `ordering` after `page_token`, like `keyset_page`.

    For lists ordered by other keys than an integer id (ListAnalysisRecords: `(created_at,
    analysis_id)`, whose key is a string): the token is a `core.http.keyset` position on the full
    ordering (the primary key appended if missing), so rows created while a client pages never
    shift or repeat a page. Skipping, budgets and errors are `keyset_page`'s.

    Args:
        ordering: model field names, `-` for descending (`("created_at", "analysis_id")`).

    Raises:
        ValidationFailed: `page_size` is invalid, or `page_token` was not issued by this list
            (field `page_token`).
    """
    size = page_size_of(page_size)
    keys = keyset.keys_for(queryset.model, ordering)
    columns = keyset.ordered_on(queryset, keys)  # a label filter's copies of the keys
    qs = queryset.order_by(*keyset.order_by(columns))
    if page_token:
        position = keyset.decode(page_token, queryset.model, keys, param="page_token")
        if position.reverse:
            raise ValidationFailed({"page_token": [
                "is not a token this server issued; send the next_page_token of the previous "
                "response unchanged, or none for the first page."]})
        qs = qs.filter(keyset.after(columns, position.values))
    rows = list(qs[: size + 1])
    return fill_page(rows, size, to_message=to_message, byte_budget=byte_budget, rpc=rpc,
                 token_of=lambda row: keyset.encode(keys, keyset.values_of(row, keys)))


def fill_page(rows: list[Any], size: int, *, to_message: Callable[[Any], Any],
              token_of: Callable[[Any], str], byte_budget: int = PAGE_BYTE_BUDGET,
              rpc: str = "", id_of: Callable[[Any], Any] = lambda row: row.pk,
              kind_of: Callable[[Any], str] = lambda row: type(row).__name__,
              more: bool | None = None) -> Page:
    """Map up to `size` of `rows` (one more tells whether a page follows) into a `Page`.

    The page-filling rules of `keyset_page` for rows read some other way (ListExpStates reads
    `.values()` dicts): a row `to_message` cannot map, or whose message passes
    `MAX_ITEM_BYTES`, is skipped and logged; the page ends early, after at least one row, once
    its messages would pass `byte_budget` bytes.

    Args:
        rows: the rows read, in page order, at most `size + 1`.
        size: the page size.
        to_message: maps one row to its protobuf message.
        token_of: the next page token after a row.
        byte_budget: see above, in bytes.
        rpc: the list's name for the log.
        id_of: a row's id, for the log (default its `pk`).
        kind_of: what a row is, for the log (default its class name).
        more: whether rows follow `rows` (None: `rows` holds one more than `size` then).
    """
    items: list[Any] = []
    skipped: list[Any] = []
    used = 0
    last = None
    for row in rows[:size]:
        try:
            message = to_message(row)
            message_bytes = message.ByteSize()
            if message_bytes > MAX_ITEM_BYTES:
                raise ValueError(f"its message is {message_bytes} bytes, more than one reply "
                                 f"may carry ({MAX_ITEM_BYTES} bytes)")
        except Exception as exc:  # one row must never fail the page: skip it, say why
            skipped.append(row)
            last = row
            log.error("%s: skipped %s %s, which cannot be encoded: %s: %s (%d row(s) skipped "
                      "in this page so far)", rpc or "list", kind_of(row), id_of(row),
                      type(exc).__name__, exc, len(skipped))
            continue
        used += message_bytes
        if items and used > byte_budget:
            return _page(items, token_of(last), skipped, rpc, id_of)
        items.append(message)
        last = row
    if more is None:
        more = len(rows) > size
    return _page(items, token_of(last) if more else "", skipped, rpc, id_of)


def _page(items: list[Any], token: str, skipped: list[Any], rpc: str,
          id_of: Callable[[Any], Any]) -> Page:
    if skipped:
        log.error("%s: page sent with %d row(s) and %d skipped row(s) (ids %s)", rpc or "list",
                  len(items), len(skipped), ", ".join(str(id_of(row)) for row in skipped))
    return Page(items, token, skipped)
