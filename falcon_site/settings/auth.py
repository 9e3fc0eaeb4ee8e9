"""Authentication settings: the mode, the local issuer, Cloudflare Access, the internal token
and the key-set fetching timings.

Two modes. `local` (the default) is for one machine: the server is its own RS256 token issuer
(`accounts.issuer`, key in `$FALCON_VAR_DIR/jwt-signing-key.pem`) and controllers authenticate
with the internal token. `cloudflare` is production: users come through Cloudflare Access and
every token is checked against the team's certs; the process refuses to start (on import of
these settings) without a team domain and an audience. Both feed `accounts.verifier`.

Environment variables:

- `FALCON_AUTH_MODE`: `local` (default) or `cloudflare`.
- `FALCON_AUTH_USER_CACHE_SECONDS`: how long a process keeps a token's user instead of reading
  it per request (default 300; never beyond the token's expiry).
- `FALCON_AUTH_TOKEN_CACHE_SECONDS`: how long a process keeps a verified token (by its SHA-256
  digest) instead of verifying it per request (default 60; never beyond the token's expiry; 0
  verifies every request).
- `FALCON_AUTH_JWKS_URL`: local mode, the key set the verifier uses (default: the embedded
  issuer's key, without an HTTP round trip).
- `FALCON_AUTH_AUDIENCE`: local mode, the accepted `aud` values, comma-separated (default
  `falcon-local`).
- `FALCON_AUTH_ISSUER`: local mode, the `iss` signed and required (default `falcon-local`).
- `FALCON_AUTH_LEEWAY_SECONDS`: clock skew allowed on `exp`, `nbf`, `iat`, in seconds
  (default 30).
- `FALCON_LOCAL_TOKEN_TTL_SECONDS`: lifetime of a token the local issuer signs, in seconds
  (default 43200, 12 hours).
- `FALCON_CF_TEAM_DOMAIN`: cloudflare mode, `https://<team>.cloudflareaccess.com`: the tokens'
  issuer, and the certs at `<team>/cdn-cgi/access/certs`.
- `FALCON_CF_CERTS_URL`: cloudflare mode, an override of the certs URL.
- `FALCON_CF_AUDIENCES`: cloudflare mode, the Access applications' AUD tags, comma-separated.
- `FALCON_CF_SERVICE_TOKENS`: service-token common names (client ids) allowed in,
  comma-separated, besides the active `accounts.ServicePrincipal` rows.
- `FALCON_SERVICE_ROLES`: `common_name=role` pairs, comma-separated: the gRPC rights of each
  service token (`exp-controller`, `resource-manager`, `analyzer`, `maintenance`,
  `read-only`); a token named here is allowed in; allowed tokens named nowhere are read-only.
- `FALCON_LOCAL_ALLOW_NONLOOPBACK`: `1` lets the local mode listen on and answer a
  non-loopback address (with a warning on start); off by default.
- `FALCON_CONTROLLER_ACCESS_URL`, `FALCON_CF_CLIENT_ID`, `FALCON_CF_CLIENT_SECRET`: cloudflare
  mode, the controllers' own Access service token and the Access-protected URL where they
  exchange it for the JWT they send to the gRPC API (`controllers.service_token`).
- `FALCON_INTERNAL_TOKEN`: the controllers' shared token for the gRPC API, at least 32
  characters; accepted in the local mode only. Unset in the local mode: read from
  `$FALCON_VAR_DIR/internal-token` (`FALCON_INTERNAL_TOKEN_FILE`).
- `FALCON_AUTH_JWKS_TIMEOUT_SECONDS` (3), `FALCON_AUTH_JWKS_LIFESPAN_SECONDS` (300),
  `FALCON_AUTH_JWKS_COOLDOWN_SECONDS` (10), `FALCON_AUTH_JWKS_STALE_SECONDS` (21600, 6 hours),
  `FALCON_AUTH_JWKS_RETRY_SECONDS` (15), all in seconds: see "Key-set fetching" below.
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from .base import VAR_DIR, env_list, read_secret

FALCON_AUTH_MODE = os.environ.get("FALCON_AUTH_MODE", "local")
# Seconds a token's user is kept per process (accounts.authentication.UserCache); at most the
# token's own lifetime.
FALCON_AUTH_USER_CACHE_SECONDS = int(os.environ.get("FALCON_AUTH_USER_CACHE_SECONDS", "300"))
# Seconds a verified token's claims are kept per process (accounts.verifier.VerifiedTokens); at
# most the token's own lifetime. A key removed from the key set stops counting within this time,
# and during a certs outage a token verified this recently keeps working (the stale key set,
# FALCON_AUTH_JWKS_STALE_SECONDS, would accept it too).
FALCON_AUTH_TOKEN_CACHE_SECONDS = int(os.environ.get("FALCON_AUTH_TOKEN_CACHE_SECONDS", "60"))
if FALCON_AUTH_MODE not in {"local", "cloudflare"}:
    raise ImproperlyConfigured(
        f"FALCON_AUTH_MODE={FALCON_AUTH_MODE!r} is not known: set it to 'local' or 'cloudflare'."
    )

# Local mode: the embedded issuer (or another JWKS named here) feeds `accounts.verifier`.
FALCON_AUTH_JWKS_URL = os.environ.get("FALCON_AUTH_JWKS_URL", "")
FALCON_AUTH_AUDIENCE = env_list("FALCON_AUTH_AUDIENCE", "falcon-local")
FALCON_AUTH_ISSUER = os.environ.get("FALCON_AUTH_ISSUER", "falcon-local")
FALCON_AUTH_LEEWAY_SECONDS = int(os.environ.get("FALCON_AUTH_LEEWAY_SECONDS", "30"))
FALCON_LOCAL_TOKEN_TTL_SECONDS = int(os.environ.get("FALCON_LOCAL_TOKEN_TTL_SECONDS",
                                                    str(12 * 3600)))
# The local issuer's RSA key (PEM, mode 0600), created by `manage.py prepare` in the local mode.
FALCON_LOCAL_SIGNING_KEY = VAR_DIR / "jwt-signing-key.pem"

# Cloudflare mode: the team domain is the expected `iss` and gives the certs URL
# (`<team>/cdn-cgi/access/certs`, Cloudflare "Validate JWTs"); the audiences are the Access
# applications' AUD tags. These feed the same `accounts.verifier.TokenVerifier`.
FALCON_CF_TEAM_DOMAIN = os.environ.get("FALCON_CF_TEAM_DOMAIN", "").strip()
FALCON_CF_CERTS_URL = os.environ.get("FALCON_CF_CERTS_URL", "").strip()
FALCON_CF_AUDIENCES = env_list("FALCON_CF_AUDIENCES")
# Common names (client ids) of Cloudflare service tokens allowed in, besides the active
# `accounts.ServicePrincipal` rows operators keep in the admin.
FALCON_CF_SERVICE_TOKENS = env_list("FALCON_CF_SERVICE_TOKENS")
# Service roles (decisions.md#auth-8): `common_name=role` pairs, comma-separated, e.g.
# "id1.access=exp-controller,id2.access=resource-manager,id3.access=analyzer". A token named
# here is allowed in with that role; an allowed token named nowhere is read-only. A
# ServicePrincipal row's role, when set, wins.
SERVICE_ROLE_NAMES = ("exp-controller", "resource-manager", "analyzer", "maintenance",
                      "read-only")


def _service_roles(raw: str) -> dict[str, str]:
    roles: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        name, sep, role = (x.strip() for x in item.partition("="))
        if not sep or not name or role not in SERVICE_ROLE_NAMES:
            raise ImproperlyConfigured(
                f"FALCON_SERVICE_ROLES: {item!r} is not COMMON_NAME=ROLE with ROLE one of "
                f"{', '.join(SERVICE_ROLE_NAMES)}; e.g. FALCON_SERVICE_ROLES="
                "'0123abcd.access=exp-controller,4567ef01.access=resource-manager'.")
        if roles.get(name, role) != role:
            raise ImproperlyConfigured(f"FALCON_SERVICE_ROLES names {name!r} twice with "
                                       "different roles; keep one.")
        roles[name] = role
    return roles


FALCON_SERVICE_ROLES = _service_roles(os.environ.get("FALCON_SERVICE_ROLES", ""))
# The controllers' own Cloudflare Access service token (cloudflare mode): exchanged at this
# Access-protected URL for the JWT they send to the gRPC API (controllers/service_token.py).
FALCON_CONTROLLER_ACCESS_URL = os.environ.get("FALCON_CONTROLLER_ACCESS_URL", "")
FALCON_CF_CLIENT_ID = os.environ.get("FALCON_CF_CLIENT_ID", "")
FALCON_CF_CLIENT_SECRET = os.environ.get("FALCON_CF_CLIENT_SECRET", "")
if FALCON_AUTH_MODE == "cloudflare" and not (FALCON_CF_TEAM_DOMAIN and FALCON_CF_AUDIENCES):
    # An empty audience must stop the server, never skip the check.
    raise ImproperlyConfigured(
        "FALCON_AUTH_MODE=cloudflare needs FALCON_CF_TEAM_DOMAIN (e.g. "
        "https://acme.cloudflareaccess.com) and FALCON_CF_AUDIENCES (the Access application's "
        "AUD tag, comma-separated): the audience check is never skipped."
    )
if FALCON_AUTH_MODE == "cloudflare":
    _team = urlsplit(FALCON_CF_TEAM_DOMAIN)
    if _team.scheme != "https" or not _team.hostname or _team.path.strip("/"):
        raise ImproperlyConfigured(
            f"FALCON_CF_TEAM_DOMAIN={FALCON_CF_TEAM_DOMAIN!r} is not a team domain: use "
            "https://<team>.cloudflareaccess.com (https, a host, no path); it is the tokens' "
            "issuer.")

# Local mode listens on loopback only unless this is set (decisions.md#auth-10,
# core.processes.ports.local_bind_problem): runlocal, rungrpc and gunicorn refuse another address,
# and the HTTP API refuses requests from a non-loopback peer.
FALCON_LOCAL_ALLOW_NONLOOPBACK = os.environ.get("FALCON_LOCAL_ALLOW_NONLOOPBACK", "").strip() \
    .lower() in {"1", "true", "yes", "on"}

# Key-set fetching (PyJWKClient plus `accounts.jwks`), in seconds: short timeouts so a slow
# certs endpoint cannot stall requests; a bounded cache; at most one refetch per cooldown for
# unknown `kid`s; during an outage the last good key set keeps serving for
# FALCON_AUTH_JWKS_STALE_SECONDS and the endpoint is retried at most every
# FALCON_AUTH_JWKS_RETRY_SECONDS.
FALCON_AUTH_JWKS_TIMEOUT_SECONDS = float(os.environ.get("FALCON_AUTH_JWKS_TIMEOUT_SECONDS", "3"))
FALCON_AUTH_JWKS_LIFESPAN_SECONDS = float(os.environ.get("FALCON_AUTH_JWKS_LIFESPAN_SECONDS",
                                                         "300"))
FALCON_AUTH_JWKS_COOLDOWN_SECONDS = float(os.environ.get("FALCON_AUTH_JWKS_COOLDOWN_SECONDS", "10"))
FALCON_AUTH_JWKS_STALE_SECONDS = float(os.environ.get("FALCON_AUTH_JWKS_STALE_SECONDS",
                                                      str(6 * 3600)))
FALCON_AUTH_JWKS_RETRY_SECONDS = float(os.environ.get("FALCON_AUTH_JWKS_RETRY_SECONDS", "15"))

# Local mode logs into the admin with a password; Cloudflare mode with the Access identity of
# the request (`accounts.middleware.CloudflareAccessAdminMiddleware`, listed in MIDDLEWARE in
# `base`), never a password. Both backends check the mode at run time, so both can stay listed
# and sessions made by either keep resolving.
AUTHENTICATION_BACKENDS = [
    "accounts.auth_backends.LocalPasswordBackend",
    "accounts.auth_backends.CloudflareAccessBackend",
]

# The internal token authenticates controllers to the gRPC API (`accounts.grpc_auth`) in the
# local mode only, sent as `authorization: Bearer <token>`. Outside it there is no default, and
# the gRPC server refuses the token even when set: there, services authenticate with Cloudflare
# service tokens. In the local mode without the variable it is read from a file, so every
# process (runlocal's children included) uses the same one.
_INTERNAL_TOKEN_ENV = os.environ.get("FALCON_INTERNAL_TOKEN", "")
if _INTERNAL_TOKEN_ENV and len(_INTERNAL_TOKEN_ENV) < 32:
    raise ImproperlyConfigured("FALCON_INTERNAL_TOKEN must be at least 32 characters; "
                               "generate one with `openssl rand -hex 32`.")
# Derived, not read from the environment: the file the token is read from, or None.
FALCON_INTERNAL_TOKEN_FILE = (VAR_DIR / "internal-token"
                              if FALCON_AUTH_MODE == "local" and not _INTERNAL_TOKEN_ENV else None)
FALCON_INTERNAL_TOKEN = _INTERNAL_TOKEN_ENV or read_secret(FALCON_INTERNAL_TOKEN_FILE)
