"""The clusters a resource manager serves and the backend of each (setting `FALCON_CLUSTERS`).

`FALCON_CLUSTERS` maps a `cluster_name` to its backend: `{"local": {"backend": "local",
"state_dir": "var/local-cluster"}}` is the embedded default.
"""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .backends.base import ClusterBackend


def load_backends(names: list[str] | None = None) -> dict[str, ClusterBackend]:
    """Build `{cluster_name: backend}` for the named clusters (all configured ones if None).

    Raises:
        ImproperlyConfigured: a cluster is unknown or its backend kind is not supported.
    """
    clusters = settings.FALCON_CLUSTERS
    names = names or list(clusters)
    backends: dict[str, ClusterBackend] = {}
    for name in names:
        if name not in clusters:
            raise ImproperlyConfigured(
                f"cluster {name!r} is not configured; known clusters: {', '.join(clusters)}")
        spec = clusters[name]
        kind = spec.get("backend")
        if kind == "local":
            from .backends.local import LocalBackend

            backends[name] = LocalBackend(Path(spec.get("state_dir") or
                                               settings.VAR_DIR / "local-cluster" / name))
        else:
            raise ImproperlyConfigured(
                f"cluster {name!r}: backend {kind!r} is not supported; use 'local'")
    return backends
