"""Request-size guard, run before anything reads the body; the request's id, actor and log line."""
from __future__ import annotations

import logging
import time

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from core.http.parsers import too_large_message
from core.limits.text import strip_blank


class ChunkedBodyWSGIMiddleware:
    """Give a chunked request body (no `Content-Length`) to Django, bounded, or refuse it.

    Django reads `Content-Length` bytes of `wsgi.input`, so a body sent with
    `Transfer-Encoding: chunked` was read as empty: a valid create answered 400 "This field is
    required" for every field, and a 9 MiB body the same instead of 413. Wrapped around the WSGI
    application (`falcon_site.wsgi`), this reads such a body before Django sees the request:

    - when the server ends the input at the body's end (`wsgi.input_terminated`, PEP 3333's
      extension that gunicorn sets), up to `DATA_UPLOAD_MAX_MEMORY_SIZE` bytes are read and
      handed on with their `Content-Length`, so the body is parsed like any other; one byte
      more is a 413 `too_large`, as a declared length over the limit is
      (`BodySizeLimitMiddleware`);
    - otherwise (Django's `runserver`, whose input has no end to read to) it is a 411
      `length_required` saying to send `Content-Length`, never a body read as empty.
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        if not chunked or environ.get("CONTENT_LENGTH"):
            return self.app(environ, start_response)
        if not environ.get("wsgi.input_terminated"):
            return _refuse(environ, start_response, 411, "length_required",
                           "This server cannot read a chunked request body (Transfer-Encoding: "
                           "chunked): send the body with a Content-Length header.")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        stream, parts, size = environ["wsgi.input"], [], 0
        while limit is None or size <= limit:
            data = stream.read(1 << 16 if limit is None else min(1 << 16, limit + 1 - size))
            if not data:
                break
            parts.append(data)
            size += len(data)
        if limit is not None and size > limit:
            drain(stream, limit)
            return _refuse(environ, start_response, 413, "too_large", too_large_message())
        import io

        environ["wsgi.input"] = io.BytesIO(b"".join(parts))
        environ["CONTENT_LENGTH"] = str(size)
        return self.app(environ, start_response)


def drain(stream, budget: int | None, chunk: int = 1 << 16) -> None:
    """Read and drop up to `budget` more bytes of a refused request body (all of it when
    `budget` is None), before the 413 is written.

    A server that answers and closes while the client is still sending makes the kernel reset
    the connection (unread data in its receive buffer): the client gets "broken pipe" or
    "connection reset" while it sends, and may never read the 413 (curl and urllib3 try to;
    a loaded machine makes the reset win). Reading the rest of a body up to twice the limit
    lets the client finish sending and read the answer; a longer body is cut off after that,
    so a refused request never costs more than twice the limit to read.
    """
    read = 0
    while budget is None or read < budget:
        data = stream.read(chunk if budget is None else min(chunk, budget - read))
        if not data:
            return
        read += len(data)


def _refuse(environ, start_response, status: int, code: str, message: str):
    """Answer a WSGI request before Django: JSON under /api/, plain text elsewhere."""
    import json
    from http import HTTPStatus

    if environ.get("PATH_INFO", "").startswith("/api/"):
        body, kind = json.dumps({"detail": message, "code": code}).encode(), "application/json"
    else:
        body, kind = message.encode(), "text/plain; charset=utf-8"
    # (No `Connection: close`: a hop-by-hop header is the server's, PEP 3333.)
    start_response(f"{status} {HTTPStatus(status).phrase}",
                   [("Content-Type", kind), ("Content-Length", str(len(body)))])
    return [body]


class EmptyQueryValueMiddleware:
    """Answer 400 `invalid` naming each query parameter given with an empty value (/api/ only).

    See `empty_query_values`; the body is the one every field error has
    (`{"status": ["is empty; ..."], "code": "invalid"}`).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/") and request.GET:
            if errors := empty_query_values(request.GET):
                return JsonResponse({**errors, "code": "invalid"}, status=400)
        return self.get_response(request)


