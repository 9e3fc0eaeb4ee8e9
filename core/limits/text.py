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


# --- Pages of UTF-8 text read by byte offset ------------------------------------------------
# Logs are served in pages by byte offset and limit (`GET .../logs?offset=&limit=`): a page cut
# inside a character would be decoded alone and show U+FFFD for each half. One rule, for every
# log endpoint: a page starts and ends on a character boundary; the bytes of a character its
# limit cuts start the next page (`next_offset` points there); a limit smaller than one
# character returns that whole character, so a reader always moves on. Bytes that are not UTF-8
# are never held back or skipped, so the pages of any file concatenate to the file.


def _sequence_length(lead: int) -> int:
    """How many bytes the UTF-8 sequence led by byte `lead` has (1 for a byte that leads none:
    ASCII, a continuation byte or a byte UTF-8 never uses)."""
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 1


def partial_tail(data: bytes) -> int:
    """How many bytes at the end of `data` begin a UTF-8 character without finishing it.

    The codec's incremental decoder says which trailing bytes it holds back; a character is at
    most 4 bytes, so only the last 3 can be pending and only they are decoded.
    """
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    decoder.decode(data[-3:], final=False)
    return len(decoder.getstate()[0])


def _inside_character(read, offset: int, data: bytes) -> int:
    """How many bytes at the start of `data` (read from `offset`) finish a character that
    starts before `offset`: 0 when `offset` is a boundary or those bytes are not UTF-8."""
    if offset == 0 or not data or data[0] & 0xC0 != 0x80:
        return 0
    back = read(max(0, offset - 3), min(3, offset))
    begun = partial_tail(back)  # the bytes of a character begun before `offset`
    if not begun:
        return 0
    rest = _sequence_length(back[-begun]) - begun
    try:
        (back[-begun:] + data[:rest]).decode("utf-8")
    except UnicodeDecodeError:  # not a character: the bytes are shown as they are
        return 0
    return rest


def utf8_page(read, offset: int, limit: int, *, growing: bool = False) -> tuple[int, bytes]:
    """Read one page of a UTF-8 text by byte offset, starting and ending on character bounds.

    Args:
        read: `read(start, n) -> bytes`, at most `n` bytes from byte `start` (fewer at the end).
        offset: the byte asked for first; an offset inside a character moves to its end (the
            page says where it starts).
        limit: most bytes to return, but a limit smaller than the character at `offset`
            returns that whole character.
        growing: the text may still grow (a live log): a character whose last bytes are not
            written yet is left for a later read instead of returned cut.

    Returns:
        `(start, data)`: the page's first byte and its bytes; the next page starts at
        `start + len(data)`.
    """
    data = read(offset, limit)
    skip = _inside_character(read, offset, data)
    if skip:
        offset += skip
        data = read(offset, limit)
    pending = partial_tail(data)
    if pending and pending < len(data):
        return offset, data[:-pending]
    if pending:  # the page is one cut character: read the rest of it
        data += read(offset + len(data), _sequence_length(data[0]) - len(data))
        if partial_tail(data) and growing:
            return offset, b""
    return offset, data


# The white space of the OpenAPI schema's `pattern: \S` (an ECMA-262 regular expression, what
# clients and schemathesis read): Python's `str.strip()` also strips U+0085 and U+001C-U+001F,
# so a value the schema calls non-blank was refused as empty.
SCHEMA_SPACE = ("\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff")


def strip_blank(text: str) -> str:
    """Return `text` without the schema's white space at either end (`SCHEMA_SPACE`)."""
    return text.strip(SCHEMA_SPACE)
