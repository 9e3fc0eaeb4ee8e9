"""HTTP gateway of ExperimentService (docs/architecture.md).

Views parse, call a service or selector, and serialize; domain errors become HTTP errors in
`core.drf.exception_handler`.
"""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.drf import StrictCursorPagination

from .. import selectors, services
from ..filters import ExperimentFilter
from .serializers import ExpCreateInputSerializer, ExpDetailSerializer, ExpListItemSerializer


class ExpCursorPagination(StrictCursorPagination):
    """Keyset cursors on (ordering, id): exact under creates, deletes and changes (dec-paging)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-created_at"


@extend_schema_view(
    get=extend_schema(summary="ListExps", responses=ExpListItemSerializer(many=True)),
    post=extend_schema(summary="CreateExp", request=ExpCreateInputSerializer,
                       responses={201: ExpDetailSerializer,
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
    ordering_fields = ["created_at", "updated_at", "name", "status", "priority", "id"]
    ordering = ["-created_at"]

    def get_queryset(self):
        return selectors.exp_queryset()

    def get_serializer_class(self):
        # The browsable API renders its POST form from this: show CreateExp's input fields.
        if self.request is not None and self.request.method == "POST":
            return ExpCreateInputSerializer
        return ExpListItemSerializer

    def post(self, request):
        data = ExpCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        exp = services.exp_create(creator=request.user, **data.validated_data)
        exp = selectors.exp_get(exp_id=exp.pk)
        return Response(ExpDetailSerializer(exp).data, status=status.HTTP_201_CREATED)


class ExpDetailView(APIView):
    """Get or delete one experiment."""

    @extend_schema(summary="GetExp", responses={200: ExpDetailSerializer})
    def get(self, request, exp_id: int):
        return Response(ExpDetailSerializer(selectors.exp_get(exp_id=exp_id)).data)

    @extend_schema(summary="DeleteExp", responses={
        204: None,
        403: OpenApiResponse(description="Only the creator or a staff user may delete it."),
        409: OpenApiResponse(description="The experiment is not terminal.")})
    def delete(self, request, exp_id: int):
        services.exp_delete(exp_id=exp_id, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ExpAbortView(APIView):
    """Abort one experiment (idempotent)."""

    @extend_schema(summary="AbortExp", request=None, responses={
        200: ExpDetailSerializer,
        403: OpenApiResponse(description="Only the creator or a staff user may abort it."),
        409: OpenApiResponse(description="The experiment already Succeeded or Failed, or "
                                             "all its jobs succeeded (it has finished).")})
    def post(self, request, exp_id: int):
        services.exp_abort(exp_id=exp_id, actor=request.user)
        return Response(ExpDetailSerializer(selectors.exp_get(exp_id=exp_id)).data)
