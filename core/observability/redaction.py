"""Find credentials in text and replace them: for log lines, request ids and stored messages.

Its own module so that both the request context (`core.observability.context`, which refuses a credential sent
as a request id) and the log formatting (`core.observability.logs`) can use it without importing each other.
"""
from __future__ import annotations

import re

REDACTED = "[redacted]"
# Credentials as they appear in text: an Authorization value, a JWT (three base64url parts, the
# first a JSON header `{"...` = `eyJ`), a `token=`/`secret=`/`password=` pair, a URL's password.
SECRET_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
    re.compile(r"(?i)\b((?:access_|refresh_|internal_)?token|secret|password|api_key)"
               r"(\s*[=:]\s*)(['\"]?)[^\s'\",;&]{6,}"),
    re.compile(r"(?<=://)([^/@\s:]+):([^/@\s]+)@"),
)


def redact(text: str) -> str:
    """Return `text` with every credential `SECRET_PATTERNS` finds replaced by `[redacted]`."""
    for pattern in SECRET_PATTERNS:
        if pattern.groups >= 3:
            text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
        elif pattern.groups == 2 and "://" in pattern.pattern:
            text = pattern.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
        elif pattern.groups == 1:
            text = pattern.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
        else:
            text = pattern.sub(REDACTED, text)
    return text
