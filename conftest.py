"""Fixtures shared by every app's tests."""
from __future__ import annotations

import pytest
import yaml
from rest_framework.test import APIClient

# The offline Cloudflare Access (`cloudflare` fixture) is used by accounts, experiments and cli.
pytest_plugins = ["accounts.tests.cloudflare"]

# Every cluster_name the suite creates experiments on. They are local clusters here, so CreateExp
# keeps refusing unknown clusters (controllers.clusters) while these tests keep their names;
# tests of the Kubernetes backend point FALCON_CLUSTERS_FILE at their own file.
TEST_CLUSTERS = ("local", "tpu-v5p-cluster-a", "gpu-a", "tpu-a", "a", "b", "c", "c1", "c2")


@pytest.fixture(autouse=True)
def _isolated_var(settings, tmp_path):
    """Give every test its own artifact root and signing key, so tests never share files."""
    settings.FALCON_ARTIFACT_ROOT = (tmp_path / "artifacts").as_uri()
    settings.FALCON_LOCAL_SIGNING_KEY = tmp_path / "jwt-signing-key.pem"


@pytest.fixture(autouse=True)
def _clusters_file(settings, tmp_path_factory):
    """Point FALCON_CLUSTERS_FILE at a clusters file naming `TEST_CLUSTERS` as local clusters.

    Written outside the test's own tmp_path, which some tests compare file by file.
    """
    folder = tmp_path_factory.mktemp("clusters")
    path = folder / "clusters.yaml"
    path.write_text(yaml.safe_dump({"clusters": {
        name: {"backend": "local", "state_dir": str(folder / "local-cluster" / name)}
        for name in TEST_CLUSTERS}}))
    settings.FALCON_CLUSTERS_FILE = str(path)
    return path


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
