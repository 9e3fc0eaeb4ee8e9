"""The clusters of this deployment, read from the settings (`FALCON_CLUSTERS_FILE`, else the
embedded default `FALCON_CLUSTERS`: one cluster `local` on the local backend).

The Django side of `clusters.config`: the API server's validation and the controllers both ask
here, so they always agree on which clusters exist.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from clusters import validation
from clusters.config import ClusterConfigError, read_clusters


def cluster_specs() -> dict[str, dict[str, Any]]:
    """Return `{cluster_name: entry}` of the configured clusters.

    Raises:
        ImproperlyConfigured: the clusters file cannot be read or is malformed.
    """
    try:
        return read_clusters(getattr(settings, "FALCON_CLUSTERS_FILE", "") or "",
                             settings.FALCON_CLUSTERS)
    except ClusterConfigError as exc:
        raise ImproperlyConfigured(str(exc)) from exc


def known_clusters() -> list[str]:
    """Return the configured cluster names, sorted."""
    return sorted(cluster_specs())


def cluster_problems(cluster_name: str,
                     role_to_task_spec: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Return the errors of running `role_to_task_spec` on `cluster_name` ({} = it can run).

    See `clusters.validation.cluster_problems` for the keys.

    Raises:
        ImproperlyConfigured: the clusters file is unreadable or malformed (a server error).
    """
    try:
        return validation.cluster_problems(cluster_specs(), cluster_name, role_to_task_spec)
    except ClusterConfigError as exc:
        raise ImproperlyConfigured(str(exc)) from exc
