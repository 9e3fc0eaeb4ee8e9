"""What Falcon's staff may do in the Django admin, and how its changelists filter.

`ReadOnlyAdminMixin` is the one read-only admin (model admins and inlines alike): operators view
rows and run the actions a model admin declares, nothing is added, edited or deleted by a form
(status fields change only through transitions; deleting goes through the services).
`FilterSetAdminMixin` makes a changelist's filters and search those of the entity's FilterSet
(`core.filters`), the same names and values as the HTTP and gRPC lists.
"""
from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet

from core.errors import ValidationFailed
from core.filters import FalconFilterSet, SearchFilter


class ReadOnlyAdminMixin:
    """A read-only admin for operators: view every field, run the declared actions, no forms.

    Falcon's `is_staff` is the operator role (staff may abort or delete any experiment), set in
    the admin; per-model Django permissions would leave an operator who is not a superuser with
    an empty admin, so every active staff user may view. Adding, changing and deleting are
    refused to everyone by default; every field is read-only. An action that changes rows goes
    through a service and declares `allowed_permissions = ("operate",)`
    (`has_operate_permission`: active staff).

    Mix it in before `admin.ModelAdmin` or an inline (`admin.TabularInline`, ...).
    """

    def is_operator(self, request) -> bool:
        """True when the request's user is active staff (an operator)."""
        user = request.user
        return bool(user.is_active and user.is_staff)

    def has_module_permission(self, request) -> bool:
        return self.is_operator(request) or super().has_module_permission(request)

    def has_view_permission(self, request, obj=None) -> bool:
        return self.is_operator(request) or super().has_view_permission(request, obj)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_operate_permission(self, request) -> bool:
        """Whether the user may run the actions that call services (`allowed_permissions`)."""
        return self.is_operator(request)

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        """Every field shown: the admin's `fields` if it declares them, else every model field."""
        if self.fields:
            return list(self.fields)
        return [field.name for field in self.model._meta.fields]


class FilterSetListFilter(admin.SimpleListFilter):
    """A changelist filter that applies one filter of a FilterSet, under the same name.

    Made by `filterset_list_filter`. Its choices are the filter's own (the status enum's) or the
    values found in the rows; the URL parameter is the HTTP API's (`?status=Running,Created`).
    """

    filterset_class: type[FalconFilterSet]
    values_from: str | None = None

    def _filter(self):
        return self.filterset_class.base_filters[self.parameter_name]

    def lookups(self, request, model_admin) -> list[tuple[Any, str]]:
        """The filter's choices, or the distinct non-empty values of `values_from` in the rows."""
        choices = self._filter().extra.get("choices")
        if choices:
            return [(value, label) for value, label in choices]
        path = self.values_from or self._filter().field_name
        values = (model_admin.get_queryset(request).order_by(path)
                  .values_list(path, flat=True).distinct())
        return [(value, value) for value in values if value not in (None, "")]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        """Apply the FilterSet's filter to the chosen value.

        Raises:
            IncorrectLookupParameters: the value is invalid (the admin shows its error page).
        """
        value = self.value()
        if value is None:
            return queryset
        try:
            values = self.filterset_class.validate({self.parameter_name: value})
        except ValidationFailed as exc:
            raise IncorrectLookupParameters(exc.message) from exc
        return self.filterset_class.apply(queryset, values)


def filterset_list_filter(filterset_class: type[FalconFilterSet], name: str, *,
                          title: str | None = None,
                          values_from: str | None = None) -> type[FilterSetListFilter]:
    """Return a `list_filter` entry applying `filterset_class`'s filter `name`.

    Args:
        filterset_class: the entity's FilterSet (`ExperimentFilter`, ...).
        name: one of its filter names; also the URL parameter (`status`).
        title: the sidebar's heading (default: the name, with spaces).
        values_from: the model path whose distinct values are offered, when the filter has no
            choices of its own (default: the filter's `field_name`; e.g. `creator__email`).

    Raises:
        KeyError: `filterset_class` has no filter `name`.
    """
    if name not in filterset_class.base_filters:
        raise KeyError(f"{filterset_class.__name__} has no filter {name!r}.")
    return type(f"{filterset_class.__name__}_{name}_ListFilter", (FilterSetListFilter,), {
        "filterset_class": filterset_class, "parameter_name": name,
        "title": title or name.replace("_", " "), "values_from": values_from})


class FilterSetAdminMixin:
    """A changelist that filters and searches with the entity's FilterSet.

    Set `filterset_class`, and `list_filter` to `filterset_list_filter(...)` entries. The search
    box applies the FilterSet's `search` filter (every term in one of its fields), as the HTTP
    `?search=` does.
    """

    filterset_class: type[FalconFilterSet]

    def _search_filter(self) -> SearchFilter | None:
        search = self.filterset_class.base_filters.get("search")
        return search if isinstance(search, SearchFilter) else None

    def get_search_fields(self, request) -> tuple[str, ...]:
        """The fields the FilterSet's `search` looks in (the admin shows its box if any)."""
        search = self._search_filter()
        return search.search_fields if search else super().get_search_fields(request)

    def get_search_results(self, request, queryset: QuerySet,
                           search_term: str) -> tuple[QuerySet, bool]:
        """Return `(rows matching the FilterSet's search, False)`: no duplicates are possible."""
        if self._search_filter() is None:
            return super().get_search_results(request, queryset, search_term)
        if not search_term:
            return queryset, False
        return self.filterset_class.apply(queryset, {"search": search_term}), False
