"""HTTP views of an experiment's logs and artifact files (`experiments.files`).

- `GET /api/v1/exps/{id}/logs?role=&replica=&offset=&limit=&tail=&timestamps=&since_seconds=`:
  a piece of one replica's log as JSON; follow a live log by asking again from `next_offset`
  until `complete`; `timestamps=true` starts each line with the time it was produced,
  `since_seconds=N` starts at the first line of the last N seconds.
- `GET /api/v1/exps/{id}/artifacts?after=&page_size=`: one page of the files under the artifact
  path (name, size in bytes, modified time, `etag`), `next` links to the following page.
- `GET /api/v1/exps/{id}/artifacts/file?name=`: one file's bytes and its `ETag`; a
  `Range: bytes=N-` request (RFC 9110, section 14) answers 206 with the rest from byte N, so a
  download resumes; with `If-Range: <etag>` only while the file is still that version, else
  the whole file (200), so a partial file of another version is never completed.
"""
from __future__ import annotations

import re

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field,
)
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import ValidationFailed
from core.http.filters import MAX_ID
from core.http.params import bool_message, parse_bool

from .. import selectors
from ..files import (
    DEFAULT_LOG_CHUNK, MAX_LOG_CHUNK, exp_artifact_file, exp_artifact_page, exp_log_chunk,
)

EXP_ID_PARAM = OpenApiParameter(
    "exp_id", {"type": "integer", "minimum": 1, "maximum": MAX_ID}, OpenApiParameter.PATH,
    description="The experiment's id.")
STREAM_CHUNK = 1 << 20  # bytes per read while streaming a file


class QueryIntegerField(serializers.IntegerField):
    """An integer query parameter read as the server reads every number (`core.limits.numbers`):
    1-20 ASCII digits within `min_value..max_value`; `²`, `+1`, `1.0` or `0x10` are a 400."""

    def to_internal_value(self, data):
        from core.limits.numbers import BadNumber, parse_decimal

        try:
            return parse_decimal(data, minimum=self.min_value, maximum=self.max_value)
        except BadNumber as exc:
            raise serializers.ValidationError(f"{exc}; got {str(data)[:40]!r}.") from None


def _validated(serializer_class, request) -> dict:
    """The query parameters read by `serializer_class`; an unknown one is a 400 naming it, as
    on every list (`core.http.drf.FilterSetBackend`)."""
    accepted = set(serializer_class().fields) | {"format"}
    unknown = sorted(set(request.query_params) - accepted)
    if unknown:
        raise ValidationFailed({name: [f"is not a query parameter here; use "
                                       f"{', '.join(sorted(accepted))}."] for name in unknown})
    data = serializer_class(data=request.query_params)
    if not data.is_valid():
        raise ValidationFailed({k: [str(m) for m in v] for k, v in data.errors.items()})
    return data.validated_data


@extend_schema_field(OpenApiTypes.BOOL)
class QueryBooleanField(serializers.Field):
    """A boolean query parameter: exactly `true` or `false` (`1` and `0` too); anything else is
    a 400 naming the parameter."""

    def to_internal_value(self, data):
        value = parse_bool(str(data))
        if value is None:
            raise serializers.ValidationError(bool_message(str(data)))
        return value

    def to_representation(self, value):
        return bool(value)


MAX_SINCE_SECONDS = 100 * 366 * 86400  # a century: anything longer is the whole log anyway


class LogQuerySerializer(serializers.Serializer):
    role = serializers.CharField(required=False, max_length=63,
                                 help_text="The job's role; optional when there is one role.")
    replica = QueryIntegerField(required=False, default=0, min_value=0, max_value=1 << 20,
                                help_text="Replica index (0-based).")
    offset = QueryIntegerField(required=False, default=0, min_value=0, max_value=MAX_ID,
                               help_text="First byte to return.")
    limit = QueryIntegerField(required=False, default=DEFAULT_LOG_CHUNK, min_value=1,
                              max_value=MAX_LOG_CHUNK, help_text="Most bytes to return.")
    tail = QueryIntegerField(required=False, min_value=0, max_value=100_000,
                             help_text="Return the last N lines instead of `offset`.")
    timestamps = QueryBooleanField(required=False, default=False, help_text=(
        "`true`: start each line that begins in `data` with the time it was produced, in "
        "RFC 3339 UTC with nanoseconds and a space (`2026-12-03T08:15:44.123456789Z `), as "
        "`kubectl logs --timestamps`: when the runner (local cluster) or the container runtime "
        "(Kubernetes) read the line from the task's output. `offset` and `next_offset` stay "
        "byte offsets of the log as written. A log kept without times gets no prefix "
        "(`has_times` false)."))
    since_seconds = QueryIntegerField(required=False, min_value=1, max_value=MAX_SINCE_SECONDS,
                                      help_text=(
        "Only lines produced in the last N seconds (by the server's clock), as `kubectl logs "
        "--since`: the chunk starts at the first such line when that is after `offset`, and "
        "`tail` counts among them. 409 for a log kept without times."))


