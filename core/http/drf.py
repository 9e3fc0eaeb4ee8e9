"""DRF glue: the one mapping of errors to HTTP responses (docs/decisions.md#dec-errors).

Every error body is JSON with a stable `code`: a domain error's own code (`not_found`,
`conflict`, `too_large`, ...), or DRF's code for its own errors (`not_authenticated`,
`parse_error`, `method_not_allowed`, `invalid`, ...). Field errors are keyed by the field path.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, quote_plus, urlencode, urlsplit, urlunsplit

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.views.defaults import page_not_found, server_error
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import APIException, NotAcceptable, ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import CursorPagination
from rest_framework.views import exception_handler as drf_exception_handler

from core.http import keyset
from core.errors import FalconError, ValidationFailed
from core.http.filters import MultiValueFilter
from core.http.parsers import RequestTooLarge, too_large_message


class DomainAPIException(APIException):
    """A `FalconError` as a DRF exception, so DRF's rollback and rendering run."""

    def __init__(self, error: FalconError):
        self.status_code = error.http_status
        self.default_code = error.code
        if isinstance(error, ValidationFailed):
            detail = dict(error.errors)
        else:
            detail = {"detail": error.message}
        super().__init__(detail=detail, code=error.code)


def exception_handler(exc, context):
    """Answer an error with its HTTP status and `{field|"detail": ..., "code": ...}`.

    A `FalconError` keeps its own status and code; DRF's errors (400 parse errors, 401/403,
    405, 415) get DRF's `default_code`.
    """
    if isinstance(exc, FalconError):
        exc = DomainAPIException(exc)
    elif isinstance(exc, RequestDataTooBig):
        exc = RequestTooLarge(too_large_message())
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = getattr(exc, "default_code", "error")
    if isinstance(response.data, list):  # e.g. a serializer's top-level error list
        response.data = {"detail": response.data}
    response.data.setdefault("code", code)
    return response


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception=None):
    """404 for any URL no route matches: JSON under /api/, Django's page elsewhere."""
    if _is_api(request):
        return JsonResponse({"detail": f"No API endpoint at {request.path}; see /api/docs/.",
                             "code": "not_found"}, status=404)
    return page_not_found(request, exception)


def internal_error(request: HttpRequest):
    """500 for an unhandled error: JSON under /api/, Django's page elsewhere."""
    if _is_api(request):
        return JsonResponse({"detail": "Internal server error; the server log has the cause.",
                             "code": "error"}, status=500)
    return server_error(request)


class FilterSetBackend(DjangoFilterBackend):
    """django-filter's backend over the view's `FalconFilterSet` (`filterset_class`).

    The query string is validated by `FalconFilterSet.validate`, so a bad value is the same
    `ValidationFailed` the gRPC list raises (400 `invalid`, keyed by the filter's name), and the
    values are applied by `FalconFilterSet.apply`. Query names the FilterSet does not declare
    (`ordering`, `page_size`, `cursor`) are left to the other backends and the paginator.
    """

    def filter_queryset(self, request, queryset, view):
        """Return `queryset` narrowed by the request's filters.

        Raises:
            ValidationFailed: a filter's value is invalid (named in the error).
        """
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is None:
            return queryset
        accepted, multi = self._names(view, filterset_class)
        unknown = sorted(set(request.query_params) - accepted)
        if unknown:
            raise ValidationFailed({name: [
                f"is not a query parameter of this list; use {', '.join(sorted(accepted))}."]
                for name in unknown})
        # A parameter that takes one value, given twice, would be read as its last value and
        # the other dropped without a word: refuse it instead.
        twice = sorted(name for name in request.query_params
                       if name not in multi and len(request.query_params.getlist(name)) > 1)
        if twice:
            raise ValidationFailed({name: ["is given more than once; give it once (only the "
                                           f"list filters, {', '.join(sorted(multi))}, take "
                                           "several values)."] for name in twice})
        return filterset_class.apply(queryset, filterset_class.validate(request.query_params))

    _known: dict[tuple, tuple[frozenset[str], frozenset[str]]] = {}

    @classmethod
    def _names(cls, view, filterset_class) -> tuple[frozenset[str], frozenset[str]]:
        """The query parameters the view reads, and its filters that take several values:
        worked out once per view class, paginator class and FilterSet (they are declared on
        the classes)."""
        key = (type(view), type(getattr(view, "paginator", None)), tuple(view.filter_backends),
               filterset_class)
        known = cls._known.get(key)
        if known is None:
            known = cls._known[key] = (
                frozenset(accepted_query_params(view, filterset_class.filter_names())),
                frozenset(name for name, f in filterset_class.base_filters.items()
                          if isinstance(f, MultiValueFilter)))
        return known


def accepted_query_params(view, filter_names) -> list[str]:
    """Return the query parameters a list view reads: its filters, `format`, ordering, pages."""
    names = set(filter_names) | {"format"}
    if any(issubclass(backend, OrderingFilter) for backend in view.filter_backends):
        names.add(OrderingFilter.ordering_param)
    paginator = getattr(view, "paginator", None)
    for attr in ("cursor_query_param", "page_size_query_param", "page_query_param",
                 "limit_query_param", "offset_query_param"):
        if name := getattr(paginator, attr, None):
            names.add(name)
    return sorted(names)


