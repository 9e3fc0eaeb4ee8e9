"""Request-size guard, run before anything reads the body."""
from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from .parsers import too_large_message


class BodySizeLimitMiddleware:
    """Answer 413 when `Content-Length` is over `DATA_UPLOAD_MAX_MEMORY_SIZE`.

    JSON `{"detail": ..., "code": "too_large"}` under /api/, plain text elsewhere; instead of
    Django's HTML 400 from `RequestDataTooBig`. A body without `Content-Length` (chunked) is
    bounded while it is read (`core.parsers.StrictJSONParser`, Django's own check for forms).
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
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": message, "code": "too_large"}, status=413)
            return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
