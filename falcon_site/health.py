"""Liveness (`/healthz`) and readiness (`/readyz`, checks the database) probes."""
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse


def healthz(request: HttpRequest) -> JsonResponse:
    """Answer 200 while the process serves requests."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """Answer 200 when the database answers `SELECT 1`, 503 otherwise."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any driver error means "not ready"
        return JsonResponse({"status": "unavailable", "detail": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})


def metrics(request):
    """Prometheus metrics of the API server (`core.observability.metrics`), in the text exposition format.

    Unauthenticated, like /healthz: scraped from inside the cluster (a NetworkPolicy or the
    ingress keeps it from the outside); it holds counts and latencies, no data.
    """
    from core.observability.metrics import exposition

    body, content_type = exposition()
    return HttpResponse(body, content_type=content_type)
