"""HTTP gateway of ExperimentService (docs/architecture.md).

Views parse, call a service or selector, and serialize; domain errors become HTTP errors in
`core.http.drf.exception_handler`.
"""
from __future__ import annotations

from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view,
)
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.emails import MAX_EMAIL_CHARS
from core.http.drf import StrictCursorPagination, represent
from core.http.filters import MAX_ID, MAX_NAME_CHARS
from core.http.params import bool_query
from core.http.parsers import MergePatchParser, StrictJSONParser

from .. import selectors, services
from ..filters import SEARCH_HELP, SEARCH_MAX_CHARS, ExperimentFilter
from ..diff import MAX_EXPERIMENTS
from ..filters import LABEL_HELP
from ..labels import NON_EMPTY_SELECTOR_LIST_PATTERN
from ..idempotency import IDEMPOTENCY_HEADER
from .serializers import (
    ARTIFACT_SUMMARY_FIELDS, JOB_SUMMARY_FIELDS, ExpCreatedSerializer, ExpCreateInputSerializer,
    ExpDetailSerializer, ExpLabelsPatchSerializer, ExpListItemSerializer,
)


class ExpCursorPagination(StrictCursorPagination):
    """Keyset cursors on (ordering, id): exact under creates, deletes and changes (dec-paging)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-created_at"
    keys_only = True  # ExpListCreateView.list reads the rows by id


ORDERING_FIELDS = ["created_at", "updated_at", "name", "status", "priority", "id"]
# Django's text fields refuse NUL characters, and an empty (or blank) value is a 400
# (core.http.middleware.EmptyQueryValueMiddleware).
NON_BLANK = "^[^\\x00]*[^\\s\\x00][^\\x00]*$"
_ORDER_KEY = f"-?({'|'.join(ORDERING_FIELDS)})"


def _list_param(name: str, items: dict, description: str) -> OpenApiParameter:
    """A repeatable filter (`?name=a&name=b`; the server also splits comma lists)."""
    return OpenApiParameter(name, {"type": "array", "items": items}, explode=True,
                            style="form", description=description)


# What the server accepts (core.http.filters, core.http.drf), which the generated parameters leave out.
LIST_EXPS_PARAMETERS = [
    _list_param("id", {"type": "integer", "minimum": 1, "maximum": MAX_ID},
                "Only these experiment ids (repeat it, or a comma list)."),
    _list_param("cluster_name", {"type": "string", "maxLength": MAX_NAME_CHARS},
                "Only these clusters (repeat it, or a comma list)."),
    _list_param("exp_type", {"type": "string", "maxLength": MAX_NAME_CHARS},
                "Only these experiment types (repeat it, or a comma list)."),
    OpenApiParameter("page_size", {"type": "integer", "minimum": 1,
                                   "maximum": ExpCursorPagination.max_page_size},
                     description="Experiments per page, from 1 to "
                                 f"{ExpCursorPagination.max_page_size} (default "
                                 f"{ExpCursorPagination.page_size})."),
    OpenApiParameter("ordering", {"type": "string",
                                  "pattern": f"^{_ORDER_KEY}(,{_ORDER_KEY})*$"},
                     description="Sort keys, comma separated, '-' for descending: "
                                 f"{', '.join(ORDERING_FIELDS)} (default -created_at)."),
    OpenApiParameter("updated_since", {"type": "string", "format": "date-time"},
                     description="Only rows updated at or after this instant (ISO 8601, e.g. "
                                 "2024-05-01T12:00:00Z)."),
    OpenApiParameter("creator", {"type": "string", "pattern": NON_BLANK,
                                 "maxLength": MAX_EMAIL_CHARS},
                     description="Only the experiments of this creator (email or user id)."),
    OpenApiParameter("search", {"type": "string", "pattern": NON_BLANK,
                                "maxLength": SEARCH_MAX_CHARS},
                     description=SEARCH_HELP),
    _list_param("label", {"type": "string", "pattern": NON_EMPTY_SELECTOR_LIST_PATTERN},
                LABEL_HELP),
    OpenApiParameter("cursor", OpenApiTypes.STR,
                     description="The cursor of a page, from a `next` or `previous` link; any "
                                 "other value is a 400."),
]


@extend_schema_view(
    get=extend_schema(summary="ListExps", responses=ExpListItemSerializer(many=True),
                      parameters=LIST_EXPS_PARAMETERS),
    post=extend_schema(summary="CreateExp", request=ExpCreateInputSerializer,
                       parameters=[OpenApiParameter(
                           IDEMPOTENCY_HEADER, {"type": "string", "maxLength": 255,
                                                "pattern": "^[!-~]([ -~]*[!-~])?$"},
                           OpenApiParameter.HEADER,
                           description="A key of your choosing (a UUID) that makes a retry "
                                       "safe: a repeat from the same user with the same body "
                                       "answers 201 with the first experiment (header "
                                       "Idempotent-Replayed: true) and creates nothing; with "
                                       "another body it answers 409 idempotency_key_reused.")],
                       responses={201: ExpDetailSerializer,
                                  409: OpenApiResponse(description="The Idempotency-Key was "
                                                       "used before for another request."),
                                  400: OpenApiResponse(description="A field is invalid."),
                                  403: OpenApiResponse(description="A service principal "
                                                       "cannot create experiments."),
                                  413: OpenApiResponse(description="The config is over its limit "
                                                       "(just under 128 KiB) or the body over "
                                                       "8 MiB (docs/limits.md).")}),
)
class ExpListCreateView(generics.ListAPIView):
    """List experiments (filters, search by name, ordering, cursor pages) or create one."""

    serializer_class = ExpListItemSerializer
    pagination_class = ExpCursorPagination
    filterset_class = ExperimentFilter  # the gRPC ListExps and the admin use it too
    ordering_fields = ORDERING_FIELDS
    ordering = ["-created_at"]

    def get_queryset(self):
        return selectors.exp_list_queryset()

    def list(self, request, *args, **kwargs):
        """ListExps: one page of summary rows, in 2 queries whatever its size.

        The page's ids and list keys (through the filter's index), then its experiments with
        their jobs and artifacts as JSON rows the database renders, embedded in the response
        as they are (`selectors.exp_list_rows`); no serializer runs per row.
        """
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        rows = selectors.exp_list_rows([exp["id"] for exp in page],
                                       job_fields=JOB_SUMMARY_FIELDS,
                                       artifact_fields=ARTIFACT_SUMMARY_FIELDS)
        return self.get_paginated_response(rows)

    def get_serializer_class(self):
        # The browsable API renders its POST form from this: show CreateExp's input fields.
        if self.request is not None and self.request.method == "POST":
            return ExpCreateInputSerializer
        return ExpListItemSerializer

    def post(self, request):
        """CreateExp: one transaction of three INSERTs; the reply is built without a read-back."""
        data = ExpCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        exp = services.exp_create(creator=request.user, **data.validated_data,
                                  idempotency_key=request.headers.get(IDEMPOTENCY_HEADER))
        # A replay answers as the first create did (201, the same experiment), as Stripe's
        # idempotent requests do, and says so in a header.
        headers = {"Idempotent-Replayed": "true"} if exp.replayed else None
        return Response(represent(ExpCreatedSerializer, exp), status=status.HTTP_201_CREATED,
                        headers=headers)


# The path's experiment id as the server reads it (`IdConverter`, `core.limits.numbers`): ASCII digits,
# 1 to 2^63 - 1; anything else answers 400 naming `exp_id`.
EXP_ID_PARAM = OpenApiParameter(
    "exp_id", {"type": "integer", "minimum": 1, "maximum": MAX_ID}, OpenApiParameter.PATH,
    description="The experiment's id.")


class ExpDetailView(APIView):
    """Get or delete one experiment."""

    @extend_schema(summary="GetExp", parameters=[EXP_ID_PARAM],
                   responses={200: ExpDetailSerializer})
    def get(self, request, exp_id: int):
        return Response(represent(ExpDetailSerializer, selectors.exp_get(exp_id=exp_id)))

    @extend_schema(summary="DeleteExp", parameters=[EXP_ID_PARAM, OpenApiParameter(
        "purge", OpenApiTypes.BOOL, description="Also delete the stored artifact files and the "
                                                "replicas' logs.")], responses={
        204: None,
        403: OpenApiResponse(description="Only the creator or a staff user may delete it."),
        409: OpenApiResponse(description="The experiment is not terminal.")})
    def delete(self, request, exp_id: int):
        from ..files import exp_delete_with_files  # run folders, and files with ?purge=true

        purge = bool_query(request, "purge", default=False)
        exp_delete_with_files(exp_id=exp_id, actor=request.user, purge=purge)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ExpAbortView(APIView):
    """Abort one experiment (idempotent)."""

    @extend_schema(summary="AbortExp", request=None, parameters=[EXP_ID_PARAM], responses={
        200: ExpDetailSerializer,
        403: OpenApiResponse(description="Only the creator or a staff user may abort it."),
        409: OpenApiResponse(description="The experiment already Succeeded or Failed, or "
                                             "all its jobs succeeded (it has finished).")})
    def post(self, request, exp_id: int):
        services.exp_abort(exp_id=exp_id, actor=request.user)
        return Response(represent(ExpDetailSerializer, selectors.exp_get(exp_id=exp_id)))


class ExpLabelsView(APIView):
    """Change an experiment's labels (creator or staff), in one transaction."""

    parser_classes = [StrictJSONParser, MergePatchParser]

    @extend_schema(summary="UpdateExpLabels", parameters=[EXP_ID_PARAM, OpenApiParameter(
        "overwrite", OpenApiTypes.BOOL, default=True,
        description="false: refuse (409, naming the key) to change the value of a label the "
                    "experiment already has, checked in the change's transaction "
                    "(`kubectl label` without --overwrite). Default true: a set replaces.")],
                   request=ExpLabelsPatchSerializer, responses={
                       200: OpenApiResponse(
                           response={"type": "object", "properties": {"labels": {
                               "type": "object", "additionalProperties": {"type": "string"}}}},
                           description="The experiment's labels after the change."),
                       400: OpenApiResponse(description="A label key or value is invalid."),
                       403: OpenApiResponse(description="Only the creator or a staff user may "
                                                        "label it."),
                       409: OpenApiResponse(description="overwrite=false and a label to set "
                                                        "already has another value.")})
    def patch(self, request, exp_id: int):
        """A JSON merge patch (RFC 7396) of the labels: `{"labels": {"a": "1", "b": null}}`, sent
        as `application/json` or `application/merge-patch+json`."""
        data = ExpLabelsPatchSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        patch = data.validated_data["labels"]
        overwrite = bool_query(request, "overwrite", default=True)
        if not isinstance(patch, dict):
            from core.errors import ValidationFailed

            raise ValidationFailed({"labels": ["must be an object of key to value (set) or "
                                               "null (remove)."]})
        labels = services.exp_update_labels(
            exp_id=exp_id, actor=request.user,
            set_labels={k: v for k, v in patch.items() if v is not None},
            remove=[k for k, v in patch.items() if v is None], overwrite=overwrite)
        return Response({"labels": labels})


