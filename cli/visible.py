"""Make control characters visible before text from the server or a file reaches a terminal.

A name, reason, message or config can hold anything a task printed or a client sent. Written raw,
ESC starts a terminal escape sequence (it can recolour, retitle, move the cursor, or hide the
lines before it), and bidirectional overrides reorder what is read. Table output therefore shows
such characters as escapes: ESC as `\\x1b`, other C0 and C1 controls and DEL as `\\xNN`, the
bidirectional and line-separator format characters as `\\uNNNN`, a tab or newline in a one-line
field as `\\t` / `\\n`. Multi-line fields (the config, a job's message) keep their newlines and
tabs; a CR that ends a line (CRLF files) is dropped, a lone CR is shown as `\\r`.

JSON and YAML output never go through this: they stay exact.

Only `re` is imported: the module is loaded with every error message, at start-up.
"""
from __future__ import annotations

import re

# C0 controls, DEL, C1 controls; ALM, LRM, RLM, the line/paragraph separators, the embeddings,
# overrides and isolates (U+202A-U+202E, U+2066-U+2069).
_FORMAT = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_ONE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_FORMAT}]")
_MULTI_LINE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_FORMAT}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, multiline: bool = False) -> str:
    """Return `text` with its control characters written as escapes (see the module docstring).

    Args:
        text: text from the server or from a local file.
        multiline: keep newlines and tabs (a config, a job's output); otherwise they are escaped
            too, so one field stays one line.
    """
    if multiline:
        text = text.replace("\r\n", "\n")
        return _MULTI_LINE.sub(_escape, text)
    return _ONE_LINE.sub(_escape, text)
