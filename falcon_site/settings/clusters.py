"""Cluster and artifact settings: where experiments run and where they write.

Environment variables:

- `FALCON_CLUSTERS_FILE`: the clusters file (YAML, see `clusters/config.py`) mapping each
  `cluster_name` to its backend; the API server and the resource manager read the same file.
  Unset: `FALCON_CLUSTERS` below, one cluster `local` whose replicas are local processes with
  their state under `$FALCON_VAR_DIR/local-cluster`.
- `FALCON_ARTIFACT_ROOT`: where experiments write, e.g. `gs://bucket/falcon` or
  `file:///data` (default `file://$FALCON_VAR_DIR/artifacts`).

`FALCON_CONFIG_MAX_BYTES` (not configurable) is the largest experiment config accepted, in bytes.
"""
from __future__ import annotations

import os

from core.statuses import CONFIG_ENV

from .base import VAR_DIR

FALCON_CLUSTERS_FILE = os.environ.get("FALCON_CLUSTERS_FILE", "")
FALCON_CLUSTERS = {"local": {"backend": "local", "state_dir": str(VAR_DIR / "local-cluster")}}

FALCON_ARTIFACT_ROOT = os.environ.get(
    "FALCON_ARTIFACT_ROOT", (VAR_DIR / "artifacts").resolve().as_uri()
)
# The config reaches every task as the environment variable CUSTOM_CONFIG_KEY, and Linux caps one
# environment string, "NAME=value" and its NUL, at MAX_ARG_STRLEN = 32 pages = 128 KiB
# (execve(2)): a larger config would be accepted and then fail every task with E2BIG.
FALCON_CONFIG_MAX_BYTES = 128 * 1024 - len(f"{CONFIG_ENV}=") - 1