DIFF_PARAMETERS = [
    OpenApiParameter("ids", {"type": "array", "minItems": 2, "maxItems": MAX_EXPERIMENTS,
                             "uniqueItems": True,
                             "items": {"type": "integer", "minimum": 1, "maximum": MAX_ID}},
                     explode=True, style="form", required=True,
                     description=f"The experiments to compare, 2 to {MAX_EXPERIMENTS} distinct "
                                 "ids, in the order to show (repeat it, or a comma list)."),
    OpenApiParameter("all", {"type": "boolean"},
                     description="Also list the paths whose values are all equal."),
]


class ExpDiffView(APIView):
    """Compare experiments by key path: fields, labels, task specs per role and config."""

    @extend_schema(summary="DiffExps", parameters=DIFF_PARAMETERS, responses={
        200: OpenApiResponse(response={"type": "object"}, description=(
            "`experiments` (id, name), `config_format` (yaml or text), `differences` "
            "(path, values one per experiment, absent: the positions without a value, equal; "
            "written: each config scalar's text where the spellings differ, e.g. 3.10 and 3.1, "
            "which is a difference even when the values are equal; configs are read by the "
            "YAML 1.2 core schema and a NaN equals a NaN) and `config_text_diffs` (unified diffs against the first when a config is not "
            "YAML).")),
        400: OpenApiResponse(description="Fewer than 2 or more than the maximum ids, or an "
                                         "id is not a positive integer."),
        404: OpenApiResponse(description="An id names no experiment.")})
    def get(self, request):
        from django.forms import ValidationError as FormError

        from core.errors import ValidationFailed
        from core.http.filters import IdSequenceField

        try:
            ids = IdSequenceField().clean(request.query_params.getlist("ids"))
        except FormError as exc:
            raise ValidationFailed({"ids": list(exc.messages)}) from None
        return Response(selectors.exp_diff(
            exp_ids=ids, include_equal=bool_query(request, "all", default=False)))


