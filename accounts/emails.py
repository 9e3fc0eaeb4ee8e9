"""Email addresses of users: validated, normalized, and shown safely.

A user's email comes from a token (Cloudflare Access's `email` claim, or the local issuer), from
`createsuperuser`, the admin, or a gRPC `creator_email`. Whatever the source:

- it is checked with Django's `validate_email` (RFC 5321/5322 shape, as Django reads them; no
  control characters, no spaces), and at most 254 characters (RFC 5321 4.5.3.1.3: a path
  is at most 256 octets including the angle brackets);
- it is stored lower-cased as a whole (`normalize_email`), so `Bob@Example.com` and
  `bob@example.com` are one user on every database: the `email` column's unique index then
  is case-insensitive in effect, also on SQLite, whose comparisons are case-sensitive
  (MariaDB's `utf8mb4_unicode_ci` already was). Identity providers, Cloudflare Access
  included, treat addresses case-insensitively; a mail server may not, but Falcon never
  sends mail;
- a value that failed validation is only ever shown through `shown_email` (`repr`, cut), so a
  newline or an escape sequence never reaches a log line or an error body raw.
"""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

MAX_EMAIL_CHARS = 254


class InvalidEmail(ValueError):
    """The address is not valid; `str(exc)` says why and never contains the raw value."""


def normalize_email(raw: object) -> str:
    """Return the stored form of an email address: stripped of surrounding spaces, lower case.

    Args:
        raw: the address as given (a str; anything else is refused).

    Raises:
        InvalidEmail: not a str, empty, longer than 254 characters, or refused by Django's
            `validate_email` (control characters, spaces, no `@`, a bad domain, ...).
    """
    if not isinstance(raw, str):
        raise InvalidEmail("the email must be a string")
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
    return email.lower()


def shown_email(value: object, limit: int = 80) -> str:
    """Return `value` safe to put in a log line or an error body: `repr` of at most `limit`
    characters (control characters come out as `\\n`, `\\x1b`, ...)."""
    text = value if isinstance(value, str) else str(value)
    cut = text[:limit] + ("..." if len(text) > limit else "")
    return repr(cut)
