"""Query parameters every endpoint reads the same way."""
from __future__ import annotations

from core.errors import ValidationFailed

BOOLEAN_WORDS = {"true": True, "1": True, "false": False, "0": False}


def parse_bool(text: str) -> bool | None:
    """Return a boolean query value (`true`/`false`, `1`/`0`, any case), None for other text."""
    return BOOLEAN_WORDS.get(text.lower())


def bool_message(text: str) -> str:
    """The refusal of a value that is not a boolean."""
    return f"must be true or false; got {text[:40]!r}."


def bool_query(request, name: str, *, default: bool) -> bool:
    """Read the boolean query parameter `name`; `default` when it is absent.

    Raises:
        ValidationFailed: any other value, keyed `name`. (An empty value never reaches a view:
            `core.http.middleware.EmptyQueryValueMiddleware` refuses it first.)
    """
    text = request.query_params.get(name)
    if text is None:
        return default
    value = parse_bool(text)
    if value is None:
        raise ValidationFailed({name: [bool_message(text)]})
    return value
