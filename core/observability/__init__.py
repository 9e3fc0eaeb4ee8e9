"""Observability: structured logs, credential redaction, the request's context (actor, request id), Prometheus metrics, command output."""
