"""Emails are validated with Django's `validate_email`, stored lower-cased, and never echoed raw.

Runs on SQLite and MariaDB alike: `Bob@Example.com` and `bob@example.com` are one address on
both (SQLite's comparisons are case-sensitive, so the rule is that emails are stored lower case).
"""
from __future__ import annotations

import pytest
from django.apps import apps as django_apps
from django.db import connection

from accounts.emails import InvalidEmail, normalize_email, shown_email
from accounts.models import User
from accounts.services import user_register
from core.errors import Conflict, ValidationFailed

pytestmark = pytest.mark.django_db
WHOAMI = "/api/v1/auth/whoami"
BAD = ["bob\n@example.com", "bob@example.com\nFAKE LOG LINE", "bob\r@example.com",
       "bo b@example.com", "bob@exa\x1bmple.com", "bob", "@example.com", "bob@", "a" * 250 + "@x.io",
       "bob@example.com\x00"]


@pytest.mark.parametrize("raw", BAD)
def test_invalid_emails_are_refused_without_echoing_them_raw(raw):
    with pytest.raises(InvalidEmail) as exc:
        normalize_email(raw)
    assert "\n" not in str(exc.value) and "\r" not in str(exc.value)
    assert "\x1b" not in str(exc.value) and "\x00" not in str(exc.value)
    with pytest.raises(ValidationFailed):
        user_register(user_id="sub-x", email=raw)
    assert not User.objects.exists()


def test_emails_are_stored_lower_case():
    assert normalize_email("  Bob@Example.COM ") == "bob@example.com"
    user = user_register(user_id="sub-bob", email="Bob@Example.com")
    assert user.email == "bob@example.com"
    assert user_register(user_id="sub-bob", email="bob@example.com").pk == user.pk
    with pytest.raises(Conflict):
        user_register(user_id="sub-other", email="BOB@example.com")
    assert User.objects.count() == 1
    made = User.objects.create_user("Carol@Example.com")
    assert made.email == "carol@example.com"
    assert User.objects.get_by_natural_key("CAROL@example.com").pk == made.pk


# Tokens carrying a newline or another case of a known address: accounts/tests/test_attacks.py.


def test_local_token_endpoint_normalizes_the_email(api):
    res = api.post("/api/v1/auth/token", {"email": "Dave@Example.com"}, format="json")
    assert res.status_code == 201 and res.json()["email"] == "dave@example.com"
    res = api.post("/api/v1/auth/token", {"email": "dave\n@example.com"}, format="json")
    assert res.status_code == 400 and "\n" not in str(res.json())


def test_shown_email_escapes_control_characters():
    assert shown_email("a\nb") == "'a\\nb'"


def _lowercase():
    from importlib import import_module

    module = import_module("accounts.migrations.0003_lowercase_emails")
    module.lowercase_emails(django_apps, None)


def test_migration_lowercases_existing_emails():
    User.objects.bulk_create([User(user_id="u1", email="Eve@Example.com", password="!")])
    _lowercase()
    assert User.objects.get(pk="u1").email == "eve@example.com"


@pytest.mark.skipif(connection.vendor == "mysql", reason="MariaDB's case-insensitive unique "
                    "index never let two such rows exist")
def test_migration_refuses_to_merge_emails_that_differ_in_case():
    User.objects.bulk_create([User(user_id="u1", email="Eve@Example.com", password="!"),
                              User(user_id="u2", email="eve@example.com", password="!")])
    with pytest.raises(RuntimeError, match="differ only in case") as exc:
        _lowercase()
    assert "u1" in str(exc.value) and "u2" in str(exc.value)
    assert set(User.objects.values_list("email", flat=True)) == {"Eve@Example.com",
                                                                "eve@example.com"}


# -- look-alikes (decisions.md#dec-sec-auth): refused, never folded into another address ---------

LOOKALIKE_CHARS = "\u212a\u017f\uff4b\uff2b\u0131\u0130\ufb00\u217c\u00df\u03c2\u1e9e"


@pytest.mark.parametrize("char", LOOKALIKE_CHARS)
def test_a_character_that_folds_into_others_is_refused_naming_it(char):
    with pytest.raises(InvalidEmail) as exc:
        normalize_email(f"a{char}b@example.com")
    assert char not in str(exc.value)
    assert f"U+{ord(char):04X}" in str(exc.value) or "not a valid address" in str(exc.value)


def test_a_decomposed_accent_is_refused_and_the_composed_domain_kept():
    with pytest.raises(InvalidEmail, match="NFKC"):
        normalize_email("bob@bu\u0308cher.example")
    assert normalize_email("Bob@b\u00fccher.example") == "bob@b\u00fccher.example"


from hypothesis import given, settings as hsettings, strategies as st  # noqa: E402

# Letters an attacker would mix in: ASCII, its look-alikes, and letters in their normal form.
ALPHABET = "abcdefgikmsKSI" + LOOKALIKE_CHARS + "\u00e9\u00fc\u00c9"
VARIANTS = {"k": "K\u212a\uff4b", "s": "S\u017f", "i": "I\u0131\u0130", "K": "k\u212a",
            "S": "s\u017f", "I": "i\u0131", "\u00e9": "\u00c9e\u0301"}


@hsettings(max_examples=300, deadline=None)
@given(local=st.text(alphabet=ALPHABET, min_size=1, max_size=12),
       domain=st.sampled_from(["example.com", "b\u00fccher.example", "ex\u212aample.com"]),
       picks=st.lists(st.integers(min_value=0, max_value=3), min_size=12, max_size=12))
def test_two_accepted_addresses_of_one_user_differ_only_in_ascii_case(local, domain, picks):
    """Hypothesis: for generated local parts and a look-alike variant of each, two addresses
    that are both accepted and map to the same stored form are equal after `email_key`, and
    differ only in the case of ASCII letters."""
    from accounts.emails import email_key

    variant = "".join(VARIANTS[c][p % len(VARIANTS[c])] if c in VARIANTS and p else c
                      for c, p in zip(local, picks))
    stored = {}
    for address in (f"{local}@{domain}", f"{variant}@{domain}"):
        try:
            stored[address] = normalize_email(address)
        except InvalidEmail:
            continue
        assert stored[address] == email_key(address) == address.lower()
    if len(stored) == 2 and len(set(stored.values())) == 1:
        first, second = stored
        assert email_key(first) == email_key(second)
        assert [c for c in first if not c.isascii()] == [c for c in second if not c.isascii()]
