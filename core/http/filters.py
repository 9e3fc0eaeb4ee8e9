"""One filter vocabulary for every list: the HTTP API, the gRPC API and the admin.

Each entity declares its filters once, as a django-filter FilterSet built on `FalconFilterSet`
(`experiments.filters.ExperimentFilter`, `jobs.filters.JobFilter`,
`artifacts.filters.ArtifactFilter`). The HTTP list reads them from the query string
(`core.http.drf.FilterSetBackend`), the gRPC list maps `CommonListReq` onto them
(`core.grpc.from_proto.list_filters`) and the admin's changelist filters and search apply them
(`core.admin.FilterSetAdminMixin`), so a name means the same rows everywhere and a bad value gives
the same `ValidationFailed`, naming the filter.

Multi-value filters (`status`, `exp_type`, `cluster_name`, `id`, ...) take repeated values
(`?status=Running&status=Created`), comma lists (`?status=Running,Created`) or both; a gRPC
repeated field arrives as a list. Values are AND-ed across filters and OR-ed within one.

A multi-value filter takes at most `MAX_FILTER_VALUES` values (repeated and comma-separated
together, blanks not counted), checked before any value is parsed, and its duplicates are
dropped in linear time (a dict, first occurrence kept): 100,000 ids used to cost minutes of
CPU when each value was looked up in the list kept so far.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from math import isqrt
from datetime import timezone as dt_timezone
import functools
from functools import reduce
from operator import or_
from typing import Any

import django_filters
from django import forms
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Concat
from django.db.models.lookups import IStartsWith
from django.utils.text import smart_split, unescape_string_literal
from django_filters.constants import EMPTY_VALUES

from core.database.prepared import values_rows
from core.errors import ValidationFailed
from core.limits.text import strip_blank

# Longest value a name filter (`exp_type`, `cluster_name`, ...) accepts: the model fields' size.
MAX_NAME_CHARS = 255
# Largest database id: the 64-bit primary key (a larger number is no id, and overflows SQLite).
MAX_ID = 2**63 - 1
# Most values one multi-value filter takes (HTTP repeated and comma lists, a gRPC repeated
# field): a list of ids longer than a page is no filter, and each value is a bound parameter.
MAX_FILTER_VALUES = 1000


def too_many_values(count: int) -> str | None:
    """Return the refusal for a filter given `count` values, None when it is within the limit.

    One text for the HTTP form field and the gRPC fields checked before they are read
    (`check_value_count`), so a client sees the same message on both.
    """
    if count <= MAX_FILTER_VALUES:
        return None
    return (f"has {count} values; a filter takes at most {MAX_FILTER_VALUES}. Split the "
            "request, or filter on something broader (status, exp_id, updated_since).")


def check_value_count(field: str, count: int) -> None:
    """Refuse a repeated request field with more than `MAX_FILTER_VALUES` values.

    Called with the field's length before any value is read, so a huge list costs nothing.

    Raises:
        ValidationFailed: over the limit, reported under `field`.
    """
    if (problem := too_many_values(count)) is not None:
        raise ValidationFailed({field: [problem]})


def _listed(items: Sequence[Any], limit: int = 10) -> str:
    """Return `items` for a message, quoted as text (`0` and `"0"` alike), each cut at 40
    characters, at most `limit` of them."""
    shown = [text if len(text := repr(str(item))) <= 40 else text[:37] + "..."
             for item in items[:limit]]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(shown) + more


class CommaListWidget(forms.TextInput):
    """Reads every value a query string or dict gives a name: repeated keys and lists alike."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[Any]:
        """Return the raw values of `name`: `QueryDict.getlist`, or a dict's value as a list."""
        if hasattr(data, "getlist"):
            return list(data.getlist(name))
        value = data.get(name)
        if value is None:
            return []
        if isinstance(value, (list, tuple, set, frozenset)):
            return list(value)
        return [value]

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return name not in data

    def format_value(self, value: Any) -> str | None:
        """Render a list as the comma list the field reads back (the browsable API's form)."""
        if isinstance(value, (list, tuple)):
            return ",".join(str(item) for item in value) or None
        return super().format_value(value)