@csrf_exempt
def bad_exp_id(request, raw: str, action: str | None = None):
    """400 for `/api/v1/exps/<raw>[/abort|/labels]` where `raw` is not an id (`core.limits.numbers`).

    Only for the methods the real route serves (GET and DELETE on the experiment, POST on
    `/abort`, PATCH on `/labels`): any other method is 405 Method Not Allowed with `Allow`, as
    the real view would answer. No data is read. CSRF-exempt like every API view (the DRF views
    are): the path is wrong whatever the credentials, and a browser's cookie must not turn it
    into an HTML 403.
    """
    allowed = {"/abort": ("POST", "OPTIONS"), "/labels": ("PATCH", "OPTIONS")}.get(
        action or "", ("GET", "HEAD", "DELETE", "OPTIONS"))
    return bad_id_answer(request, raw, allowed)


def bad_id_answer(request, raw: str, allowed: tuple[str, ...]):
    """The answer of a route whose `<exp_id>` segment `raw` is not an id: 405 with `Allow` for
    a method outside `allowed`, else 400 naming `exp_id` and the accepted range."""
    from django.http import JsonResponse

    from core.limits.numbers import BadNumber, parse_decimal

    if request.method not in allowed:
        res = JsonResponse({"detail": f'Method "{request.method}" not allowed.',
                            "code": "method_not_allowed"}, status=405)
        res["Allow"] = ", ".join(allowed)
        return res
    try:
        parse_decimal(raw, minimum=1, maximum=MAX_ID)
        message = f"must be an integer from 1 to {MAX_ID}"
    except BadNumber as exc:
        message = str(exc)
    return JsonResponse({"exp_id": [f"{message}; got {raw[:40]!r}."], "code": "invalid"},
                        status=400)