class LogChunkSerializer(serializers.Serializer):
    role = serializers.CharField()
    replica = serializers.IntegerField()
    offset = serializers.IntegerField(help_text="Byte offset of `data` in the log.")
    next_offset = serializers.IntegerField(help_text="Ask from here for what follows.")
    data = serializers.CharField(help_text="The bytes read, as UTF-8 (invalid bytes replaced).")
    source = serializers.ChoiceField(["store", "run"], help_text=(
        "`store`: the copy kept when the replica ended; `run`: the live run folder."))
    complete = serializers.BooleanField(help_text="True when the log will not grow any more.")
    has_times = serializers.BooleanField(required=False, help_text=(
        "Only with `timestamps` or `since_seconds`: whether the log has a time per line (logs "
        "kept before Falcon recorded times have none)."))


class ExpLogsView(APIView):
    """A piece of one replica's log."""

    @extend_schema(summary="GetExpLogs", parameters=[EXP_ID_PARAM, LogQuerySerializer],
                   responses={200: LogChunkSerializer, 400: OpenApiResponse(
                       description="A bad query: a role missing for an experiment of several "
                                   "roles, a negative replica, offset, limit or tail out of "
                                   "range, timestamps not true or false, since_seconds not "
                                   "a positive number of seconds."),
                       404: OpenApiResponse(description="No such experiment, role or replica "
                                                        "(the valid values are named), or no "
                                                        "log yet."),
                       409: OpenApiResponse(description="since_seconds for a log kept "
                                                        "without line times.")})
    def get(self, request, exp_id: int):
        import time

        query = _validated(LogQuerySerializer, request)
        since = query.get("since_seconds")
        chunk = exp_log_chunk(exp=selectors.exp_get(exp_id=exp_id), role=query.get("role"),
                              replica=query["replica"], offset=query["offset"],
                              limit=query["limit"], tail=query.get("tail"),
                              timestamps=query["timestamps"],
                              since_ns=None if since is None else
                              time.time_ns() - since * 1_000_000_000)
        body = {"role": chunk.role, "replica": chunk.replica, "offset": chunk.offset,
                "next_offset": chunk.next_offset, "source": chunk.source,
                "complete": chunk.complete, "data": chunk.data.decode("utf-8", "replace")}
        if chunk.has_times is not None:
            body["has_times"] = chunk.has_times
        return Response(body)


class ArtifactQuerySerializer(serializers.Serializer):
    after = serializers.CharField(required=False, max_length=1024,
                                  help_text="List names after this one (from `next`).")
    page_size = QueryIntegerField(required=False, default=200, min_value=1, max_value=1000,
                                  help_text="Files per page.")


class StoredFileSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="Relative path under the artifact path.")
    size = serializers.IntegerField(help_text="Bytes.")
    modified = serializers.DateTimeField(allow_null=True)
    etag = serializers.CharField(help_text=(
        "A strong validator of this version of the file (quotes included): send it as "
        "`If-Range` with a `Range` to resume a partial download only if it is still this "
        "file. Local store: size, modification time and inode; GCS: the object's "
        "generation."))


class ArtifactPageSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="The artifact path (file:// or gs://).")
    prune_state = serializers.CharField(help_text='"" (kept), "Pruning" or "Pruned".')
    next = serializers.CharField(allow_null=True, help_text="The next page's URL.")
    results = StoredFileSerializer(many=True)


class ExpArtifactsView(APIView):
    """One page of the files under an experiment's artifact path."""

    @extend_schema(summary="ListExpArtifactFiles",
                   parameters=[EXP_ID_PARAM, ArtifactQuerySerializer],
                   responses={200: ArtifactPageSerializer})
    def get(self, request, exp_id: int):
        query = _validated(ArtifactQuerySerializer, request)
        artifact, page = exp_artifact_page(exp=selectors.exp_get(exp_id=exp_id),
                                           after=query.get("after"), limit=query["page_size"])
        next_url = None
        if page.next_after is not None:
            from urllib.parse import urlencode

            next_url = request.build_absolute_uri(request.path) + "?" + urlencode(
                {"after": page.next_after, "page_size": query["page_size"]})
        return Response({
            "path": artifact.path, "prune_state": artifact.prune_state, "next": next_url,
            "results": [{"name": f.name, "size": f.size, "modified": f.modified,
                         "etag": f.etag} for f in page.files]})


