"""Django core settings: apps, middleware, database, templates, static files, logging, the REST
framework and the OpenAPI schema; plus the helpers the other settings modules read with.

Importing the settings only reads the environment, and files that already exist: nothing is
created here. The local state (the folder `FALCON_VAR_DIR`, the secret key file, the internal
token, the local issuer's signing key) is created by `python manage.py prepare`
(`falcon_site.startup.prepare_local_state`, also run by `migrate` and `runlocal`), and a system
check names what is missing.

Environment variables:

- `FALCON_VAR_DIR`: the folder of the local state (default `<repository>/var`): the SQLite
  database, the secret files, the local cluster's and the local artifacts' files.
- `DJANGO_SECRET_KEY`: Django's secret key. Unset or empty: read from
  `$FALCON_VAR_DIR/django-secret-key` (`FALCON_SECRET_KEY_FILE`).
- `DJANGO_DEBUG`: `1`, `true`, `yes` or `on` turns Django's debug mode on (default off).
- `DJANGO_ALLOWED_HOSTS`: the host names served, comma-separated (default
  `localhost,127.0.0.1,[::1],testserver`).
- `DJANGO_CSRF_TRUSTED_ORIGINS`: public origins allowed to POST forms, comma-separated (e.g.
  `https://falcon.example.com` behind a proxy that ends TLS).
- `DATABASE_URL`: e.g. `mysql://user:pass@host:3306/falcon` (mysqlclient, utf8mb4, strict
  mode; the system check `falcon.E004`/`falcon.E005`, run by `migrate`, refuses a database or
  table whose character set is not utf8mb4); default `sqlite:///$FALCON_VAR_DIR/falcon.sqlite3`.
- `FALCON_DB_CONN_MAX_AGE`: seconds a database connection is kept for reuse (default 60; 0 opens
  a new connection per request). Above 0, `CONN_HEALTH_CHECKS` is on: a reused connection is checked
  at the start of each request and reopened if the server dropped it.
- `FALCON_LOG_LEVEL`: the root logger's level (default `INFO`).
- `FALCON_LOG_FORMAT`: `text` (readable lines, default) or `json` (one JSON object per line,
  for production); see `core.observability.logs`.
"""
from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
import orjson
from django.core.exceptions import ImproperlyConfigured

