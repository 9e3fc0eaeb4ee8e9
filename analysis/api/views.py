"""HTTP API of the Data Analyzer (docs/analyzer.md, "HTTP API"): `/api/v1/analyses`,
`/api/v1/plugins`.

Views parse, call a service, a selector or the analyzer client, and serialize; domain errors
become HTTP errors in `core.http.drf.exception_handler` (the controller down: 503 `unavailable`).
Reads come from the database and the store; what has a side effect on the analyzer controller
(create, cancel, delete, the live log) or is its data (the catalog) goes through
`analysis.analyzer_client`. Cancel and the log fall back to the database and the store when the
controller is unavailable; a purge needs it.
"""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view,
)
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.http.drf import FilterSetBackend, StrictCursorPagination
from core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from core.http.filters import MAX_ID, MAX_NAME_CHARS
from core.http.params import bool_query
from core.limits.numbers import parse_param
from core.domain.statuses import AnalysisStatus, AnalysisType
from core.limits.text import utf8_page

from .. import analyzer_client, selectors, services
from ..analyzer_client import ServiceUnavailable
from ..filters import AnalysisFilter
from ..models import AnalysisRecord
from ..outputs import log_from_store, read_results
from .serializers import (
    AnalysisCreateInputSerializer, AnalysisSerializer, LogsSerializer, PluginListSerializer,
    PluginSerializer, ResultsSerializer, request_errors,
)

LOG_DEFAULT_LIMIT = 1024 * 1024
LOG_MAX_LIMIT = 4 * 1024 * 1024
LOG_MAX_OFFSET = 2**62


