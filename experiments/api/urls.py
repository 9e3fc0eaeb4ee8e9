from django.urls import path, register_converter

from core.filters import MAX_ID

from . import views


class IdConverter:
    """A database id in a path: 1 to 2^63 - 1 (a larger number names no row: 404, not 500)."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 1 <= number <= MAX_ID:
            raise ValueError(value)
        return number

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(IdConverter, "id")

urlpatterns = [
    path("exps", views.ExpListCreateView.as_view(), name="exp-list"),
    path("exps/<id:exp_id>", views.ExpDetailView.as_view(), name="exp-detail"),
    path("exps/<id:exp_id>/abort", views.ExpAbortView.as_view(), name="exp-abort"),
]
