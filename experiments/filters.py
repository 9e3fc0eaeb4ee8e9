"""The experiment filters of every list: HTTP ListExps, gRPC ListExps and the admin's changelist.

The HTTP query string uses these names as they are (`?status=Running,Created&exp_type=profiling`);
gRPC's `CommonListReq` fields map onto them in `core.grpc.from_proto.list_filters`
(`statuses` -> `status`, `exp_types` -> `exp_type`, `cluster_names` -> `cluster_name`, `ids` ->
`id`, `updated_since`, `labels` -> `label`). `creator` and `search` have no `CommonListReq` field:
HTTP and the admin.
"""
from __future__ import annotations

import functools
from functools import reduce
from operator import or_

import django_filters
from django import forms
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.lookups import Exact
from drf_spectacular.utils import extend_schema_field

from accounts.emails import MAX_EMAIL_CHARS
from accounts.models import User
from core.database.prepared import IdsQuery, values_rows
from core.http.keyset import order_alias
from core.http.filters import (
    ChoiceListFilter, FalconFilterSet, IdListFilter, MultiValueField, MultiValueFilter,
    PLAN_PAGE, PrefixSearchFilter, UpdatedSinceFilter, few_matches,
)
from core.domain.statuses import ExpStatus, choices

from .labels import MAX_LABELS, Selector, parse_selector
from .models import ExpLabel, Experiment

LABEL_HELP = ("Only the experiments whose labels match every selector: `key=value` (that "
              "value) or `key` (the label is set), as kubectl's -l; repeat it or give a comma "
              "list (all must hold).")


class LabelSelectorField(MultiValueField):
    """A list of label selectors (`experiments.labels.parse_selector`)."""

    def clean_item(self, item) -> Selector:
        if not isinstance(item, str):
            raise ValueError(item)
        try:
            return parse_selector(item)
        except ValueError as exc:
            self._problem = str(exc)
            raise

    def bad_items_message(self, bad) -> str:
        problem = getattr(self, "_problem", "")
        return (f"{problem} A selector is key=value or key (the label is set)." if problem
                else "must be label selectors: key=value or key.")

    def to_python(self, value) -> list[Selector]:
        """The selectors, at most one per label an experiment can have (`MAX_LABELS` keys).

        Raises:
            django.forms.ValidationError: a bad selector, or selectors on more than
                `MAX_LABELS` keys (no experiment could match them all).
        """
        selectors = super().to_python(value)
        keys = {selector.key for selector in selectors}
        if len(keys) > MAX_LABELS:
            raise forms.ValidationError(
                f"selects on {len(keys)} label keys; an experiment has at most {MAX_LABELS} "
                "labels, so give at most that many.", code="invalid")
        return selectors


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class LabelSelectorFilter(MultiValueFilter):
    """Keep the experiments matching EVERY selector (AND, as Kubernetes label selectors).

    An experiment has at most one row per key in `experiment_labels`, indexed on (key, value,
    created_at, experiment), so:

    - with a `key=value` selector, the experiments are joined to that selector's label rows
      (the rarest one's, counted up to a bound, when several have a value), and the page is
      ordered on the rows' copy of the list keys (`core.http.keyset.ordered_on`): the database
      reads the index's next entries in list order and stops at the end of the page, however
      many or few experiments hold the label (0.03 ms of SQL at 1,000,000 experiments, a
      label on 1 % or on a sixth of them alike). Other selectors are a correlated count of
      the experiment's matching rows, checked for each row read;
    - with `key` (exists) selectors only, whose holders the index does not keep in list order,
      one of two ways is chosen per request: held by few experiments (some selector matches
      at most `FEW_LABELLED` rows, by default sqrt(50 x the experiments)), `id IN (SELECT
      experiment_id ... GROUP BY experiment_id HAVING COUNT(*) = <keys>)`, those few ids read
      from the index and sorted; held by many, the correlated count (a scalar subquery)
      checked while the database walks the list order's index, stopping at the end of the
      page.

    One subquery whatever the number of selectors: as one `IN` subquery each, 20 selectors
    kept MariaDB's optimizer choosing a join order of 20 semi-joins for minutes. Every way is
    served by the same indexes on SQLite and MariaDB (decisions.md#dec-labels).
    """

    field_class = LabelSelectorField
    # Where sorting the matches costs about what walking the list order to fill a page does:
    # None follows the table, `core.http.filters.few_matches` (sqrt(50 x N)); a number fixes it.
    FEW_LABELLED: int | None = None

    def filter(self, qs: QuerySet, value: list[Selector]) -> QuerySet:
        wanted: dict[str, str | None] = {}  # key -> the value required, None: any value
        for selector in value or ():
            known = wanted.get(selector.key)
            if selector.value is None:
                wanted.setdefault(selector.key, None)
            elif known is not None and known != selector.value:
                return qs.none()  # one label cannot hold two values
            else:
                wanted[selector.key] = selector.value
        if not wanted:
            return qs
        valued = [(key, val) for key, val in wanted.items() if val is not None]
        if valued:
            key, val = valued[0] if len(valued) == 1 else self._rarest(valued, self._bound())
            qs = qs.filter(label_rows__key=key, label_rows__value=val).annotate(**{
                order_alias("created_at"): F("label_rows__created_at"),
                order_alias("id"): F("label_rows__experiment_id")})
            others = {k: v for k, v in wanted.items() if k != key}
            return qs.filter(self._all_held(others)) if others else qs
        each = [Q(key=key) for key in wanted]
        bound = self._bound()
        few = any(not values_rows(ExpLabel.objects.filter(condition).order_by().values("id")
                                  [bound:bound + 1])  # unordered: no sort of the matches
                  for condition in each)
        if few:
            ids = ExpLabel.objects.filter(reduce(or_, each)).order_by().values("experiment_id")
            if len(wanted) > 1:
                ids = ids.annotate(hits=Count("id")).filter(hits=len(wanted))
            return qs.filter(pk__in=ids.values("experiment_id"))
        return qs.filter(self._all_held(wanted))

    def _bound(self) -> int:
        """The most holders of a selector whose experiments are read and sorted."""
        return self.FEW_LABELLED if self.FEW_LABELLED is not None else few_matches(Experiment)

    @staticmethod
    def _rarest(valued: list[tuple[str, str]], bound: int) -> tuple[str, str]:
        """The `key=value` held by the fewest experiments, each counted up to `bound` on the
        index; one held by at most a page's worth ends the counting."""
        best, fewest = valued[0], None
        for key, val in valued:
            held = ExpLabel.objects.filter(key=key, value=val).values("id")[:bound].count()
            if fewest is None or held < fewest:
                best, fewest = (key, val), held
            if held <= PLAN_PAGE:
                break
        return best

    @staticmethod
    def _all_held(wanted: dict[str, str | None]) -> Exact:
        """The experiment has a row matching each of `wanted`: a correlated count.

        A scalar subquery, not EXISTS: MariaDB turns an EXISTS into a semi-join (its
        exists_to_in) and then sorts every match, which walking the list order avoids.
        """
        each = [Q(key=key) if val is None else Q(key=key, value=val)
                for key, val in wanted.items()]
        hits = (ExpLabel.objects.filter(reduce(or_, each), experiment_id=OuterRef("pk"))
                .order_by().values("experiment_id").annotate(hits=Count("id")).values("hits"))
        return Exact(Subquery(hits), len(wanted))