class AnalysisCursorPagination(StrictCursorPagination):
    """Keyset cursors on (created_at, analysis_id), newest first."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-created_at"


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(description=description)


UNAVAILABLE = _error("The analyzer controller is unavailable (`code`: `unavailable`); retry.")
BAD_GATEWAY = _error("The analyzer controller refused the API server or failed.")


def _list_param(name: str, items: dict, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, {"type": "array", "items": items}, explode=True,
                            style="form", description=description)


LIST_PARAMETERS = [
    # An empty value is a 400 (core.http.middleware.EmptyQueryValueMiddleware): no "" here.
    _list_param("status", {"type": "string", "enum": [*AnalysisStatus]},
                "Only analyses in these statuses (repeat it, or a comma list)."),
    _list_param("analysis_type", {"type": "string", "enum": [*AnalysisType]},
                "Only offline or only online analyses."),
    _list_param("exp", {"type": "integer", "minimum": 1, "maximum": MAX_ID},
                "Only the analyses of these experiments (repeat it, or a comma list)."),
    _list_param("plugin", {"type": "string", "maxLength": MAX_NAME_CHARS,
                           "pattern": "^[^,\\x00]*[^,\\s\\x00][^,\\x00]*$"},
                "Only analyses by these plugins (repeat it, or a comma list)."),
    OpenApiParameter("page_size", {"type": "integer", "minimum": 1,
                                   "maximum": AnalysisCursorPagination.max_page_size},
                     description="Analyses per page, from 1 to "
                                 f"{AnalysisCursorPagination.max_page_size} (default "
                                 f"{AnalysisCursorPagination.page_size})."),
    OpenApiParameter("cursor", OpenApiTypes.STR,
                     description="The cursor of a page, from a `next` or `previous` link; any "
                                 "other value is a 400."),
]
ANALYSIS_ID_PARAM = OpenApiParameter(
    "analysis_id", {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$"},
    OpenApiParameter.PATH, description="The analysis' id, e.g. an-0f3c9a1b2d4e5f60.")


def _get_for_change(request, analysis_id: str, verb: str) -> AnalysisRecord:
    """The record, if the request's user may cancel or delete it.

    Raises:
        NotFound: no such analysis.
        PermissionDenied: neither its creator nor staff (HTTP 403).
    """
    record = selectors.analysis_get(analysis_id=analysis_id)
    if not services.analysis_may_change(record=record, actor=request.user):
        raise PermissionDenied(f"{getattr(request.user, 'email', request.user)} may not {verb} "
                               f"analysis {analysis_id}: only its creator or a staff user may.")
    return record


def _detail(analysis_id: str) -> dict:
    record = selectors.analysis_get(analysis_id=analysis_id)
    return AnalysisSerializer(record, context={"queue_position": True}).data


@extend_schema_view(
    get=extend_schema(summary="ListAnalyses", responses=AnalysisSerializer(many=True),
                      parameters=LIST_PARAMETERS),
    post=extend_schema(summary="CreateAnalysis", request=AnalysisCreateInputSerializer,
                       responses={
                           201: AnalysisSerializer,
                           400: _error("A field is invalid (named in the body)."),
                           404: _error("No such experiment."),
                           409: _error("The experiment has not finished."),
                           502: BAD_GATEWAY, 503: UNAVAILABLE}),
)
class AnalysisListCreateView(generics.ListAPIView):
    """List analyses (filters exp, status, analysis_type, plugin; cursor pages) or create an
    online one through the analyzer controller."""

    serializer_class = AnalysisSerializer
    pagination_class = AnalysisCursorPagination
    filter_backends = [FilterSetBackend]
    filterset_class = AnalysisFilter  # the gRPC list and the admin use it too

    def get_queryset(self):
        return selectors.analysis_queryset()

    def get_serializer_class(self):
        if self.request is not None and self.request.method == "POST":
            return AnalysisCreateInputSerializer
        return AnalysisSerializer

    def post(self, request):
        data = AnalysisCreateInputSerializer(data=request.data)
        if not data.is_valid():
            raise ValidationFailed(request_errors(data.errors))
        body = data.validated_data
        # The experiment's existence and state are the API server's data: answered here, also
        # while the controller is down (the record's creation checks them again).
        exp, _artifact = services.analysable_artifact(exp_id=body["exp_id"],
                                                      analysis_type=AnalysisType.ONLINE)
        try:
            created = analyzer_client.create_analysis(
                exp_id=exp.pk, creator_email=request.user.email, analysis_type="online",
                plugin_name=body["plugin"], command=body["command"],
                script_content=body["script"], name=body["name"],
                resources=dict(body.get("resources") or {}), script_name=body["script_name"])
        except ValidationFailed as exc:
            # The controller names AnalyzerService's fields: answer with the request's.
            raise ValidationFailed(request_errors(exc.errors, foreign_to_detail=True)) from None
        return Response(_detail(created.analysis_id), status=status.HTTP_201_CREATED)


class AnalysisDetailView(APIView):
    """Get or delete one analysis."""

    @extend_schema(summary="GetAnalysis", parameters=[ANALYSIS_ID_PARAM],
                   responses={200: AnalysisSerializer})
    def get(self, request, analysis_id: str):
        return Response(_detail(analysis_id))

    @extend_schema(summary="DeleteAnalysis", parameters=[
        ANALYSIS_ID_PARAM,
        OpenApiParameter("purge", OpenApiTypes.BOOL, description="Also remove its results and "
                         "log from the store (needs the analyzer controller).")],
        responses={204: None,
                   403: _error("Only the creator or a staff user may delete it."),
                   409: _error("The analysis is not terminal: cancel it first."),
                   502: BAD_GATEWAY,
                   503: _error("The analyzer controller is unavailable and purge needs it.")})
    def delete(self, request, analysis_id: str):
        unknown = sorted(set(request.query_params) - {"purge", "format"})
        if unknown:
            raise ValidationFailed({name: ["is not a query parameter; use purge."]
                                    for name in unknown})
        purge = bool_query(request, "purge", default=False)
        record = _get_for_change(request, analysis_id, "delete")
        if not record.is_terminal:
            raise Conflict(f"Analysis {analysis_id} is {record.status}; only succeeded, failed, "
                           "cancelled or skipped analyses can be deleted. Cancel it first.")
        try:
            analyzer_client.delete_analysis(analysis_id=analysis_id, purge=purge)
        except ServiceUnavailable:
            if purge:
                raise
            services.analysis_record_delete(analysis_id)
        except NotFound:
            # The controller found no record: it is gone already (deleted meanwhile).
            if AnalysisRecord.objects.filter(pk=analysis_id).exists():
                raise
        return Response(status=status.HTTP_204_NO_CONTENT)


class AnalysisCancelView(APIView):
    """Cancel one analysis; OK when already terminal."""

    @extend_schema(summary="CancelAnalysis", request=None, parameters=[ANALYSIS_ID_PARAM],
                   responses={200: AnalysisSerializer,
                              403: _error("Only the creator or a staff user may cancel it."),
                              502: BAD_GATEWAY})
    def post(self, request, analysis_id: str):
        record = _get_for_change(request, analysis_id, "cancel")
        if not record.is_terminal:
            try:
                analyzer_client.cancel_analysis(analysis_id=analysis_id,
                                                requester_email=request.user.email)
            except ServiceUnavailable:
                # The controller stops the run when it is back (it reconciles cancelled
                # records with its live runs).
                services.analysis_cancel_in_db(analysis_id, actor=request.user)
        return Response(_detail(analysis_id))


def _int_param(request, name: str, *, default: int, minimum: int, maximum: int) -> int:
    """The query parameter `name` as ASCII decimal in `minimum..maximum`; `default` if absent.

    Raises:
        ValidationFailed: any other value (HTTP 400 naming the parameter).
    """
    raw = request.query_params.get(name)
    if raw is None:
        return default
    return parse_param(raw, field=name, minimum=minimum, maximum=maximum)


def pending_note(record: AnalysisRecord) -> str:
    """The logs' note of a pending analysis: its queue position, and when its log starts."""
    position = selectors.queue_position(record)
    return (f"the analysis is pending (queue position {position if position else 'unknown'}); "
            "its log starts when it runs")


