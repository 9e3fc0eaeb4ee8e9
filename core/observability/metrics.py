"""Prometheus metrics of the API server: HTTP requests and gRPC calls, served at `/metrics`.

Request count and latency by route (the URL pattern, e.g. `api/v1/exps/<id:exp_id>`, never
the raw path), method and status; gRPC calls by method and code. Every label value comes from
a closed set, whatever a client sends: a method outside RFC 9110's registered ones and a
status outside `http.HTTPStatus` count as `other`, a path no pattern matched as `unmatched`,
so unauthenticated requests with made-up methods or paths cannot grow the number of series
(each series costs memory here and in Prometheus, for ever).

With several gunicorn workers the metrics must be added up across processes:
prometheus-client's multiprocess mode, switched on by `PROMETHEUS_MULTIPROC_DIR` (a folder each
worker writes its values to; gunicorn.conf.py empties it at start and marks exited workers
dead), is used whenever that variable is set. No Django imports.
"""
from __future__ import annotations

import os
from http import HTTPStatus

from prometheus_client import (
    CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest,
)
from prometheus_client.registry import REGISTRY

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
HTTP_REQUESTS = Counter("falcon_http_requests_total", "HTTP requests by route, method, status.",
                        ["route", "method", "status"])
HTTP_SECONDS = Histogram("falcon_http_request_duration_seconds",
                         "HTTP request latency by route and method.", ["route", "method"],
                         buckets=BUCKETS)
GRPC_CALLS = Counter("falcon_grpc_calls_total", "gRPC calls by method and status code.",
                     ["method", "code"])
GRPC_SECONDS = Histogram("falcon_grpc_call_duration_seconds", "gRPC call latency by method.",
                         ["method"], buckets=BUCKETS)


# The label of anything outside a closed set: a made-up method, a status no RFC defines.
OTHER = "other"
# The label of a request no URL pattern matched.
UNMATCHED = "unmatched"
# The methods the API serves or answers (RFC 9110 section 9, plus PATCH of RFC 5789); CONNECT
# and TRACE are never served, so they count as `other` too.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
HTTP_STATUSES = frozenset(str(int(code)) for code in HTTPStatus)


def http_labels(route: str | None, method: str, status: int) -> tuple[str, str, str]:
    """Return the `(route, method, status)` labels of a request, each from a closed set.

    Args:
        route: the matched URL pattern (`ResolverMatch.route`); None or "" when none matched.
        method: the request's method as sent (Django upper-cases it).
        status: the response's status code.
    """
    return (route or UNMATCHED, method if method in HTTP_METHODS else OTHER,
            str(status) if str(status) in HTTP_STATUSES else OTHER)


def observe_http(route: str | None, method: str, status: int, seconds: float) -> None:
    """Count one HTTP request and its latency, labelled by `http_labels`."""
    route_label, method_label, status_label = http_labels(route, method, status)
    HTTP_REQUESTS.labels(route_label, method_label, status_label).inc()
    HTTP_SECONDS.labels(route_label, method_label).observe(seconds)


def observe_grpc(method: str, code: str, seconds: float) -> None:
    """Count one gRPC call and its latency.

    Args:
        method: `/falcon.v1.Service/Rpc`, one the server registered, else `unknown` (the
            caller folds it: `falcon_site.grpc.interceptors`).
        code: a `grpc.StatusCode` name (a closed set).
    """
    GRPC_CALLS.labels(method, code).inc()
    GRPC_SECONDS.labels(method).observe(seconds)


def exposition() -> tuple[bytes, str]:
    """Return `(body, content type)` of every metric of this process, or of every worker's in
    multiprocess mode (`PROMETHEUS_MULTIPROC_DIR`)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
