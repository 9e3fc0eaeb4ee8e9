"""Fixtures shared by every app's tests."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient


@pytest.fixture(autouse=True)
def _isolated_var(settings, tmp_path):
    """Give every test its own artifact root and signing key, so tests never share files."""
    settings.FALCON_ARTIFACT_ROOT = (tmp_path / "artifacts").as_uri()
    settings.FALCON_LOCAL_SIGNING_KEY = tmp_path / "jwt-signing-key.pem"


@pytest.fixture
def user(db):
    from accounts.tests.factories import UserFactory

    return UserFactory()


@pytest.fixture
def api(db):
    """An unauthenticated DRF test client."""
    return APIClient()


@pytest.fixture
def token_for(settings):
    """Return a function that issues a local-issuer token for an email."""
    from accounts.issuer import local_issuer

    def issue(email: str, ttl_seconds: int = 3600) -> str:
        return local_issuer().issue(email, ttl_seconds=ttl_seconds).token

    return issue


@pytest.fixture
def auth_api(api, token_for):
    """A DRF test client authenticated as alice@example.com through a real local-issuer JWT."""
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token_for('alice@example.com')}")
    return api
