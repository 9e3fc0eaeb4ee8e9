"""Fixtures shared by every app's tests, the local state and the test database's name."""
from __future__ import annotations

import os

import pytest
import yaml
from rest_framework.test import APIClient

# The offline Cloudflare Access (`cloudflare` fixture) is used by accounts, experiments and cli.
pytest_plugins = ["accounts.tests.cloudflare"]

# Every cluster_name the suite creates experiments on. They are local clusters here, so CreateExp
# keeps refusing unknown clusters (controllers.clusters) while these tests keep their names;
# tests of the Kubernetes backend point FALCON_CLUSTERS_FILE at their own file.
TEST_CLUSTERS = ("local", "tpu-v5p-cluster-a", "gpu-a", "tpu-a", "a", "b", "c", "c1", "c2")


# The fixtures through which a test reaches the test database, directly or by a live server or a
# subprocess given its name (`live_server`, `transactional_db`); pytest-django refuses every other
# database access, in the test's own threads too, so a test requesting none of them reads no row.
# (`django_db_blocker` is in every test's closure; a fixture that unblocks it needs
# `django_db_setup` anyway, for the test database to exist.)
DATABASE_FIXTURES = frozenset({
    "db", "transactional_db", "django_db_setup", "live_server", "django_db_reset_sequences",
    "django_db_serialized_rollback", "admin_user", "admin_client"})


def pytest_addoption(parser):
    parser.addoption(
        "--database-tests-only", action="store_true", default=False,
        help="deselect the tests that never touch the database: `make test-mariadb` passes it, "
             "since the SQLite pass already ran them (docs/testing.md)")


def uses_database(item: pytest.Item) -> bool:
    """Whether `item` reaches the database: a `django_db` mark, a database fixture in its closure,
    or the `every_database` mark of a test that reads the database settings another way (a
    subprocess inheriting DATABASE_URL)."""
    return bool(item.get_closest_marker("django_db") or item.get_closest_marker("every_database")
                or DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Keep what was collected (tests/test_collection.py reads it), then, with
    `--database-tests-only`, deselect the tests that never touch the database."""
    session.falcon_collected = list(items)
    if not config.getoption("database_tests_only"):
        return
    keep = [item for item in items if uses_database(item)]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not uses_database(item)])
        items[:] = keep


def pytest_configure(config):
    """Create the local state (FALCON_VAR_DIR, the secret files) before the first test.

    pytest-django imports the settings before this file, so on a fresh checkout they were read
    with no secret files: `prepare_local_state` creates them and refreshes those settings. The
    SQLite test database lives in FALCON_VAR_DIR too.
    """
    config.addinivalue_line(
        "markers", "every_database: run on each database although no database fixture is "
                   "requested (the test reads DATABASE_URL another way, e.g. in a subprocess)")
    from falcon_site.startup import prepare_local_state

    prepare_local_state()
    # `falcon ... --help` run by a test draws its page afresh and never writes the help cache
    # into the home folder of whoever runs the suite; cli/tests/test_helpcache.py turns the
    # cache on, with a config folder of its own.
    os.environ["FALCON_NO_HELP_CACHE"] = "1"


@pytest.fixture(scope="session")
def _falcon_test_database_names():
    """Name the test databases (test-only settings, kept out of `falcon_site.settings`).

    - MariaDB/MySQL: the server is shared by everything on the machine, so each run creates and
      drops its own database, named by FALCON_TEST_DB_NAME (the Makefile makes it unique per
      run), else `test_falcon_<pid>`; utf8mb4 as in production.
    - SQLite: a file under FALCON_VAR_DIR, not the in-memory shared cache, so that threads and
      processes lock the database as they do in the local mode (the shared cache fails at once
      with "table is locked"), and subprocesses of the tests can open it.
    """
    from django.conf import settings

    db = settings.DATABASES["default"]
    test = db.setdefault("TEST", {})
    if db["ENGINE"] == "django.db.backends.mysql":
        test.update({"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci",
                     "NAME": os.environ.get("FALCON_TEST_DB_NAME", f"test_falcon_{os.getpid()}")})
    elif db["ENGINE"].endswith(".sqlite3"):  # Django's backend, or core.database.sqlite3
        test["NAME"] = str(settings.VAR_DIR / f"test-{os.getpid()}.sqlite3")


@pytest.fixture(scope="session")
def django_db_modify_db_settings(_falcon_test_database_names,
                                 django_db_modify_db_settings_parallel_suffix):
    """pytest-django's hook before the test databases are created: our names, then its suffix."""


@pytest.fixture(scope="session")
def _signing_key(tmp_path_factory):
    """One local-issuer key for the session (RSA generation is slow), outside FALCON_VAR_DIR."""
    from accounts.issuer import new_signing_key_pem
    from falcon_site.startup import create_file_once

    path = tmp_path_factory.mktemp("local-state") / "jwt-signing-key.pem"
    create_file_once(path, new_signing_key_pem)
    return path


@pytest.fixture(autouse=True)
def _isolated_var(settings, tmp_path, _signing_key):
    """Give every test its own artifact root, and the session's signing key (never written to):
    tests do not touch the files of FALCON_VAR_DIR."""
    settings.FALCON_ARTIFACT_ROOT = (tmp_path / "artifacts").as_uri()
    settings.FALCON_LOCAL_SIGNING_KEY = _signing_key


@pytest.fixture(autouse=True)
def _fresh_user_cache():
    """Every test starts without cached token users: its database was rolled back."""
    from accounts.authentication import clear_user_cache
    clear_user_cache()
    yield
    clear_user_cache()


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


@pytest.fixture
def analyzer(settings, tmp_path):
    """A real AnalyzerService (a small fake controller) for the analyses and plugins endpoints.

    Without one they answer 503, as documented; tests that assert "never a 5xx" over every
    endpoint (the schema fuzz, the request-number checks) run against an analyzer that answers
    (503 itself is tested in analysis/tests/test_api.py).
    """
    from analysis.tests.fake_analyzer import running_fake_analyzer

    settings.FALCON_ANALYSIS_ROOT = (tmp_path / "analysis-store").as_uri()
    with running_fake_analyzer() as (fake, target):
        settings.FALCON_ANALYZER_TARGET = target
        yield fake
