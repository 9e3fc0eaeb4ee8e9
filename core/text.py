"""Cutting text to a column with a visible marker (no Django imports).

Controllers write free text into status columns (`message`, `reason`, `cluster_job_name`); a
misbehaving one could send megabytes, which every later reply and page would carry. Text that
does not fit is cut at a character boundary and ends with `… [truncated N bytes]`, N being the
UTF-8 bytes removed, so a reader sees that something is missing and how much.
"""
from __future__ import annotations

MARKER = "… [truncated {} bytes]"  # "…" is the one non-ASCII character


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def truncate(text: str, *, max_bytes: int | None = None, max_chars: int | None = None) -> str:
    """Return `text` if it fits, else its longest prefix that fits followed by the marker.

    Args:
        text: the text to bound.
        max_bytes: the most UTF-8 bytes the result may have (marker included).
        max_chars: the most characters the result may have (marker included).

    Raises:
        ValueError: a limit is too small to hold the marker.
    """
    encoded = _utf8(text)
    fits_bytes = max_bytes is None or len(encoded) <= max_bytes
    fits_chars = max_chars is None or len(text) <= max_chars
    if fits_bytes and fits_chars:
        return text
    # The marker's width depends on N, and N on how much the marker leaves: try the widths of N
    # from the narrowest; the first whose N really has that many digits keeps the most text.
    for digits in range(1, len(str(len(encoded))) + 1):
        prefix = _prefix(text, encoded, max_bytes, max_chars, len(MARKER.format("0" * digits)))
        removed = len(encoded) - len(prefix)
        if len(str(removed)) <= digits:
            return prefix.decode("utf-8", "surrogatepass") + MARKER.format(removed)
    raise ValueError(f"a limit of {max_bytes or max_chars} cannot hold the marker")


def _prefix(text: str, encoded: bytes, max_bytes: int | None, max_chars: int | None,
            marker_chars: int) -> bytes:
    """The longest UTF-8 prefix of `text` that leaves room for a marker of `marker_chars`
    characters (all ASCII but the ellipsis, which is 3 bytes)."""
    keep_chars = len(text) if max_chars is None else max_chars - marker_chars
    keep_bytes = len(encoded) if max_bytes is None else max_bytes - (marker_chars + 2)
    if keep_chars < 0 or keep_bytes < 0:
        raise ValueError(f"a limit of {max_bytes or max_chars} cannot hold the marker")
    end = min(len(_utf8(text[:keep_chars])), keep_bytes)
    while 0 < end < len(encoded) and encoded[end] & 0xC0 == 0x80:  # not inside a character
        end -= 1
    return encoded[:end]