class FileQuerySerializer(serializers.Serializer):
    name = serializers.CharField(max_length=1024, help_text="A name `artifacts` listed.")


# RFC 9110, section 14.1: the unit in any case (`Bytes=`), positions in ASCII digits.
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$", re.IGNORECASE | re.ASCII)


class _Chunks:
    """The bytes `start` to `end` of an opened file, `STREAM_CHUNK` per read; Django calls
    `close` when the response ends or the client goes away, which closes the file (a
    descriptor, for the local store) even if no chunk was asked for."""

    def __init__(self, opened, start: int, end: int):
        self.opened, self.start, self.end = opened, start, end

    def __iter__(self):
        pos = self.start
        while pos <= self.end:
            data = self.opened.read(pos, min(STREAM_CHUNK, self.end - pos + 1))
            if not data:
                return
            pos += len(data)
            yield data

    def close(self) -> None:
        self.opened.close()


class ExpArtifactFileView(APIView):
    """One artifact file's bytes; `Range: bytes=N-[M]` for a part (resume)."""

    @extend_schema(summary="GetExpArtifactFile", parameters=[
        EXP_ID_PARAM, FileQuerySerializer,
        OpenApiParameter("Range", OpenApiTypes.STR, OpenApiParameter.HEADER,
                         description="`bytes=N-` or `bytes=N-M` (RFC 9110): only that part."),
        OpenApiParameter("If-Range", OpenApiTypes.STR, OpenApiParameter.HEADER,
                         description="An `etag` the listing gave: the `Range` is served only "
                                     "if the file is still that version, else the whole "
                                     "file (200), RFC 9110 13.1.5.")],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY,
                   (206, "application/octet-stream"): OpenApiTypes.BINARY,
                   416: OpenApiResponse(description="The range starts past the end.")})
    def get(self, request, exp_id: int):
        query = _validated(FileQuerySerializer, request)
        opened = exp_artifact_file(exp=selectors.exp_get(exp_id=exp_id), name=query["name"])
        try:
            return self._respond(request, opened)
        except BaseException:
            opened.close()
            raise

    @staticmethod
    def _respond(request, opened):
        size = opened.size
        start, end, status = 0, size - 1, 200
        header = request.headers.get("Range", "")
        validator = request.headers.get("If-Range")
        if header and validator is not None and not _same_version(validator, opened.etag):
            # RFC 9110 13.1.5: the part the client has is of another version (another
            # experiment's file of the same name, a rewrite): send the whole file instead.
            header = ""
        if header:
            match = _RANGE.match(header.strip())
            if match is None:
                raise ValidationFailed({"Range": ["only one range `bytes=N-` or `bytes=N-M` is "
                                                  f"supported; got {header[:80]!r}."]})
            start = int(match.group(1))
            last = int(match.group(2)) if match.group(2) else None
            if last is not None and last < start:
                # RFC 9110, section 14.1.1: a last position before the first is not a range.
                raise ValidationFailed({"Range": [f"the last byte ({last}) comes before the "
                                                  f"first ({start}); got {header[:80]!r}."]})
            if last is not None:
                end = min(last, size - 1)
            # Section 14.1.2: satisfiable only when the first byte is inside the file, so
            # never for an empty one (206 there would need `Content-Range: bytes 0--1/0`).
            if start >= size:
                res = Response({"detail": f"range starts at {start}; the file has {size} bytes",
                                "code": "range_not_satisfiable"}, status=416)
                res["Content-Range"] = f"bytes */{size}"
                opened.close()
                return res
            status = 206

        res = StreamingHttpResponse(_Chunks(opened, start, end), status=status,
                                    content_type="application/octet-stream")
        res["Content-Length"] = str(max(end - start + 1, 0))
        res["Accept-Ranges"] = "bytes"
        if opened.etag:
            res["ETag"] = opened.etag
        if status == 206:
            res["Content-Range"] = f"bytes {start}-{end}/{size}"
        return res


def _same_version(validator: str, etag: str) -> bool:
    """True when an `If-Range` value names the file's current version: a strong comparison
    (RFC 9110 8.8.3.2) of entity tags; a weak tag, a date or a store with no ETag never
    matches, so the whole file is sent."""
    validator = validator.strip()
    return bool(etag) and not validator.startswith("W/") and validator == etag


def bad_exp_id(request, raw: str, sub: str):
    """400 naming `exp_id` for `/api/v1/exps/<raw>/{logs,artifacts,artifacts/file}` where `raw`
    is not an id (as `views.bad_exp_id` for the other routes); 405 for a method these GET-only
    routes do not serve."""
    from .views import bad_id_answer

    return bad_id_answer(request, raw, ("GET", "HEAD", "OPTIONS"))