# `StrictContentNegotiation.select_renderer`'s choices: (renderers, format, Accept) -> (index
# among the renderers of that format, media type).
_negotiated: dict[tuple, tuple[int, str]] = {}


class StrictContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, with an unknown `?format=` answered 406 naming the formats there are.

    DRF answers it 404 "Not found.", which reads as if the resource did not exist.
    """

    def select_renderer(self, request, renderers, format_suffix=None):
        """DRF's choice of renderer and media type, remembered per `Accept` header and format.

        The choice depends only on the renderers, the format asked for (`?format=` or the
        suffix) and the `Accept` header, which are the key (an `Accept` header of at most
        `MAX_REMEMBERED_ACCEPT` characters; at most `MAX_REMEMBERED` keys, all forgotten
        when reached); DRF parses the header and orders its media types on every request. A
        refusal (406) is never remembered: it is worked out again.
        """
        format = format_suffix or request.query_params.get(self.settings.URL_FORMAT_OVERRIDE)
        accept = request.META.get("HTTP_ACCEPT")
        key = None
        if accept is None or len(accept) <= self.MAX_REMEMBERED_ACCEPT:
            key = (tuple((type(r), r.media_type, r.format) for r in renderers), format, accept)
            known = _negotiated.get(key)
            if known is not None:
                index, media_type = known
                kept = self.filter_renderers(renderers, format) if format else renderers
                return kept[index], media_type
        renderer, media_type = super().select_renderer(request, renderers, format_suffix)
        if key is not None:
            kept = self.filter_renderers(renderers, format) if format else renderers
            index = next(i for i, candidate in enumerate(kept) if candidate is renderer)
            if len(_negotiated) >= self.MAX_REMEMBERED:
                _negotiated.clear()
            _negotiated[key] = (index, media_type)
        return renderer, media_type

    MAX_REMEMBERED = 256
    MAX_REMEMBERED_ACCEPT = 512

    def filter_renderers(self, renderers, format):
        """Return the renderers of `format`.

        Raises:
            NotAcceptable: no renderer has it (HTTP 406), listing the formats of this view.
        """
        kept = [renderer for renderer in renderers if renderer.format == format]
        if not kept:
            raise NotAcceptable(f"format must be one of {', '.join(r.format for r in renderers)}"
                                f"; got {format[:40]!r}.")
        return kept


class StrictOrderingFilter(OrderingFilter):
    """DRF's `?ordering=` that refuses unknown fields with a 400 instead of ignoring them."""

    def get_ordering(self, request, queryset, view):
        raw = request.query_params.get(self.ordering_param)
        if raw:
            valid = {name for name, _label in
                     self.get_valid_fields(queryset, view, {"request": request})}
            # One '-' at most: DRF drops "--id" silently and orders by the default instead.
            unknown = [f for f in (p.strip() for p in raw.split(","))
                       if (f[1:] if f.startswith("-") else f) not in valid]
            if unknown:
                raise ValidationError({self.ordering_param: [
                    f"cannot order by {', '.join(unknown)}; use one of {', '.join(sorted(valid))}"
                    " (prefix '-' for descending)."]})
        return super().get_ordering(request, queryset, view)

    def filter_queryset(self, request, queryset, view):
        """Order `queryset` by `?ordering=` (or the view's default), refusing unknown fields.

        Under `StrictCursorPagination` the ordering is only checked here: the paginator
        orders the page itself, by the same keys and the id (an ORDER BY here would be
        replaced there).
        """
        ordering = self.get_ordering(request, queryset, view)
        if isinstance(getattr(view, "paginator", None), StrictCursorPagination):
            return queryset
        return queryset.order_by(*ordering) if ordering else queryset


