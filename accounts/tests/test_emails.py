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