# The longest `search`: the name column's size (names are at most 128 characters).
SEARCH_MAX_CHARS = 255
SEARCH_HELP = ("Only the experiments whose name starts with this text, case-insensitive "
               "(`llama` matches `llama-7b` and `Llama-bench`, not `my-llama`); served by an "
               f"index on the name. At most {SEARCH_MAX_CHARS} characters.")


@functools.cache
def _creator_lookup() -> IdsQuery:
    """The users whose email is `[0]` or whose id is `[-1]`: compiled once per process."""
    return IdsQuery(lambda keys: User.objects.filter(Q(email=keys[0]) | Q(pk=keys[-1]))
                    .values("pk"), sentinel=lambda i: f"\x00{i}")


class ExperimentFilter(FalconFilterSet):
    """Experiments matching every filter given; a multi-value filter keeps any of its values.

    Filters (query names): `status` (ExpStatus values), `exp_type`, `cluster_name`, `id`
    (positive ids), each repeated or a comma list; `updated_since` (ISO 8601); `creator` (the
    creator's email or user id); `search` (a name prefix, case-insensitive: `PrefixSearchFilter`);
    `label` (label selectors, all of which must hold: `LabelSelectorFilter`).

    Raises (from `validate`):
        ValidationFailed: a status is unknown, an id is not a positive integer, a name is over
            255 characters or `updated_since` is not a date-time; keyed by the filter's name.
    """

    status = ChoiceListFilter(choices=choices(ExpStatus),
                              help_text="Only these statuses (repeat it, or a comma list).")
    exp_type = MultiValueFilter(help_text="Only these experiment types (repeat it, or a comma "
                                          "list).")
    cluster_name = MultiValueFilter(help_text="Only these clusters (repeat it, or a comma list).")
    id = IdListFilter(help_text="Only these experiment ids (repeat it, or a comma list).")
    updated_since = UpdatedSinceFilter()
    # Bounded by the email column (RFC 5321) before any query: a 70,000-character value once
    # reached the database whole.
    creator = django_filters.CharFilter(method="filter_creator", max_length=MAX_EMAIL_CHARS,
                                        help_text="Only the experiments of this creator (email "
                                                  f"or user id); at most {MAX_EMAIL_CHARS} "
                                                  "characters.")
    # No name is longer than its column: a longer prefix is a mistake, told as such.
    search = PrefixSearchFilter(fields=("name",), help_text=SEARCH_HELP,
                                max_length=SEARCH_MAX_CHARS)
    label = LabelSelectorFilter(help_text=LABEL_HELP)

    class Meta:
        model = Experiment
        fields: list[str] = []

    def filter_creator(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        """Keep the experiments whose creator has this email or this user id.

        The users are looked up first (one small query on their unique keys), so the list
        itself filters on `creator_id` alone, served by the index on (creator, created_at, id),
        instead of joining users (which let MariaDB start from the users table and sort).
        """
        from accounts.emails import email_key

        # The stored normal form, compared exactly: MariaDB's collation alone equates look-alikes.
        # Email and user id are each unique: two users at most.
        user_ids = [row["pk"] for row in _creator_lookup()([email_key(value), value])]
        if len(user_ids) == 1:
            return queryset.filter(creator_id=user_ids[0])
        return queryset.filter(creator_id__in=user_ids)
