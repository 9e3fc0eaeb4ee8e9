"""Email addresses of users: validated, normalized, and shown safely.

A user's email comes from a token (Cloudflare Access's `email` claim, or the local issuer), from
`createsuperuser`, the admin, or a gRPC `creator_email`. Whatever the source:

- it is checked with Django's `validate_email` (RFC 5321/5322 shape, as Django reads them; no
  control characters, no spaces), and at most 254 characters (RFC 5321 4.5.3.1.3: a path
  is at most 256 octets including the angle brackets);
- it is stored in one normal form, `email_key`: Unicode NFKC, then case-folded (Unicode
  `toCasefold`, Python's `str.casefold`), so `Bob@Example.com` and `bob@example.com` are one
  user on every database: the `email` column's unique index then is case-insensitive in
  effect, also on SQLite, whose comparisons are case-sensitive (MariaDB's
  `utf8mb4_unicode_ci` already was). Identity providers, Cloudflare Access included, treat
  addresses case-insensitively; a mail server may not, but Falcon never sends mail;
- an address whose non-ASCII characters that normal form would change is refused, never
  folded (decisions.md#dec-sec-auth): `\u212aate@x` (KELVIN SIGN) folds to `kate@x`, `\u017f`
  (long s) to `s`, fullwidth `\uff41` to `a`, `\ufb00` to `ff`, `\u0130` to `i\u0307`, and
  the dotless `\u0131` upper-cases to `I`, so each would register, or log in as, another
  person's address. Only ASCII letters change case; an internationalised address already in
  its normal form (`josé@example.com`, `用户@例子.广告`) is kept as it is. The price: an
  address with `ß`, a final sigma or a decomposed accent must be sent in its folded form;
- a value that failed validation is only ever shown through `shown_email` (`repr`, cut), so a
  newline or an escape sequence never reaches a log line or an error body raw.
"""
from __future__ import annotations

import functools

import unicodedata

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

MAX_EMAIL_CHARS = 254


class InvalidEmail(ValueError):
    """The address is not valid; `str(exc)` says why and never contains the raw value."""


def normalize_email(raw: object) -> str:
    """Return the stored form of an email address: stripped of surrounding spaces, `email_key`.

    Args:
        raw: the address as given (a str; anything else is refused).

    Raises:
        InvalidEmail: not a str, empty, longer than 254 characters, refused by Django's
            `validate_email` (control characters, spaces, no `@`, a bad domain, ...), or with
            characters that fold into other ones (`lookalike_problem`).
    """
    if not isinstance(raw, str):
        raise InvalidEmail("the email must be a string")
    return _normalized(raw)


@functools.lru_cache(maxsize=4096)
def _normalized(raw: str) -> str:
    """`normalize_email` of a str, kept for the process: every write's token names its user's
    address, which Django's validator would check again each time (a refusal is not kept)."""
    email = raw.strip()
    if not email:
        raise InvalidEmail("the email is empty")
    if len(email) > MAX_EMAIL_CHARS:
        raise InvalidEmail(f"the email is {len(email)} characters; at most {MAX_EMAIL_CHARS} "
                           "are accepted (RFC 5321)")
    try:
        validate_email(email)
    except ValidationError:
        raise InvalidEmail(f"the email {shown_email(email)} is not a valid address") from None
    problem = lookalike_problem(email)
    if problem:
        raise InvalidEmail(f"the email {shown_email(email)} {problem}; send the address as the "
                           "identity provider registered it, in plain letters")
    return email_key(email)


def email_key(email: str) -> str:
    """Return the one normal form addresses are stored and compared in: NFKC, then case-folded.

    For an address `normalize_email` accepts this only lower-cases its ASCII letters. Use it
    (or `normalize_email`, which validates first) wherever an address is looked up or stored.
    """
    return unicodedata.normalize("NFKC", email).casefold()


def lookalike_problem(email: str) -> str | None:
    """Say why `email` would change into another address under `email_key`, or None.

    Refused: a non-ASCII character that NFKC changes (a compatibility character such as the
    Kelvin sign, fullwidth letters or the ligature ﬀ), that is not its own case fold (long s,
    `İ`, `ß`), or that upper-cases into a letter folding to another one (dotless `ı` -> `I` ->
    `i`); and an address not in NFKC as a whole (a decomposed accent). ASCII letters may come
    in any case.
    """
    for char in email:
        if char.isascii():
            continue
        if (unicodedata.normalize("NFKC", char) != char or char.casefold() != char
                or char.upper().casefold() != char):
            return (f"has the character U+{ord(char):04X} "
                    f"({unicodedata.name(char, 'unnamed')}), which Unicode normalisation or case "
                    "folding turns into other letters")
    if unicodedata.normalize("NFKC", email) != email:
        return "is not in Unicode NFKC form (a decomposed accent?)"
    return None


def shown_email(value: object, limit: int = 80) -> str:
    """Return `value` safe to put in a log line or an error body: `ascii` of at most `limit`
    characters (control characters come out as `\\n`, `\\x1b`, ..., and every non-ASCII
    character escaped, so a look-alike such as `\\u212a` never reads as the letter it mimics)."""
    text = value if isinstance(value, str) else str(value)
    cut = text[:limit] + ("..." if len(text) > limit else "")
    return ascii(cut)
