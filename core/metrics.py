"""Prometheus metrics of the API server: HTTP requests and gRPC calls, served at `/metrics`.

Request count and latency by route (the URL pattern, e.g. `api/v1/exps/<id:exp_id>`, never
the raw path, so the number of series stays bounded) and status; gRPC calls by method and
code. With several gunicorn workers the metrics must be added up across processes:
prometheus-client's multiprocess mode, switched on by `PROMETHEUS_MULTIPROC_DIR` (a folder each
worker writes its values to; gunicorn.conf.py empties it at start and marks exited workers
dead), is used whenever that variable is set. No Django imports.
"""
from __future__ import annotations

import os

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


def observe_http(route: str, method: str, status: int, seconds: float) -> None:
    """Count one HTTP request and its latency (`route` = URL pattern or `unmatched`)."""
    HTTP_REQUESTS.labels(route, method, str(status)).inc()
    HTTP_SECONDS.labels(route, method).observe(seconds)


def observe_grpc(method: str, code: str, seconds: float) -> None:
    """Count one gRPC call (`method` = `/falcon.v1.Service/Rpc`) and its latency."""
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
