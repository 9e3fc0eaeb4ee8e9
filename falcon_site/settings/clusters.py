"""Cluster and artifact settings: where experiments run and where they write.

Environment variables:

- `FALCON_CLUSTERS_FILE`: the clusters file (YAML, see `clusters/config.py`) mapping each
  `cluster_name` to its backend; the API server and the resource manager read the same file.
  Unset: `FALCON_CLUSTERS` below, one cluster `local` whose replicas are local processes with
  their state under `$FALCON_VAR_DIR/local-cluster`.
- `FALCON_ARTIFACT_ROOT`: where experiments write, e.g. `gs://bucket/falcon` or
  `file:///data` (default `file://$FALCON_VAR_DIR/artifacts`).
- `FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER`: `1` lets a server that more than one person can
  authenticate to (`FALCON_AUTH_MODE=cloudflare`, or `FALCON_LOCAL_ALLOW_NONLOOPBACK=1`) run a
  local cluster or `FALCON_ANALYZER_BACKEND=local`: every user's code then runs as this server's
  OS user and can read its secrets and database (`core.processes.user_code`). `0` or unset: refused.

`FALCON_CONFIG_MAX_BYTES` (not configurable) is the largest experiment config accepted, in bytes.
"""
from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from core.domain.statuses import CONFIG_ENV

from .base import VAR_DIR

FALCON_CLUSTERS_FILE = os.environ.get("FALCON_CLUSTERS_FILE", "")
FALCON_CLUSTERS = {"local": {"backend": "local", "state_dir": str(VAR_DIR / "local-cluster")}}

_UNSAFE_USER_CODE = os.environ.get("FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER", "").strip()
if _UNSAFE_USER_CODE not in ("", "0", "1"):
    # Exact values only: a typo such as `yes` or `true ` must not silently mean either answer.
    raise ImproperlyConfigured(
        f"FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER={_UNSAFE_USER_CODE!r} is not 0, 1 or empty. "
        "1 means every user's code (tasks on a local cluster, local analysis scripts) runs as "
        "this server's OS user and can read its secrets and database; leave it unset and use "
        "Kubernetes clusters and FALCON_ANALYZER_BACKEND=kubernetes instead.")
# Checked by `core.processes.user_code`, which every process that runs or accepts user code calls.
FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER = _UNSAFE_USER_CODE == "1"

FALCON_ARTIFACT_ROOT = os.environ.get(
    "FALCON_ARTIFACT_ROOT", (VAR_DIR / "artifacts").resolve().as_uri()
)
# The config reaches every task as the environment variable CUSTOM_CONFIG_KEY, and Linux caps one
# environment string, "NAME=value" and its NUL, at MAX_ARG_STRLEN = 32 pages = 128 KiB
# (execve(2)): a larger config would be accepted and then fail every task with E2BIG.
FALCON_CONFIG_MAX_BYTES = 128 * 1024 - len(f"{CONFIG_ENV}=") - 1
