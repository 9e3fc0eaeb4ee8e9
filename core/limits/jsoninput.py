"""Strict JSON input, shared by the HTTP body parser and the gRPC `*_json` fields.

`json.loads` alone accepts what Falcon cannot store or answer: nesting deep enough to exhaust
the stack, an object with the same key twice (the last one silently wins), `NaN` and
`Infinity`, and escapes of lone UTF-16 surrogates (`"\\ud800"`), which no UTF-8 database
column, response or process environment can hold. `loads` refuses all of them with a message
that says where and what to do. The limits are in docs/limits.md.
"""
from __future__ import annotations

import json
import re
from typing import Any

# The deepest nesting of objects and arrays a request may have: a CreateExp body is 4 levels
# deep (body, role_to_task_spec, TaskSpec, envs).
MAX_JSON_DEPTH = 32

_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONInputError(ValueError):
    """The text is not JSON Falcon accepts; `str(error)` says why and what to do."""


def has_surrogate(text: str) -> bool:
    """Return whether `text` holds a lone UTF-16 surrogate (not a Unicode scalar value)."""
    return _SURROGATE.search(text) is not None


def first_surrogate(text: str) -> str | None:
    """Return the first lone UTF-16 surrogate in `text`, or None when it has none."""
    found = _SURROGATE.search(text)
    return found.group() if found else None


def path_part(name: Any) -> str:
    """Return `name` as one part of an error path, readable and safe to encode.

    A plain name (letters, digits, `_`, `-`) is kept as it is; anything else (the empty name,
    dots, spaces, surrogates, a non-string key) is JSON-quoted with ASCII escapes, so the path
    `role_to_task_spec.""` names the empty role and every error body can be encoded.
    """
    if isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]+", name):
        return name
    return json.dumps(name if isinstance(name, str) else str(name), ensure_ascii=True)


def _refuse_constant(name: str) -> Any:
    raise JSONInputError(f"{name} is not a JSON number; send a finite number or a string.")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Build an object, refusing a key given twice (json keeps the last one silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JSONInputError(f"The key {path_part(key)} appears twice in one object; "
                                 "give each key once.")
        out[key] = value
    return out


def check_value(value: Any, *, where: str = "", max_depth: int = MAX_JSON_DEPTH) -> None:
    """Check a parsed JSON value: at most `max_depth` levels deep, no surrogate in any string.

    Args:
        value: what `json.loads` returned.
        where: the path of `value` in the request, for messages ("" for the whole body).
        max_depth: the deepest nesting allowed.

    Raises:
        JSONInputError: too deep, or a key or string with a lone surrogate (named by path).
    """
    stack: list[tuple[Any, str, int]] = [(value, where, 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, (dict, list)) and depth > max_depth:
            raise JSONInputError(f"The JSON is nested more than {max_depth} levels deep; flatten it.")
        if isinstance(item, dict):
            for key, child in item.items():
                child_path = f"{path}.{path_part(key)}" if path else path_part(key)
                if isinstance(key, str) and has_surrogate(key):
                    raise JSONInputError(f"The key {child_path} holds a lone UTF-16 surrogate "
                                         "escape (such as \\ud800), which is not text; send "
                                         "valid Unicode.")
                stack.append((child, child_path, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]", depth + 1)
                         for index, child in enumerate(item))
        elif isinstance(item, str) and has_surrogate(item):
            raise JSONInputError(f"The string at {path or 'the top level'} holds a lone UTF-16 "
                                 "surrogate escape (such as \\ud800), which is not text; send "
                                 "valid Unicode.")


def loads(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse `text` as strict JSON (see the module docstring).

    Raises:
        JSONInputError: not JSON, too deep, a duplicate key, NaN/Infinity or a lone surrogate.
    """
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_refuse_constant)
    except RecursionError:
        raise JSONInputError(f"The JSON is nested more than {max_depth} levels deep; flatten it.") from None
    except JSONInputError:
        raise
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limits
        raise JSONInputError(f"The text is not valid JSON ({exc}).") from None
    check_value(value, max_depth=max_depth)
    return value
