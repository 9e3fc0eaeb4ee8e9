"""Django settings for Falcon, read from environment variables.

Every production concern has an embedded default (architecture page, "Embedded defaults"):
SQLite under `var/`, a local artifact directory, and the local JWT issuer. Production sets:

- `DATABASE_URL`: e.g. `mysql://user:pass@host:3306/falcon` (mysqlclient, utf8mb4).
- `FALCON_ARTIFACT_ROOT`: where experiments write, e.g. `gs://bucket/falcon` or `file:///data`.
- `FALCON_AUTH_MODE`: `local` (default) or `cloudflare`.
- local mode: `FALCON_AUTH_JWKS_URL`, `FALCON_AUTH_AUDIENCE`, `FALCON_AUTH_ISSUER`: the
  verifier's key set (default: the embedded issuer), audience(s) (comma-separated) and issuer.
- cloudflare mode: `FALCON_CF_TEAM_DOMAIN` (issuer; certs at `<team>/cdn-cgi/access/certs`),
  `FALCON_CF_CERTS_URL` (override), `FALCON_CF_AUDIENCES` (AUD tags, comma-separated),
  `FALCON_CF_SERVICE_TOKENS` (allowed service-token common names, comma-separated).
"""
from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from core.statuses import ArtifactStatus, ExpStatus, JobStatus
from core.statuses import choices as status_choices

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
# Off unless asked for: DEBUG pages leak settings and answer API clients with HTML.
DEBUG = env_bool("DJANGO_DEBUG", False)
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
    "drf_spectacular_sidecar",  # Swagger UI's files served by us, not a CDN (works offline)
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

# Request bodies: the config limit (128 KiB, enforced with a 413 by the service layer) must be
# reachable, so Django's own cap sits above it.
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024

# --- Falcon ---------------------------------------------------------------------------------
FALCON_ARTIFACT_ROOT = os.environ.get(
    "FALCON_ARTIFACT_ROOT", (VAR_DIR / "artifacts").resolve().as_uri()
)
# The config reaches every task as the environment variable CUSTOM_CONFIG_KEY (seed 3.3.4), and
# Linux caps one environment string, "NAME=value" and its NUL, at MAX_ARG_STRLEN = 32 pages =
# 128 KiB (execve(2)): a larger config would be accepted and then fail every task with E2BIG.
FALCON_CONFIG_MAX_BYTES = 128 * 1024 - len("CUSTOM_CONFIG_KEY=") - 1

# --- auth (seed 000, 3.4; issue 5) ------------------------------------------------------------
FALCON_AUTH_MODE = os.environ.get("FALCON_AUTH_MODE", "local")
if FALCON_AUTH_MODE not in {"local", "cloudflare"}:
    raise ImproperlyConfigured(
        f"FALCON_AUTH_MODE={FALCON_AUTH_MODE!r} is not known: set it to 'local' or 'cloudflare'."
    )
# Local mode: the embedded issuer (or another JWKS named here) feeds `accounts.verifier`.
FALCON_AUTH_JWKS_URL = os.environ.get("FALCON_AUTH_JWKS_URL", "")
FALCON_AUTH_AUDIENCE = env_list("FALCON_AUTH_AUDIENCE", "falcon-local")
FALCON_AUTH_ISSUER = os.environ.get("FALCON_AUTH_ISSUER", "falcon-local")
FALCON_AUTH_LEEWAY_SECONDS = int(os.environ.get("FALCON_AUTH_LEEWAY_SECONDS", "30"))
FALCON_LOCAL_TOKEN_TTL_SECONDS = int(os.environ.get("FALCON_LOCAL_TOKEN_TTL_SECONDS", str(12 * 3600)))
FALCON_LOCAL_SIGNING_KEY = VAR_DIR / "jwt-signing-key.pem"

# Cloudflare mode: the team domain is the expected `iss` and gives the certs URL
# (`<team>/cdn-cgi/access/certs`, Cloudflare "Validate JWTs"); the audiences are the Access
# applications' AUD tags. These feed the same `accounts.verifier.TokenVerifier`.
FALCON_CF_TEAM_DOMAIN = os.environ.get("FALCON_CF_TEAM_DOMAIN", "").strip()
FALCON_CF_CERTS_URL = os.environ.get("FALCON_CF_CERTS_URL", "").strip()
FALCON_CF_AUDIENCES = env_list("FALCON_CF_AUDIENCES")
# Common names (client ids) of Cloudflare service tokens allowed in, besides the active
# `accounts.ServicePrincipal` rows operators keep in the admin (behaviours.md A2).
FALCON_CF_SERVICE_TOKENS = env_list("FALCON_CF_SERVICE_TOKENS")
# The controllers' own Cloudflare Access service token (cloudflare mode): exchanged at this
# Access-protected URL for the JWT they send to the gRPC API (controllers/service_token.py).
FALCON_CONTROLLER_ACCESS_URL = os.environ.get("FALCON_CONTROLLER_ACCESS_URL", "")
FALCON_CF_CLIENT_ID = os.environ.get("FALCON_CF_CLIENT_ID", "")
FALCON_CF_CLIENT_SECRET = os.environ.get("FALCON_CF_CLIENT_SECRET", "")
if FALCON_AUTH_MODE == "cloudflare" and not (FALCON_CF_TEAM_DOMAIN and FALCON_CF_AUDIENCES):
    # behaviours.md A1: an empty audience must stop the server, never skip the check.
    raise ImproperlyConfigured(
        "FALCON_AUTH_MODE=cloudflare needs FALCON_CF_TEAM_DOMAIN (e.g. "
        "https://acme.cloudflareaccess.com) and FALCON_CF_AUDIENCES (the Access application's "
        "AUD tag, comma-separated): the audience check is never skipped."
    )