class BodySizeLimitMiddleware:
    """Answer 413 when `Content-Length` is over `DATA_UPLOAD_MAX_MEMORY_SIZE`.

    JSON `{"detail": ..., "code": "too_large"}` under /api/, plain text elsewhere; instead of
    Django's HTML 400 from `RequestDataTooBig`. A body without `Content-Length` (chunked) is
    bounded while it is read (`core.http.parsers.StrictJSONParser`, Django's own check for forms).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            size = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            size = 0
        if limit is not None and size > limit:
            message = too_large_message(size)
            if size <= 2 * limit and "wsgi.input" in request.META:
                # The declared length bounds the read (the server's input ends there).
                drain(request.META["wsgi.input"], size)
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": message, "code": "too_large"}, status=413)
            return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def empty_query_values(query) -> dict[str, list[str]]:
    """Return the refusal of every query parameter given with an empty value, by name.

    `?status=`, `?page_size=`, `?search=%20`: a parameter with nothing (or only spaces) after
    its `=` (or no `=` at all) was read as "not given", so `?status=` listed everything and
    `?page_size=` gave the default page while the client meant something. One rule for every
    parameter of every API endpoint, so no view can read it its own way. A blank item inside a
    comma list (`?status=Running,`) is not an empty value: list filters drop it
    (`core.http.filters.MultiValueField`).
    """
    return {name: ["is empty; give it a value, or leave the parameter out to get its "
                   "default."]
            for name, values in query.lists() if any(not strip_blank(value) for value in values)}


def _actor_of(request) -> str | None:
    """The label of the request's authenticated user: a service's label, else the email."""
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return getattr(user, "label", None) or getattr(user, "email", "") or str(user)


log = logging.getLogger("falcon.http")
# The path parameters a request log line carries as ids (core.observability.logs.CONTEXT_KEYS).
PATH_IDS = ("exp_id", "job_id", "analysis_id")
# Probes and scrapes, every few seconds: logged at DEBUG so they do not drown the requests.
QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class RequestContextMiddleware:
    """Give every HTTP request an id and make its user the actor of the changes it causes.

    The id is the incoming `X-Request-ID` when valid (`core.observability.context.new_request_id`), else a new
    one; it is current while the request is served (the logs carry it) and returned in the
    response's `X-Request-ID` header. The actor (`core.observability.context`) is read from `request.user`
    when a transition needs it: DRF authenticates inside the view, after this middleware, and
    sets `request.user` on the Django request too. One log line per request (`falcon.http`):
    method, path (never the query string, which may carry anything), status and milliseconds,
    with the experiment or analysis id of the path (every line the view logs carries those ids
    too: `process_view`), and the same as fields (`method`, `path`,
    `status`, `duration_ms`, `bytes` of a response that is not streamed); health probes and
    metric scrapes at DEBUG.
    First in `MIDDLEWARE`.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        from core.observability.context import (
            new_request_id, reset_actor, reset_request_id, set_actor, set_request_id,
        )
        from core.observability.logs import log_context

        request_id = new_request_id(request.headers.get("X-Request-ID"))
        request.request_id = request_id
        id_token = set_request_id(request_id)
        actor_token = set_actor(lambda: _actor_of(request))
        started = time.perf_counter()
        try:
            with log_context():  # process_view adds the path's ids (this line has them)
                response = self.get_response(request)
                match = getattr(request, "resolver_match", None)
                ids = {key: value for key, value in (match.kwargs if match else {}).items()
                       if key in PATH_IDS}
                seconds = time.perf_counter() - started
                quiet = request.path in QUIET_PATHS and response.status_code < 400
                level = logging.DEBUG if quiet else logging.INFO
                fields = {"method": request.method, "path": request.path,
                          "status": response.status_code,
                          "duration_ms": round(seconds * 1000, 1)}
                if not getattr(response, "streaming", False):
                    fields["bytes"] = len(response.content)
                log.log(level, "%s %s %s %.1f ms", request.method, request.path,
                        response.status_code, seconds * 1000, extra={**ids, **fields})
            from core.observability.metrics import observe_http

            # Labels from closed sets only (core.observability.metrics.http_labels): a made-up method or an
            # unmatched path is one series, not one per value sent.
            observe_http(match.route if match else None, request.method,
                         response.status_code, seconds)
        finally:
            reset_actor(actor_token)
            reset_request_id(id_token)
        response["X-Request-ID"] = request_id
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        """Make every line the view logs carry the ids of its path (`exp_id`, ...)."""
        from core.observability.logs import add_log_ids

        add_log_ids(**{key: value for key, value in view_kwargs.items() if key in PATH_IDS})
        return None
