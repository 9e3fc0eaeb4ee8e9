"""Settings of the Data Analyzer: the analyzer controller's address, queues, plugins and store.

Environment variables:

- `FALCON_ANALYZER_ADDR`: where the analyzer controller's gRPC server (AnalyzerService)
  listens (default `127.0.0.1:50052`).
- `FALCON_ANALYZER_TARGET`: where the API server reaches it (default `127.0.0.1:50052`); a
  comma-separated list of endpoints (the replicas), tried in turn while one answers UNAVAILABLE
  (a follower, or a replica that is down); a `dns:///` target resolving to several addresses is
  balanced round-robin, so a retry reaches another replica (docs/decisions.md#dec-analyzer-leader).
- `FALCON_ANALYZER_TOKEN`: the shared secret the API server sends to AnalyzerService and the
  controller checks, at least 32 characters; in the local mode it defaults to the internal token
  (`FALCON_INTERNAL_TOKEN`). docs/decisions.md#dec-analyzer-auth says why a shared secret.
- `FALCON_ANALYSIS_BUCKET`: the GCS bucket of analysis outputs; when set, the root below is
  `gs://{bucket}` (the deployment's configuration).
- `FALCON_ANALYSIS_ROOT`: the store root of analysis outputs; an analysis writes under
  `{root}/analysis/{exp-id}/{analysis-id}/` (default: `gs://{FALCON_ANALYSIS_BUCKET}`, else
  `FALCON_ARTIFACT_ROOT`).
- `FALCON_ANALYZER_BACKEND`: where analyses run: `local` (processes on this machine, the
  default) or `kubernetes` (one Pod per analysis, docs/analyzer.md "Runs on Kubernetes"). For
  `kubernetes`: `FALCON_ANALYZER_NAMESPACE` (default `POD_NAMESPACE`, then `default`),
  `FALCON_ANALYZER_IMAGE` (required), `FALCON_ANALYZER_RUN_AS_USER` (default 10001, the image's
  numeric USER), `FALCON_ANALYZER_SERVICE_ACCOUNT`, `FALCON_ANALYZER_IMAGE_PULL_SECRETS`
  (comma-separated), `FALCON_ANALYZER_POD_START_TIMEOUT_SECONDS` (an image that cannot be
  pulled fails the analysis after this long; default 300),
  `FALCON_ANALYZER_POD_CONFIG_ERROR_SECONDS` (a container the kubelet refuses to create, e.g.
  a root image under runAsNonRoot; default 10), `FALCON_ANALYZER_STUCK_TERMINATING_SECONDS`
  (a deleted Pod still Terminating releases its slot after this long; default 300),
  `FALCON_ANALYZER_SCRATCH_SIZE` (sizeLimit of each emptyDir; default 2Gi),
  `FALCON_ANALYZER_POD_GRACE_SECONDS` (default 30), `FALCON_ANALYZER_LOG_UPLOAD_SECONDS`
  (seconds between two uploads of output.log; default 10). The Kubernetes API is reached like
  the Lease's (`FALCON_LEASE_IN_CLUSTER`, `FALCON_LEASE_KUBECONFIG`, `FALCON_LEASE_KUBE_CONTEXT`).
- `FALCON_PLUGIN_CATALOG`: the plugin catalog (YAML; default `plugins/catalog.yaml` of the
  repository), read once when the controller starts.
- `FALCON_PLUGIN_DIR`: the folder of plugin executables put first on a run's PATH (default
  `plugins/bin` of the repository).
- `FALCON_ANALYZER_STATE_DIR`: the local backend's run folders (default
  `$FALCON_VAR_DIR/local-analyzer`; docs/analyzer.md, "Runs on the local backend").
- `FALCON_ANALYSIS_OFFLINE_CONCURRENCY`, `FALCON_ANALYSIS_ONLINE_CONCURRENCY`: analyses of each
  queue running at once (defaults 2 and 2).
- `FALCON_ANALYZER_MAX_RUNNING_PER_USER`: analyses of one queue one user (the creator; an
  offline analysis': the experiment's creator) may run at once (default: half the queue's
  slots rounded up); users take turns at free slots (docs/analyzer.md, "Queues").
- `FALCON_ANALYSIS_POLL_SECONDS`: seconds between two offline discovery polls (default 10).
- `FALCON_ANALYSIS_MAX_ATTEMPTS`: runs started for one analysis before recovery gives up
  (default 3); `FALCON_ANALYSIS_BACKOFF_SECONDS` and `FALCON_ANALYSIS_BACKOFF_MAX_SECONDS`: the
  capped exponential back-off between two of them (defaults 2 and 60).
- `FALCON_ANALYSIS_MAX_START_RETRIES`: starts of one run the cluster refused for now (429,
  5xx, no answer) tried again after the same back-off before the analysis fails
  `StartFailed` (default 10); they count no attempt (docs/analyzer.md).
"""
from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from .auth import FALCON_AUTH_MODE, FALCON_INTERNAL_TOKEN
from .base import BASE_DIR, VAR_DIR
from .clusters import FALCON_ARTIFACT_ROOT