class AnalysisLogsView(APIView):
    """The analysis' log from a byte offset: live from the controller, else from the store."""

    @extend_schema(summary="GetAnalysisLogs", parameters=[
        ANALYSIS_ID_PARAM,
        OpenApiParameter("offset", {"type": "integer", "minimum": 0, "maximum": LOG_MAX_OFFSET},
                         description="Byte offset to read from (default 0)."),
        OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": LOG_MAX_LIMIT},
                         description=f"Most bytes to return (default {LOG_DEFAULT_LIMIT}).")],
        responses={200: LogsSerializer, 502: BAD_GATEWAY})
    def get(self, request, analysis_id: str):
        unknown = sorted(set(request.query_params) - {"offset", "limit", "format"})
        if unknown:
            raise ValidationFailed({name: ["is not a query parameter; use offset and limit."]
                                    for name in unknown})
        offset = _int_param(request, "offset", default=0, minimum=0, maximum=LOG_MAX_OFFSET)
        limit = _int_param(request, "limit", default=LOG_DEFAULT_LIMIT, minimum=1,
                           maximum=LOG_MAX_LIMIT)
        record = selectors.analysis_get(analysis_id=analysis_id)
        first: dict = {}

        def read(start: int, size: int) -> bytes:
            # The first read's answer decides `complete` and `note`; a later one (the rest of a
            # character the limit cut) only adds bytes.
            try:
                logs = analyzer_client.get_analysis_logs(analysis_id=analysis_id, offset=start,
                                                         limit_bytes=size)
                content, complete, note = logs.content, logs.complete, logs.note
            except ServiceUnavailable:
                content, note = log_from_store(record, start, size)
                # As the controller answers: a full page may have more after it.
                complete = record.is_terminal and len(content) < size
            first.setdefault("complete", complete)
            first.setdefault("note", note)
            return content

        # Whole characters only, by the rule of every log page (`core.limits.text.utf8_page`).
        start, content = utf8_page(read, offset, limit, growing=not record.is_terminal)
        next_offset, complete, note = start + len(content), first["complete"], first["note"]
        if not content and record.status == AnalysisStatus.PENDING:
            note = pending_note(record)
        return Response(LogsSerializer({
            "content": content.decode("utf-8", "replace").replace("\x00", "\ufffd"),
            "next_offset": next_offset, "complete": complete, "note": note}).data)


class AnalysisResultsView(APIView):
    """The analysis' results file, parsed."""

    @extend_schema(summary="GetAnalysisResults", parameters=[ANALYSIS_ID_PARAM],
                   responses={200: ResultsSerializer,
                              404: _error("No such analysis, or no results yet.")})
    def get(self, request, analysis_id: str):
        record = selectors.analysis_get(analysis_id=analysis_id)
        return Response(ResultsSerializer(read_results(record)).data)


def plugin_data(plugin) -> dict:
    """A catalog entry (`falcon.v1.Plugin`) as the HTTP API shows it."""
    res = plugin.resources
    return {"name": plugin.name, "description": plugin.description, "command": plugin.command,
            "artifact_types": list(plugin.artifact_types),
            "resources": {"cpu_request": res.cpu_request, "cpu_limit": res.cpu_limit,
                          "memory_request": res.memory_request,
                          "memory_limit": res.memory_limit},
            "timeout_seconds": plugin.timeout_seconds}


class PluginListView(APIView):
    """The analyzer controller's plugin catalog."""

    @extend_schema(summary="ListPlugins", operation_id="v1_plugins_list", responses={200: PluginListSerializer,
                                                     502: BAD_GATEWAY, 503: UNAVAILABLE})
    def get(self, request):
        plugins = analyzer_client.list_plugins().plugins
        return Response(PluginListSerializer({"plugins": [plugin_data(p) for p in plugins]}).data)


class PluginDetailView(APIView):
    """One catalog entry."""

    @extend_schema(summary="GetPlugin", operation_id="v1_plugins_retrieve", parameters=[OpenApiParameter(
        "name", {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}, OpenApiParameter.PATH,
        description="The plugin's name.")],
        responses={200: PluginSerializer, 502: BAD_GATEWAY, 503: UNAVAILABLE})
    def get(self, request, name: str):
        return Response(PluginSerializer(plugin_data(analyzer_client.get_plugin(name=name))).data)
