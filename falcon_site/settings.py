"""Django settings for Falcon, read from environment variables.

Every production concern has an embedded default (architecture page, "Embedded defaults"):
SQLite under `var/`, a local artifact directory, and the local JWT issuer. Production sets:

- `DATABASE_URL`: e.g. `mysql://user:pass@host:3306/falcon` (mysqlclient, utf8mb4).
- `FALCON_ARTIFACT_ROOT`: where experiments write, e.g. `gs://bucket/falcon` or `file:///data`.
- `FALCON_AUTH_MODE`: `local` (default) or `cloudflare`.
- `FALCON_AUTH_JWKS_URL`, `FALCON_AUTH_AUDIENCE`, `FALCON_AUTH_ISSUER`: the verifier's key set,
  audience(s) (comma-separated) and issuer.
"""
from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("FALCON_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    """Read a boolean environment variable (`1/true/yes/on` are true)."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    """Read a comma-separated environment variable into a list of non-empty items."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def read_or_create_secret(path: Path) -> str:
    """Return the secret kept in `path`, creating a random one (mode 0600) on first use.

    Written whole to a temporary file, then hard-linked into place: a process starting at the
    same time never reads a half-written secret, and the loser of the race uses the winner's.
    """
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    import secrets

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(48))
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return path.read_text().strip()


def _secret_key() -> str:
    """Return `DJANGO_SECRET_KEY`, or a random key kept under `var/` for the local mode."""
    return os.environ.get("DJANGO_SECRET_KEY") or read_or_create_secret(
        VAR_DIR / "django-secret-key")


SECRET_KEY = _secret_key()
DEBUG = env_bool("DJANGO_DEBUG", True)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "falcon_site",
    "accounts",
    "experiments",
    "jobs",
    "artifacts",
    "controllers",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
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
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'falcon.sqlite3'}"),
        conn_max_age=int(os.environ.get("FALCON_DB_CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # utf8mb4 for names and configs in any language; strict mode so MySQL refuses a value that
    # does not fit instead of truncating it (../shared/docs/libraries.md, MariaDB row).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"charset": "utf8mb4", "init_command": "SET sql_mode='STRICT_TRANS_TABLES'"}
    )
    # The MariaDB server is shared by everything on the machine: each test run creates and drops
    # its own database, named by FALCON_TEST_DB_NAME (the Makefile makes it unique per run).
    DATABASES["default"]["TEST"] = {
        "CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci",
        "NAME": os.environ.get("FALCON_TEST_DB_NAME", f"test_falcon_{os.getpid()}"),
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (HTTP, gRPC) share one SQLite file in the local mode: wait for the
    # write lock instead of failing at once with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    )
    # Tests use a file, not the in-memory shared cache, so that threads and processes lock the
    # database as they do in the local mode (the shared cache fails at once: "table is locked").
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.User"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# Request bodies: the config limit (1 MiB, enforced with a 413 by the service layer) must be
# reachable, so Django's own cap sits above it.
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024

# --- Falcon ---------------------------------------------------------------------------------
FALCON_ARTIFACT_ROOT = os.environ.get(
    "FALCON_ARTIFACT_ROOT", (VAR_DIR / "artifacts").resolve().as_uri()
)
FALCON_CONFIG_MAX_BYTES = 1024 * 1024

FALCON_AUTH_MODE = os.environ.get("FALCON_AUTH_MODE", "local")
if FALCON_AUTH_MODE not in {"local", "cloudflare"}:
    raise ImproperlyConfigured(
        f"FALCON_AUTH_MODE={FALCON_AUTH_MODE!r} is not known: set it to 'local' or 'cloudflare'."
    )
FALCON_AUTH_JWKS_URL = os.environ.get("FALCON_AUTH_JWKS_URL", "")
FALCON_AUTH_AUDIENCE = env_list("FALCON_AUTH_AUDIENCE", "falcon-local")
FALCON_AUTH_ISSUER = os.environ.get("FALCON_AUTH_ISSUER", "falcon-local")
FALCON_AUTH_LEEWAY_SECONDS = int(os.environ.get("FALCON_AUTH_LEEWAY_SECONDS", "30"))
FALCON_LOCAL_TOKEN_TTL_SECONDS = int(os.environ.get("FALCON_LOCAL_TOKEN_TTL_SECONDS", str(12 * 3600)))
FALCON_LOCAL_SIGNING_KEY = VAR_DIR / "jwt-signing-key.pem"
if FALCON_AUTH_MODE == "cloudflare" and not (FALCON_AUTH_JWKS_URL and FALCON_AUTH_AUDIENCE):
    raise ImproperlyConfigured(
        "FALCON_AUTH_MODE=cloudflare needs FALCON_AUTH_JWKS_URL and FALCON_AUTH_AUDIENCE: "
        "the audience check is never skipped."
    )


def _internal_token() -> str:
    """Return `FALCON_INTERNAL_TOKEN`, or in the local mode a random token kept under `var/`.

    The token authenticates controllers to the gRPC API (`falcon_site.grpc.auth`). Outside the
    local mode there is no default: an empty token accepts no caller, only user JWTs pass.
    """
    token = os.environ.get("FALCON_INTERNAL_TOKEN", "")
    if token:
        if len(token) < 32:
            raise ImproperlyConfigured("FALCON_INTERNAL_TOKEN must be at least 32 characters; "
                                       "generate one with `openssl rand -hex 32`.")
        return token
    if FALCON_AUTH_MODE != "local":
        return ""
    return read_or_create_secret(VAR_DIR / "internal-token")


# gRPC API (architecture page, Processes): where `manage.py rungrpc` listens, where controllers
# connect, and the shared service token controllers send as `authorization: Bearer <token>`.
FALCON_INTERNAL_TOKEN = _internal_token()
FALCON_GRPC_ADDR = os.environ.get("FALCON_GRPC_ADDR", "127.0.0.1:50051")
FALCON_GRPC_TARGET = os.environ.get("FALCON_GRPC_TARGET", "127.0.0.1:50051")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.AccessJWTAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.SearchFilter",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "falcon_site.api.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Falcon API",
    "DESCRIPTION": "Experiments, jobs and artifacts of the Falcon experiment platform.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "ExpStatusEnum": "experiments.models.ExpStatus",
        "JobStatusEnum": "jobs.models.JobStatus",
        "ArtifactStatusEnum": "artifacts.models.ArtifactStatus",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("FALCON_LOG_LEVEL", "INFO")},
}

# --- clusters and controllers ------------------------------------------------------------------
FALCON_CLUSTERS = {"local": {"backend": "local", "state_dir": str(VAR_DIR / "local-cluster")}}
FALCON_CONTROLLER_INTERVAL_SECONDS = float(os.environ.get("FALCON_CONTROLLER_INTERVAL_SECONDS", "2"))
FALCON_PENDING_TIMEOUT_SECONDS = (
    float(os.environ["FALCON_PENDING_TIMEOUT_SECONDS"])
    if os.environ.get("FALCON_PENDING_TIMEOUT_SECONDS") else None
)
