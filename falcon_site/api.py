"""DRF glue: the one mapping of domain errors to HTTP responses (style rule 6)."""
from __future__ import annotations

from rest_framework.exceptions import APIException
from rest_framework.views import exception_handler as drf_exception_handler

from .errors import FalconError, ValidationFailed


class DomainAPIException(APIException):
    """A `FalconError` as a DRF exception, so DRF's rollback and rendering run."""

    def __init__(self, error: FalconError):
        self.status_code = error.http_status
        self.error_code = error.code
        if isinstance(error, ValidationFailed):
            detail = dict(error.errors)
        else:
            detail = {"detail": error.message}
        super().__init__(detail=detail, code=error.code)


def exception_handler(exc, context):
    """Answer a `FalconError` with its HTTP status and `{field|"detail": ..., "code": ...}`.

    Everything else goes to DRF's own handler (400 for parse errors, 401/403 for auth).
    """
    if isinstance(exc, FalconError):
        exc = DomainAPIException(exc)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, DomainAPIException):
        response.data["code"] = exc.error_code
    return response