FALCON_ANALYZER_ADDR = os.environ.get("FALCON_ANALYZER_ADDR", "127.0.0.1:50052")
FALCON_ANALYZER_TARGET = os.environ.get("FALCON_ANALYZER_TARGET", "127.0.0.1:50052")

_ANALYZER_TOKEN_ENV = os.environ.get("FALCON_ANALYZER_TOKEN", "")
if _ANALYZER_TOKEN_ENV and len(_ANALYZER_TOKEN_ENV) < 32:
    raise ImproperlyConfigured("FALCON_ANALYZER_TOKEN must be at least 32 characters; "
                               "generate one with `openssl rand -hex 32`.")
FALCON_ANALYZER_TOKEN = _ANALYZER_TOKEN_ENV or (
    FALCON_INTERNAL_TOKEN if FALCON_AUTH_MODE == "local" else "")

FALCON_ANALYSIS_BUCKET = os.environ.get("FALCON_ANALYSIS_BUCKET", "").strip()
if FALCON_ANALYSIS_BUCKET and ("/" in FALCON_ANALYSIS_BUCKET or ":" in FALCON_ANALYSIS_BUCKET):
    raise ImproperlyConfigured("FALCON_ANALYSIS_BUCKET must be a bucket name (e.g. "
                               f"falcon-analysis), not a URL; got {FALCON_ANALYSIS_BUCKET!r}.")
FALCON_ANALYSIS_ROOT = os.environ.get("FALCON_ANALYSIS_ROOT", "") or (
    f"gs://{FALCON_ANALYSIS_BUCKET}" if FALCON_ANALYSIS_BUCKET else FALCON_ARTIFACT_ROOT)
FALCON_PLUGIN_CATALOG = os.environ.get("FALCON_PLUGIN_CATALOG",
                                       str(BASE_DIR / "plugins" / "catalog.yaml"))
FALCON_ANALYZER_STATE_DIR = os.environ.get("FALCON_ANALYZER_STATE_DIR",
                                           str(VAR_DIR / "local-analyzer"))
FALCON_PLUGIN_DIR = os.environ.get("FALCON_PLUGIN_DIR", str(BASE_DIR / "plugins" / "bin"))


def _positive(name: str, default: int | float, kind: type = int) -> int | float:
    """The environment variable `name` as a `kind` (int: a whole number >= 1; float: seconds
    > 0), `default` when unset.

    Raises:
        ImproperlyConfigured: any other value, naming the variable and what it must be.
    """
    raw = os.environ.get(name, "")
    try:
        value = kind(raw) if raw else default
    except ValueError:
        value = 0
    if not value > 0:
        what = "a whole number >= 1" if kind is int else "a number of seconds > 0"
        raise ImproperlyConfigured(f"{name} must be {what}; got {raw!r}.")
    return value