class StrictCursorPagination(CursorPagination):
    """Keyset cursor pagination on `(ordering keys..., id)` for every allowed ordering.

    DRF's cursor keeps a position on the first ordering key plus an offset among rows sharing
    it, so deleting a seen row with the same key made an unseen one vanish. Here the position is
    the full key of the last row sent, id included (`core.http.keyset`), and a cursor that this API
    did not give out (forged, garbled, made for another ordering) is a 400 naming `cursor`, never
    a 404 or 500. The response shape (`next`, `previous`, `results`) and the query parameters
    are DRF's.

    `keys_only = True` makes a page of `{"id": ...}` rows, read with the ordering's keys alone
    (`core.http.keyset.page_rows`), for a view that reads the rows' contents by id afterwards.
    """

    keys_only = False

    def get_page_size(self, request):
        """Return `?page_size=` (default `page_size`), refusing anything not 1..max_page_size.

        Raises:
            ValidationError: not a decimal integer from 1 to `max_page_size` (400, `page_size`).
        """
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        from core.limits.numbers import BadNumber, parse_decimal

        try:
            return parse_decimal(raw, minimum=1, maximum=self.max_page_size)
        except BadNumber:
            raise ValidationError({self.page_size_query_param: [
                f"must be an integer from 1 to {self.max_page_size} (default {self.page_size});"
                f" got {raw[:40]!r}."]}) from None

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        self.page_size = self.get_page_size(request)
        if not self.page_size:
            return None
        self.base_url = request.build_absolute_uri()
        self.keys = keyset.keys_for(queryset.model, self.get_ordering(request, queryset, view))
        raw = request.query_params.get(self.cursor_query_param)
        position = (keyset.decode(raw, queryset.model, self.keys,
                                  param=self.cursor_query_param) if raw else None)
        reverse = bool(position and position.reverse)
        if self.keys_only:
            # The page reads its ids and the keys of this ordering only (the cursor is made of
            # them); the view reads the rows' contents by id.
            wanted = list(dict.fromkeys(["id", *(key.name for key in self.keys)]))
            selected = getattr(queryset.query, "selected", None) or ()
            if (list(selected) != wanted or queryset.query.annotations
                    or queryset.query.extra_select):
                queryset = queryset.values(*wanted)
        # The columns the page is ordered on: the keys', or their copies a filter's join
        # provides in an index that has them in this order (`keyset.ordered_on`).
        columns = keyset.ordered_on(queryset, self.keys)
        terms = keyset.order_by(columns, reverse=reverse)
        query = queryset.query
        if list(query.order_by) == terms and not query.extra_order_by and query.standard_ordering:
            qs = queryset  # ordered so already (a view's base queryset, built once)
        else:
            qs = queryset.order_by(*terms)
        if self.keys_only:
            rows = keyset.page_rows(qs, self.page_size, self.keys, columns=columns,
                                    position=position)
        else:
            if position is not None:
                qs = qs.filter(keyset.after(columns, position.values, reverse=reverse))
            rows = list(qs[: self.page_size + 1])
        more = len(rows) > self.page_size
        self.page = rows[: self.page_size]
        if reverse:
            self.page.reverse()
        self.has_next = more if not reverse else True
        self.has_previous = position is not None if not reverse else more
        return self.page

    def _link(self, row, *, reverse: bool) -> str:
        """The page's URL with `cursor` set to `row`'s position: what DRF's
        `replace_query_param(base_url, "cursor", ...)` gives (the other parameters sorted by
        name), the URL parsed once per request for both links."""
        cursor = keyset.encode(self.keys, keyset.values_of(row, self.keys), reverse=reverse)
        template = getattr(self, "_link_template", None)
        if template is None or template[0] != self.base_url:
            template = self._link_template = (self.base_url,
                                              *_link_parts(self.base_url, self.cursor_query_param))
        _url, before, after = template
        # A cursor is base64url without padding: nothing in it needs quoting.
        return f"{before}{quote_plus(cursor)}{after}"

    def get_next_link(self):
        if not self.has_next or not self.page:
            return None
        return self._link(self.page[-1], reverse=False)

    def get_previous_link(self):
        if not self.has_previous or not self.page:
            return None
        return self._link(self.page[0], reverse=True)

    def get_html_context(self):
        return {"previous_url": self.get_previous_link(), "next_url": self.get_next_link()}


def _link_parts(url: str, param: str) -> tuple[str, str]:
    """Return the text of `url` before and after the value of `param`, set as DRF's
    `replace_query_param` sets it: the query's parameters sorted by name, `param` among them
    with one value, every other kept with its values in order, the fragment kept."""
    scheme, netloc, path, query, fragment = urlsplit(url)
    params = parse_qs(query, keep_blank_values=True)
    params.pop(param, None)
    items = sorted(params.items())
    parts = [urlencode([item for item in items if item[0] < param], doseq=True),
             urlencode([(param, "")]),
             urlencode([item for item in items if item[0] > param], doseq=True)]
    head = urlunsplit((scheme, netloc, path, "", ""))
    before = f"{head}?{'&'.join(filter(None, parts[:2]))}"
    after = "".join(f"&{part}" for part in parts[2:] if part)
    return before, after + (f"#{fragment}" if fragment else "")


_output_serializers: dict[type, Any] = {}


def represent(serializer_class: type, instance: Any) -> dict[str, Any]:
    """Return `serializer_class(instance).data`, without building the serializer's fields anew.

    A `ModelSerializer` builds its fields from the model on every instantiation (for a detail
    view with nested jobs and artifact, about 50 fields: most of the reply's CPU). An output
    serializer used without `context` holds no per-request state, so one instance per class is
    kept for the process and its `to_representation` called for each object; the result is
    the same dict `.data` gives (a `ReturnDict`, for the browsable API).

    Args:
        serializer_class: a read-only serializer whose fields need no request context (no
            hyperlinked fields).
        instance: the object to represent.
    """
    from rest_framework.utils.serializer_helpers import ReturnDict

    serializer = _output_serializers.get(serializer_class)
    if serializer is None:
        serializer = _output_serializers.setdefault(serializer_class, serializer_class())
        serializer.fields  # built once, here (a cached property)
    return ReturnDict(serializer.to_representation(instance), serializer=serializer)