if FALCON_AUTH_MODE == "cloudflare":
    from urllib.parse import urlsplit

    _team = urlsplit(FALCON_CF_TEAM_DOMAIN)
    if _team.scheme != "https" or not _team.hostname or _team.path.strip("/"):
        raise ImproperlyConfigured(
            f"FALCON_CF_TEAM_DOMAIN={FALCON_CF_TEAM_DOMAIN!r} is not a team domain: use "
            "https://<team>.cloudflareaccess.com (https, a host, no path); it is the tokens' "
            "issuer.")

# Key-set fetching (PyJWKClient plus `accounts.jwks`): short timeouts so a slow certs endpoint
# cannot stall requests; a bounded cache; at most one refetch per cooldown for unknown `kid`s;
# during an outage the last good key set keeps serving for FALCON_AUTH_JWKS_STALE_SECONDS and
# the endpoint is retried at most every FALCON_AUTH_JWKS_RETRY_SECONDS (behaviours.md A3).
FALCON_AUTH_JWKS_TIMEOUT_SECONDS = float(os.environ.get("FALCON_AUTH_JWKS_TIMEOUT_SECONDS", "3"))
FALCON_AUTH_JWKS_LIFESPAN_SECONDS = float(os.environ.get("FALCON_AUTH_JWKS_LIFESPAN_SECONDS",
                                                         "300"))
FALCON_AUTH_JWKS_COOLDOWN_SECONDS = float(os.environ.get("FALCON_AUTH_JWKS_COOLDOWN_SECONDS", "10"))
FALCON_AUTH_JWKS_STALE_SECONDS = float(os.environ.get("FALCON_AUTH_JWKS_STALE_SECONDS",
                                                      str(6 * 3600)))
FALCON_AUTH_JWKS_RETRY_SECONDS = float(os.environ.get("FALCON_AUTH_JWKS_RETRY_SECONDS", "15"))

# Local mode logs into the admin with a password; Cloudflare mode with the Access identity of
# the request (`accounts.middleware`), never a password. Both backends check the mode at run
# time, so both can stay listed and sessions made by either keep resolving.
AUTHENTICATION_BACKENDS = [
    "accounts.auth_backends.LocalPasswordBackend",
    "accounts.auth_backends.CloudflareAccessBackend",
]
# Right after Django's AuthenticationMiddleware, which it builds on (request.user, the session).
MIDDLEWARE.insert(MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
                  "accounts.middleware.CloudflareAccessAdminMiddleware")


def _internal_token() -> str:
    """Return `FALCON_INTERNAL_TOKEN`, or in the local mode a random token kept under `var/`.

    The token authenticates controllers to the gRPC API (`accounts.grpc_auth`) in the local
    mode only. Outside it there is no default, and the gRPC server refuses the token even when
    set (issue 5, item 4): there, services authenticate with Cloudflare service tokens.
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
        "accounts.authentication.LocalSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "core.drf.FilterSetBackend",  # the view's FilterSet, `search` included
        "core.drf.StrictOrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "core.drf.exception_handler",
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
    "ENUM_NAME_OVERRIDES": {
        # The same (value, label) pairs as the models' choices.
        "ExpStatusEnum": status_choices(ExpStatus),
        "JobStatusEnum": status_choices(JobStatus),
        "ArtifactStatusEnum": status_choices(ArtifactStatus),
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
# The clusters file (YAML, see controllers/clusters.py) maps each cluster_name to its backend;
# the API server and the resource manager read the same file. Without it, the embedded default
# below applies: one cluster `local` whose replicas are local processes.
FALCON_CLUSTERS_FILE = os.environ.get("FALCON_CLUSTERS_FILE", "")
FALCON_CLUSTERS = {"local": {"backend": "local", "state_dir": str(VAR_DIR / "local-cluster")}}
# Leader election of `runcontroller` on a coordination.k8s.io/v1 Lease (controllers/leader.py).
# Durations in seconds, with client-go's defaults; the Lease lives in the controllers' own
# namespace (POD_NAMESPACE from the downward API). `kubeconfig`/`context` empty with
# `in_cluster` true: the Pod's service account.
FALCON_LEADER_ELECTION = {
    "namespace": os.environ.get("FALCON_LEASE_NAMESPACE") or os.environ.get("POD_NAMESPACE")
    or "default",
    "lease_name_prefix": os.environ.get("FALCON_LEASE_NAME_PREFIX", "falcon"),
    "lease_duration": float(os.environ.get("FALCON_LEASE_DURATION_SECONDS", "15")),
    "renew_deadline": float(os.environ.get("FALCON_LEASE_RENEW_DEADLINE_SECONDS", "10")),
    "retry_period": float(os.environ.get("FALCON_LEASE_RETRY_PERIOD_SECONDS", "2")),
    "in_cluster": env_bool("FALCON_LEASE_IN_CLUSTER",
                           bool(os.environ.get("KUBERNETES_SERVICE_HOST"))),
    "kubeconfig": os.environ.get("FALCON_LEASE_KUBECONFIG", ""),
    "context": os.environ.get("FALCON_LEASE_KUBE_CONTEXT", ""),
}
FALCON_CONTROLLER_INTERVAL_SECONDS = float(os.environ.get("FALCON_CONTROLLER_INTERVAL_SECONDS", "2"))
FALCON_PENDING_TIMEOUT_SECONDS = (
    float(os.environ["FALCON_PENDING_TIMEOUT_SECONDS"])
    if os.environ.get("FALCON_PENDING_TIMEOUT_SECONDS") else None
)