from core.observability.logs import log_format, logging_config
from core.domain.statuses import ArtifactStatus, ExpStatus, JobStatus
from core.domain.statuses import choices as status_choices

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(os.environ.get("FALCON_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    """Read a boolean environment variable (`1/true/yes/on` are true)."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    """Read a comma-separated environment variable into a list of non-empty items."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def read_secret(path: Path | None) -> str:
    """Return the secret kept in `path`, or "" when there is no such file (yet) or no path.

    `manage.py prepare` creates the file; until then the setting is empty and the system check
    `falcon.E001` (secret key) or `falcon.E002` (internal token) says so.
    """
    if path is None:
        return ""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


# Where SECRET_KEY comes from when DJANGO_SECRET_KEY is unset (None when it is set). Derived, not
# read from the environment.
_SECRET_KEY_ENV = os.environ.get("DJANGO_SECRET_KEY", "")
FALCON_SECRET_KEY_FILE = None if _SECRET_KEY_ENV else VAR_DIR / "django-secret-key"
SECRET_KEY = _SECRET_KEY_ENV or read_secret(FALCON_SECRET_KEY_FILE)
# Off unless asked for: DEBUG pages leak settings and answer API clients with HTML.
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
# The public origins (`https://falcon.example.com`) whose forms may POST here: behind a proxy
# that ends TLS the server sees `http`, so Django's CSRF `Origin` check needs them (the CLI
# login's Confirm button, the admin).
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Before staticfiles: its runserver (JSON access lines under FALCON_LOG_FORMAT=json)
    # replaces staticfiles' one, which it extends (an earlier app's command wins).
    "falcon_site",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files served by us, not a CDN (works offline)
    # The loops' schedules, edited in the admin; a schedule store only: no broker, no worker
    # (docs/decisions.md#dec-beat).
    "django_celery_beat",
    "core",  # the transition history (core.models.TransitionEvent)
    "schedules",  # the loops' schedules (reads django_celery_beat's rows; no models)
    "accounts",
    "experiments",
    "jobs",
    "artifacts",
    "analysis",
    "controllers",
]

MIDDLEWARE = [
    # Before all: the request id (X-Request-ID) and the actor of the transition history.
    "core.http.middleware.RequestContextMiddleware",
    # First: a body over DATA_UPLOAD_MAX_MEMORY_SIZE is answered 413 before anything reads it.
    "core.http.middleware.BodySizeLimitMiddleware",
    # A query parameter with an empty value (`?status=`) is a 400 naming it, on every endpoint.
    "core.http.middleware.EmptyQueryValueMiddleware",
    # The local mode answers loopback peers only, whatever the Host header says.
    "accounts.middleware.LocalModeLoopbackOnlyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The admin login through Cloudflare Access (see `falcon_site.settings.auth`): right after
    # Django's AuthenticationMiddleware, which it builds on (request.user, the session).
    "accounts.middleware.CloudflareAccessAdminMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "falcon_site.urls"
WSGI_APPLICATION = "falcon_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database -------------------------------------------------------------------------------
# The test database's name is set by the test suite (the root conftest.py), not here.
_CONN_MAX_AGE = int(os.environ.get("FALCON_DB_CONN_MAX_AGE", "60"))
# MySQL/MariaDB's session group_concat_max_len, in bytes (below).
GROUP_CONCAT_MAX_BYTES = 4 * 1024 * 1024
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'falcon.sqlite3'}"),
        conn_max_age=_CONN_MAX_AGE,
        # A reused connection the server dropped while idle (wait_timeout, a restart) is
        # replaced at the start of the next request instead of failing it.
        conn_health_checks=_CONN_MAX_AGE > 0,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # utf8mb4 for names and configs in any language; strict mode so MySQL refuses a value that
    # does not fit instead of truncating it. A list row's jobs are one GROUP_CONCAT
    # (core.http.jsonrows.RelatedJsonArray), cut short by the server beyond group_concat_max_len
    # (MySQL's default is 1,024 bytes): 4 MiB holds the 64 roles of the largest experiment
    # many times over.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"charset": "utf8mb4",
         "init_command": f"SET sql_mode='STRICT_TRANS_TABLES', "
                         f"group_concat_max_len={GROUP_CONCAT_MAX_BYTES}"}
    )
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's SQLite backend, with each statement's placeholders converted once
    # (core.database.sqlite3; its vendor is "sqlite" as before).
    DATABASES["default"]["ENGINE"] = "core.database.sqlite3"
    # Several processes (HTTP, gRPC) share one SQLite file in the local mode: wait for the
    # write lock instead of failing at once with "database is locked". Write-ahead logging lets
    # readers go on while a transaction commits, and with synchronous=NORMAL a commit appends
    # to the log without an fsync (the log is synced at checkpoints): a crash of a process
    # loses nothing, a power cut at most the last commits, never the file's integrity
    # (docs/decisions.md#dec-database). The file is read through a memory map of up to
    # FALCON_SQLITE_MMAP_BYTES (256 MiB; SQLite caps it at its SQLITE_MAX_MMAP_SIZE, about
    # 2 GiB): pages are read in place from the operating system's cache, shared by every
    # process, instead of copied by a read() into each connection's private 2 MiB page cache,
    # which a list over 100,000 experiments overflowed (its page query 4.6 ms, 1.6 ms mapped).
    _MMAP_RAW = os.environ.get("FALCON_SQLITE_MMAP_BYTES", str(256 * 1024 * 1024)).strip()
    if not (_MMAP_RAW.isascii() and _MMAP_RAW.isdigit()):
        raise ImproperlyConfigured("FALCON_SQLITE_MMAP_BYTES must be a size in bytes (0: no "
                                   f"memory map), e.g. 268435456; got {_MMAP_RAW[:40]!r}.")
    _MMAP_BYTES = int(_MMAP_RAW)
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE",
         "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                         f"PRAGMA mmap_size={_MMAP_BYTES}"}
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.User"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# The admin shows times to the second with the zone (falcon_site/formats/en/formats.py).
FORMAT_MODULE_PATH = ["falcon_site.formats"]

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# Request bodies, in bytes (8 MiB; docs/limits.md). The largest valid CreateExp fits: its
# TaskSpecs hold at most 4 MiB of text (jobs.specs.MAX_TASK_SPECS_BYTES) and its config under
# 128 KiB (FALCON_CONFIG_MAX_BYTES), so a field's own limit answers first. A larger body is a
# JSON 413 `too_large` (core.http.middleware.BodySizeLimitMiddleware, core.http.parsers.StrictJSONParser).
DATA_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.AccessJWTAuthentication",
        "accounts.authentication.LocalSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "core.http.drf.FilterSetBackend",  # the view's FilterSet, `search` included
        "core.http.drf.StrictOrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # JSON only, bounded in size and depth, no duplicate keys or lone surrogates (core.limits.jsoninput).
    "DEFAULT_PARSER_CLASSES": ["core.http.parsers.StrictJSONParser"],
    "EXCEPTION_HANDLER": "core.http.drf.exception_handler",
    # An unknown ?format= is a 406 naming the formats, not DRF's 404.
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "core.http.drf.StrictContentNegotiation",
    # JSON by orjson (the same JSON as DRF's renderer, several times faster on list pages);
    # the browsable API for browsers.
    "DEFAULT_RENDERER_CLASSES": [
        "drf_orjson_renderer.renderers.ORJSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    # Date-times that reach the renderer unformatted end in Z, as DRF's fields write them.
    "ORJSON_RENDERER_OPTIONS": (orjson.OPT_UTC_Z, orjson.OPT_NON_STR_KEYS),
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Falcon API",
    "DESCRIPTION": "Experiments, jobs and artifacts of the Falcon experiment platform.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # 3.1: JSON Schema's `propertyNames` states the role and environment variable names.
    "OAS_VERSION": "3.1.0",
    # The JSON error body and the error statuses of every operation (core.http.openapi).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.http.openapi.add_error_responses",
    ],
    "ENUM_NAME_OVERRIDES": {
        # The same (value, label) pairs as the models' choices.
        "ExpStatusEnum": status_choices(ExpStatus),
        "JobStatusEnum": status_choices(JobStatus),
        "ArtifactStatusEnum": status_choices(ArtifactStatus),
    },
}

# One console handler; `FALCON_LOG_FORMAT=json` for JSON lines (production), `text` (default)
# for readable lines; every line carries the request id and the entity ids (core.observability.logs).
LOGGING = logging_config(log_format(), os.environ.get("FALCON_LOG_LEVEL", "INFO"))
# Applied by core.observability.logs.apply_config: under json, warnings and uncaught exceptions are records too.
LOGGING_CONFIG = "core.observability.logs.apply_config"