class MultiValueField(forms.Field):
    """A form field holding a list: repeated values and comma lists, flattened and de-duplicated.

    Subclasses check each item in `clean_item`; every bad item is reported in one message.
    """

    widget = CommaListWidget
    # A filter drops a repeated value (`?status=A,A` is `?status=A`); a list whose items are
    # each one operand (the experiments of a compare) keeps them, so the caller can refuse one.
    unique = True

    def to_python(self, value: Any) -> list[Any]:
        """Return the items of `value` (a list or one value), comma lists split, blanks dropped.

        Raises:
            django.forms.ValidationError: an item is not valid (`clean_item`); the message lists
                every bad item and what is allowed.
        """
        if value in EMPTY_VALUES:
            return []
        raw_items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
        items: list[Any] = []
        for raw in raw_items:
            if isinstance(raw, str):
                items.extend(strip_blank(part) for part in raw.split(","))
            else:
                items.append(raw)
        if raw_items and all(isinstance(item, str) and not strip_blank(item) for item in items):
            # `?status=,` or `?status=%20,`: nothing but blanks is an empty value, refused as
            # `?status=` is (core.http.middleware.EmptyQueryValueMiddleware), never "no filter".
            raise forms.ValidationError("has no value, only blanks; give a value, or leave the "
                                        "parameter out.", code="invalid")
        items = [item for item in items if item not in EMPTY_VALUES]
        # Counted before any item is parsed: a refused list costs one split.
        if (problem := too_many_values(len(items))) is not None:
            raise forms.ValidationError(problem, code="invalid")
        cleaned: list[Any] = []
        bad: list[Any] = []
        for item in items:
            try:
                cleaned.append(self.clean_item(item))
            except ValueError:
                bad.append(item)
        if bad:
            raise forms.ValidationError(self.bad_items_message(bad), code="invalid")
        # Duplicates out in one pass, order kept (a list scan per value was quadratic).
        return list(dict.fromkeys(cleaned)) if self.unique else cleaned

    def clean_item(self, item: Any) -> Any:
        """Return `item` cleaned. Raises ValueError when it is not valid."""
        return item

    def bad_items_message(self, bad: list[Any]) -> str:
        """Return the error message for the items `clean_item` refused."""
        return f"has the invalid values {_listed(bad)}."


class NameListField(MultiValueField):
    """A list of names (`exp_type`, `cluster_name`): non-empty strings of at most 255 chars."""

    def clean_item(self, item: Any) -> str:
        if not isinstance(item, str) or len(item) > MAX_NAME_CHARS:
            raise ValueError(item)
        return item

    def bad_items_message(self, bad: list[Any]) -> str:
        return f"must be names of at most {MAX_NAME_CHARS} characters; got {_listed(bad)}."


class IdListField(MultiValueField):
    """A list of database ids: positive integers (ints, or strings of digits)."""

    def clean_item(self, item: Any) -> int:
        if isinstance(item, bool):
            raise ValueError(item)
        if isinstance(item, str):
            from core.limits.numbers import parse_decimal

            # BadNumber is a ValueError: the item is reported with the others.
            item = parse_decimal(item, minimum=1, maximum=MAX_ID)
        if not isinstance(item, int) or not 1 <= item <= MAX_ID:
            raise ValueError(item)
        return item

    def bad_items_message(self, bad: list[Any]) -> str:
        return f"must be integer ids from 1 to {MAX_ID}; got {_listed(bad)}."


class IdSequenceField(IdListField):
    """The ids of a diff or compare, in order and repeats kept: each is one operand, so
    `ids=1,2,1` is refused by the service ("lists an experiment twice") instead of quietly
    becoming `1,2`, and `ids=1,1` is named as a repeat rather than as one id."""

    unique = False


class ChoiceListField(MultiValueField):
    """A list of values out of `choices` (`[(value, label)]`, e.g. `core.domain.statuses.choices`)."""

    def __init__(self, *, choices: Iterable[tuple[Any, Any]], **kwargs: Any):
        self.choices = [(str(value), label) for value, label in choices]
        self._allowed = frozenset(value for value, _ in self.choices)
        super().__init__(**kwargs)

    def clean_item(self, item: Any) -> str:
        if not isinstance(item, str) or item not in self._allowed:
            raise ValueError(item)
        return item

    def bad_items_message(self, bad: list[Any]) -> str:
        allowed = ", ".join(value for value, _ in self.choices)
        return f"must be one of {allowed}; got {_listed(bad)}."


class MultiValueFilter(django_filters.MultipleChoiceFilter):
    """Keep rows whose `field_name` is one of the values given (one `__in`, no DISTINCT).

    A MultipleChoiceFilter only so that the OpenAPI schema shows an exploded array parameter;
    the values are checked by `field_class` (names by default).
    """

    field_class = NameListField

    def __init__(self, field_name: str | None = None, **kwargs: Any):
        kwargs.setdefault("distinct", False)
        super().__init__(field_name, **kwargs)

    def filter(self, qs: QuerySet, value: list[Any]) -> QuerySet:
        """Return `qs` where `field_name` is in `value`; `qs` itself when `value` is empty."""
        if not value:
            return qs
        if len(value) == 1:  # an equality: the index on (field, list order) serves it unsorted
            return self.get_method(qs)(**{self.field_name: value[0]})
        return self.get_method(qs)(**{f"{self.field_name}__in": list(value)})