FALCON_ANALYSIS_CONCURRENCY = {
    "offline": _positive("FALCON_ANALYSIS_OFFLINE_CONCURRENCY", 2),
    "online": _positive("FALCON_ANALYSIS_ONLINE_CONCURRENCY", 2),
}
# Runs of one queue one user may have at once; unset: half the queue's slots rounded up
# (`controllers.analyzer.controller.AnalyzerConfig.per_user_limits`).
FALCON_ANALYZER_MAX_RUNNING_PER_USER = (
    _positive("FALCON_ANALYZER_MAX_RUNNING_PER_USER", 1)
    if os.environ.get("FALCON_ANALYZER_MAX_RUNNING_PER_USER", "").strip() else None)
FALCON_ANALYSIS_POLL_SECONDS = _positive("FALCON_ANALYSIS_POLL_SECONDS", 10.0, float)
FALCON_ANALYSIS_MAX_ATTEMPTS = _positive("FALCON_ANALYSIS_MAX_ATTEMPTS", 3)
FALCON_ANALYSIS_BACKOFF_SECONDS = _positive("FALCON_ANALYSIS_BACKOFF_SECONDS", 2.0, float)
FALCON_ANALYSIS_BACKOFF_MAX_SECONDS = _positive("FALCON_ANALYSIS_BACKOFF_MAX_SECONDS", 60.0, float)
FALCON_ANALYSIS_MAX_START_RETRIES = _positive("FALCON_ANALYSIS_MAX_START_RETRIES", 10)


FALCON_ANALYZER_BACKEND = os.environ.get("FALCON_ANALYZER_BACKEND", "local").strip() or "local"
if FALCON_ANALYZER_BACKEND not in ("local", "kubernetes"):
    raise ImproperlyConfigured("FALCON_ANALYZER_BACKEND must be `local` or `kubernetes`; got "
                               f"{FALCON_ANALYZER_BACKEND!r}.")
FALCON_ANALYZER_POD = {
    "namespace": os.environ.get("FALCON_ANALYZER_NAMESPACE") or os.environ.get("POD_NAMESPACE")
    or "default",
    "image": os.environ.get("FALCON_ANALYZER_IMAGE", ""),
    "run_as_user": _positive("FALCON_ANALYZER_RUN_AS_USER", 10001),
    "service_account": os.environ.get("FALCON_ANALYZER_SERVICE_ACCOUNT", ""),
    "image_pull_secrets": tuple(s.strip() for s in os.environ.get(
        "FALCON_ANALYZER_IMAGE_PULL_SECRETS", "").split(",") if s.strip()),
    "start_timeout_seconds": _positive("FALCON_ANALYZER_POD_START_TIMEOUT_SECONDS", 300.0, float),
    "config_error_seconds": _positive("FALCON_ANALYZER_POD_CONFIG_ERROR_SECONDS", 10.0, float),
    "stuck_terminating_seconds": _positive("FALCON_ANALYZER_STUCK_TERMINATING_SECONDS", 300.0,
                                           float),
    "scratch_size": os.environ.get("FALCON_ANALYZER_SCRATCH_SIZE", "2Gi"),
    "grace_seconds": _positive("FALCON_ANALYZER_POD_GRACE_SECONDS", 30),
    "log_upload_seconds": _positive("FALCON_ANALYZER_LOG_UPLOAD_SECONDS", 10.0, float),
}
if FALCON_ANALYZER_BACKEND == "kubernetes" and not FALCON_ANALYZER_POD["image"]:
    raise ImproperlyConfigured("FALCON_ANALYZER_BACKEND=kubernetes needs FALCON_ANALYZER_IMAGE "
                               "(the analysis image, e.g. ghcr.io/example/falcon:1.2).")
