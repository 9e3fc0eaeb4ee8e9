from django.urls import path, re_path, register_converter
from django.views.decorators.csrf import csrf_exempt

from core.http.filters import MAX_ID
from core.limits.numbers import parse_decimal

from . import files, views


class IdConverter:
    """A database id in a path: ASCII digits, 1 to 2^63 - 1 (`core.limits.numbers.parse_decimal`).

    Anything else in that segment (a sign, a space, `²`, a 30-digit number) does not match
    here and falls through to `views.bad_exp_id`: a 400 naming `exp_id`, never a 500.
    """

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        return parse_decimal(value, minimum=1, maximum=MAX_ID)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(IdConverter, "id")

urlpatterns = [
    path("exps", views.ExpListCreateView.as_view(), name="exp-list"),
    path("exps/diff", views.ExpDiffView.as_view(), name="exp-diff"),
    path("exps/<id:exp_id>/labels", views.ExpLabelsView.as_view(), name="exp-labels"),
    path("exps/<id:exp_id>", views.ExpDetailView.as_view(), name="exp-detail"),
    path("exps/<id:exp_id>/abort", views.ExpAbortView.as_view(), name="exp-abort"),
    path("exps/<id:exp_id>/logs", files.ExpLogsView.as_view(), name="exp-logs"),
    path("exps/<id:exp_id>/artifacts", files.ExpArtifactsView.as_view(), name="exp-artifacts"),
    path("exps/<id:exp_id>/artifacts/file", files.ExpArtifactFileView.as_view(),
         name="exp-artifact-file"),
    # Last: a path segment where an id belongs that is not one.
    re_path(r"^exps/(?P<raw>[^/]+)/(?P<sub>logs|artifacts|artifacts/file)$",
            csrf_exempt(files.bad_exp_id)),
    re_path(r"^exps/(?P<raw>[^/]+)(?P<action>/abort|/labels)?$", views.bad_exp_id),
]