class IdListFilter(MultiValueFilter):
    """Keep rows whose id (or foreign key, `field_name`) is one of the positive ids given."""

    field_class = IdListField


class ChoiceListFilter(MultiValueFilter):
    """Keep rows whose `field_name` is one of the values given, each out of `choices`."""

    field_class = ChoiceListField


class UTCDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 date-time, converted to UTC; an instant outside years 1 to 9999 in UTC is
    refused as invalid (the database compares in UTC, and Python cannot hold it)."""

    def to_python(self, value):
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(dt_timezone.utc)
        except OverflowError:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None


class UpdatedSinceFilter(django_filters.IsoDateTimeFilter):
    """Keep rows updated at or after an instant (ISO 8601 text, or a datetime from gRPC)."""

    field_class = UTCDateTimeField

    def __init__(self, field_name: str = "updated_at", **kwargs: Any):
        kwargs.setdefault("help_text", "Only rows updated at or after this instant (ISO 8601, "
                                       "e.g. 2024-05-01T12:00:00Z).")
        kwargs.setdefault("error_messages", {
            "invalid": "is not an ISO 8601 date-time such as 2024-05-01T12:00:00Z."})
        super().__init__(field_name, lookup_expr="gte", **kwargs)


def search_terms(text: str) -> list[str]:
    """Split a search text into terms as the admin does: on spaces, keeping "quoted phrases"."""
    terms = []
    for term in smart_split(text):
        if term[:1] in ("'", '"') and term[-1:] == term[:1] and len(term) > 1:
            term = unescape_string_literal(term)
        if term:
            terms.append(term)
    return terms


class SearchFilter(django_filters.CharFilter):
    """Case-insensitive search: every term must be in one of `fields` (the admin's semantics).

    Args:
        fields: the model paths searched (`("name",)`, `("experiment__name", "role")`).
        max_length: the longest text accepted (the longest column searched); a longer one is
            a 400 naming the limit.
    """

    def __init__(self, *, fields: Sequence[str], max_length: int = MAX_NAME_CHARS,
                 **kwargs: Any):
        # A text longer than every field searched matches nothing, and on SQLite a LIKE
        # pattern over 50,000 bytes is an error ("LIKE or GLOB pattern too complex") that was
        # answered as a database outage: the form field refuses it first, naming the limit.
        self.search_fields = tuple(fields)
        super().__init__(max_length=max_length, **kwargs)

    def filter(self, qs: QuerySet, value: str) -> QuerySet:
        """Return the rows of `qs` matching every term of `value`; `qs` when it has none."""
        for term in search_terms(value or ""):
            qs = qs.filter(reduce(or_, (Q(**{f"{field}__icontains": term})
                                        for field in self.search_fields)))
        return qs


# The page the two plans of a selective filter are weighed for (the lists' default page size),
# and the fewest matches ever called many.
PLAN_PAGE = 50
FEW_FLOOR = 200


def few_matches(model) -> int:
    """The most matches of a filter that are read and sorted rather than found by walking the
    list order: sqrt(PLAN_PAGE x rows), at least `FEW_FLOOR`.

    Sorting k matches reads k index entries; walking the list order until a page of a filter
    held by k of N rows is full reads about PLAN_PAGE x N / k. They cost the same at
    k = sqrt(PLAN_PAGE x N), so choosing by that bound keeps the worst page at about
    sqrt(PLAN_PAGE x N) rows read whichever way (7,100 at 1,000,000 rows; a constant tuned
    for 100,000 let a filter just above it walk N/40). N is the table's largest id, read from
    the end of the primary key (one index probe; an upper bound of the rows).
    """
    rows = values_rows(_largest_id(model))
    top = rows[0][0] if rows else 0
    return max(FEW_FLOOR, isqrt(PLAN_PAGE * top))


@functools.cache
def _largest_id(model) -> QuerySet:
    """The query of `model`'s largest id, built once (`values_rows` only reads its query)."""
    return model.objects.order_by("-pk").values("pk")[:1]


class PrefixSearchFilter(SearchFilter):
    """Case-insensitive prefix search: the rows whose field starts with the text given.

    `search=llama` keeps `llama-7b` and `Llama-bench`, not `my-llama`. The whole text (spaces
    trimmed at both ends) is the prefix. Unlike `SearchFilter`'s "every term anywhere", a prefix
    is served by an index on the field (`LIKE 'text%'`: the field's index on MariaDB, whose
    collation ignores case; an index `COLLATE NOCASE` on SQLite), so it stays fast however many
    rows there are.

    The plan is chosen per request, as the label filter's: the prefix's matches are counted on
    that index up to `few_matches` (or `few` when set); at most that many are read from the
    index and sorted, more are found by walking the list order's index, testing the name,
    until the page is full. Either way a page reads about sqrt(PLAN_PAGE x N) rows at worst.
    """

    few: int | None = None

    def filter(self, qs: QuerySet, value: str) -> QuerySet:
        """Return the rows of `qs` whose field starts with `value`; `qs` when it is blank."""
        prefix = strip_blank(value or "")
        if not prefix:
            return qs
        matching = reduce(or_, (Q(**{f"{field}__istartswith": prefix})
                                for field in self.search_fields))
        few = self.few if self.few is not None else few_matches(qs.model)
        # Unordered: any (few + 1)th match will do, and an ORDER BY would sort every match.
        if not values_rows(qs.model.objects.filter(matching).order_by().values("pk")
                           [few:few + 1]):
            return qs.filter(matching)
        # Many matches: the same test on the field's value made an expression (`name || ''`),
        # which no index serves, so the database walks the list order's index and stops at
        # the end of the page instead of sorting every match.
        return qs.filter(reduce(or_, (Q(IStartsWith(Concat(F(field), Value("")), prefix))
                                      for field in self.search_fields)))


class FalconFilterSet(django_filters.FilterSet):
    """A FilterSet whose values are validated once (`validate`) and applied anywhere (`apply`).

    Subclasses declare their filters (`ChoiceListFilter`, `IdListFilter`, `MultiValueFilter`,
    `SearchFilter`, django-filter's own) and `Meta.model`, with `Meta.fields = []`.
    """

    @classmethod
    def validate(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """Return the clean values of the filters `data` sets, by filter name.

        Args:
            data: raw values by filter name: a `QueryDict` (an HTTP query string) or a dict of
                one value or a list of values each (`{"status": ["Running"], "id": [3, 5]}`);
                names that are not filters of this FilterSet are ignored.

        Returns:
            `{name: value}` for the filters given a non-empty value only: lists for multi-value
            filters, an aware datetime for `updated_since`, a string for `search` / `creator`.

        Raises:
            ValidationFailed: a value is invalid; each such filter is named with what is allowed.
        """
        filters, form_class, prefix = cls._prepared()
        given = frozenset(name for name in filters if name in data)
        if not given:
            return {}  # no filter given: nothing to clean (most list requests)
        form = cls._form_of(form_class, given)(data, prefix=prefix)
        if not form.is_valid():
            raise ValidationFailed({name: [error["message"] for error in errors]
                                    for name, errors in form.errors.get_json_data().items()})
        return {name: value for name, value in form.cleaned_data.items()
                if value not in EMPTY_VALUES}

    @classmethod
    def apply(cls, queryset: QuerySet, values: Mapping[str, Any]) -> QuerySet:
        """Return `queryset` narrowed by every filter in `values` (as `validate` returns them).

        Raises:
            ValueError: `values` names a filter this FilterSet does not declare (a caller's bug).
        """
        filters = cls._prepared()[0]
        for name, value in values.items():
            if name not in filters:
                raise ValueError(f"{cls.__name__} has no filter {name!r}; it has "
                                 f"{', '.join(filters)}.")
            queryset = filters[name].filter(queryset, value)
        return queryset

    @staticmethod
    @functools.cache
    def _form_of(form_class: type, given: frozenset[str]) -> type:
        """The form class of the filters `given` alone (one per set, made once per process).

        A Django form deep-copies every field it declares when it is made; cleaning only the
        fields a request sets (their values as the whole form would clean them: a field left
        out is a filter not given) copies one field for a one-filter list, not all of them.
        """
        form = type(form_class)(f"{form_class.__name__}Of", (form_class,), {})
        form.base_fields = {name: field for name, field in form_class.base_fields.items()
                            if name in given}
        return form

    @classmethod
    def _prepared(cls) -> tuple[dict[str, Any], type, str | None]:
        """Return this class's bound filters, form class and form prefix, made once per class.

        A FilterSet instance deep-copies every declared filter and its form class is built anew
        each time: per request, that was a large part of a list's cost. The filters only read
        their own settings (and a `method` filter its FilterSet's method) and the form class is
        a plain Django form class, instantiated per call, so both are shared, read-only.
        """
        prepared = cls.__dict__.get("_falcon_prepared")
        if prepared is None:
            filterset = cls(queryset=cls._meta.model._default_manager.none())
            prepared = (filterset.filters, filterset.get_form_class(), filterset.form_prefix)
            cls._falcon_prepared = prepared
        return prepared

    @classmethod
    def filter_names(cls) -> list[str]:
        """Return the names of the filters this FilterSet declares, in declaration order."""
        return list(cls.base_filters)
