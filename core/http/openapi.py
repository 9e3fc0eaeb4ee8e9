"""OpenAPI postprocessing: the JSON error body and the error answers every operation can give.

`core.http.drf.exception_handler` (and `core.http.drf.not_found`, `core.http.middleware`) answer every API error
with `{"detail": ..., "code": ...}`, or `{<field>: [messages], "code": ...}` for invalid fields.
drf-spectacular documents only the answers a view names, so this hook adds, to each operation,
the error statuses the server answers for it and gives every error response that JSON body:

- 400 to operations taking parameters or a body (invalid or unknown fields and parameters);
- 401 and 403 to authenticated operations (no or a refused token; a principal not allowed);
- 404 to operations with a path parameter (no such row, or a path no route matches);
- 413 and 415 to operations taking a body (over 8 MiB; not `application/json`).
"""
from __future__ import annotations

ERROR_COMPONENT = "Error"

ERROR_SCHEMA = {
    "type": "object",
    "description": "An API error. `code` is machine-readable (`invalid`, `not_found`, "
                   "`not_authenticated`, `permission_denied`, `conflict`, `too_large`, ...); "
                   "`detail` says what went wrong. An invalid request names each bad field "
                   "instead, as `{<field>: [messages]}` (nested for nested fields).",
    "properties": {
        "detail": {"description": "What went wrong: a message, or a list or mapping of them."},
        "code": {"type": "string"},
    },
    "required": ["code"],
    "additionalProperties": {"description": "The messages of one invalid field."},
}

DESCRIPTIONS = {
    "400": "The request is invalid: a parameter or field is unknown or not valid (named in the "
           "body).",
    "401": "No credentials, or refused ones (the `WWW-Authenticate` header says which scheme).",
    "403": "The authenticated principal may not do this.",
    "404": "No such resource.",
    "413": "The body is over its limit (docs/limits.md).",
    "415": "The body is not `application/json`.",
}

_METHODS = {"get", "put", "post", "patch", "delete", "head", "options", "trace"}


def _error_content() -> dict:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}}}


def _nullable_to_type_list(node) -> None:
    """Rewrite OpenAPI 3.0's `nullable: true` (still emitted by DRF's pagination schema) as
    3.1's `type: [<type>, "null"]`: 3.1 ignores `nullable`, so null would not validate."""
    if isinstance(node, dict):
        if node.pop("nullable", False) and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        for value in node.values():
            _nullable_to_type_list(value)
    elif isinstance(node, list):
        for value in node:
            _nullable_to_type_list(value)


def _refuse_empty(schema) -> None:
    """State the empty-value rule (`core.http.middleware.EmptyQueryValueMiddleware`) in a query
    parameter's schema: a text value holds a character other than a space (`pattern: \\S`,
    JSON Schema's unanchored search), an array each of its items."""
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "array":
        _refuse_empty(schema.get("items"))
    elif schema.get("type") == "string" and "pattern" not in schema and "enum" not in schema:
        schema["pattern"] = r"\S"


def add_error_responses(result, generator, request, public):
    """drf-spectacular postprocessing hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"])."""
    _nullable_to_type_list(result)
    result.setdefault("components", {}).setdefault("schemas", {})[ERROR_COMPONENT] = ERROR_SCHEMA
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in _METHODS:
                continue
            params = operation.get("parameters", [])
            for param in params:
                if param.get("in") == "query":
                    _refuse_empty(param.get("schema"))
            has_body = "requestBody" in operation
            secured = any(requirement for requirement in operation.get("security", [{}]))
            codes = set()
            if params or has_body:
                codes.add("400")
            if secured:
                codes.update({"401", "403"})
            if any(p.get("in") == "path" for p in params):
                codes.add("404")
            if has_body:
                codes.update({"413", "415"})
            responses = operation.setdefault("responses", {})
            for code in sorted(codes):
                responses.setdefault(code, {"description": DESCRIPTIONS[code]})
            for code, response in responses.items():
                if code.startswith(("4", "5")) and "content" not in response:
                    response["content"] = _error_content()
    return result
