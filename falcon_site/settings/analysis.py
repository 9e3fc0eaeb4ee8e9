"""Settings of the Data Analyzer: the analyzer controller's address, queues, plugins and store.

Environment variables:

- `FALCON_ANALYZER_ADDR`: where the analyzer controller's gRPC server (AnalyzerService)
  listens (default `127.0.0.1:50052`).
- `FALCON_ANALYZER_TARGET`: where the API server reaches it (default `127.0.0.1:50052`).
- `FALCON_ANALYZER_TOKEN`: the shared secret the API server sends to AnalyzerService and the
  controller checks, at least 32 characters; in the local mode it defaults to the internal token
  (`FALCON_INTERNAL_TOKEN`). docs/decisions.md#dec-analyzer-auth says why a shared secret.
- `FALCON_ANALYSIS_ROOT`: the store root of analysis outputs; an analysis writes under
  `{root}/analysis/{exp-id}/{analysis-id}/` (default: `FALCON_ARTIFACT_ROOT`).
- `FALCON_PLUGIN_CATALOG`: the plugin catalog (YAML; default `plugins/catalog.yaml` of the
  repository), read once when the controller starts.
- `FALCON_PLUGIN_DIR`: the folder of plugin executables put first on a run's PATH (default
  `plugins/bin` of the repository).
- `FALCON_ANALYZER_STATE_DIR`: the local backend's run folders (default
  `$FALCON_VAR_DIR/local-analyzer`; docs/analyzer.md, "Runs on the local backend").
- `FALCON_ANALYSIS_OFFLINE_CONCURRENCY`, `FALCON_ANALYSIS_ONLINE_CONCURRENCY`: analyses of each
  queue running at once (defaults 2 and 2).
- `FALCON_ANALYSIS_POLL_SECONDS`: seconds between two offline discovery polls (default 10).
- `FALCON_ANALYSIS_MAX_ATTEMPTS`: runs started for one analysis before recovery gives up
  (default 3); `FALCON_ANALYSIS_BACKOFF_SECONDS` and `FALCON_ANALYSIS_BACKOFF_MAX_SECONDS`: the
  capped exponential back-off between two of them (defaults 2 and 60).
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

FALCON_ANALYSIS_ROOT = os.environ.get("FALCON_ANALYSIS_ROOT", "") or FALCON_ARTIFACT_ROOT
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
FALCON_ANALYSIS_POLL_SECONDS = _positive("FALCON_ANALYSIS_POLL_SECONDS", 10.0, float)
FALCON_ANALYSIS_MAX_ATTEMPTS = _positive("FALCON_ANALYSIS_MAX_ATTEMPTS", 3)
FALCON_ANALYSIS_BACKOFF_SECONDS = _positive("FALCON_ANALYSIS_BACKOFF_SECONDS", 2.0, float)
FALCON_ANALYSIS_BACKOFF_MAX_SECONDS = _positive("FALCON_ANALYSIS_BACKOFF_MAX_SECONDS", 60.0, float)
