"""The plugin catalog: which plugins exist, how to run them, on which artifact types.

The catalog is a YAML file (``plugins/catalog.yaml``, format in docs/plugins.md) read with
PyYAML's ``safe_load``. This module imports no Django.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from kubernetes.utils.quantity import parse_quantity

from .metrics import MetricRule, parse_rules

DEFAULT_CATALOG = Path(__file__).with_name("catalog.yaml")

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# A non-negative Kubernetes quantity: decimal number, optional binary/decimal suffix or exponent.
QUANTITY_RE = re.compile(r"^(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")

FIELDS = ("name", "description", "command", "artifact_types", "resources", "timeout_seconds",
          "inputs", "metrics")
OPTIONAL_FIELDS = frozenset({"inputs", "metrics"})
RESOURCE_KEYS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")


@dataclass(frozen=True)
class Resources:
    """Kubernetes quantities (strings such as ``"500m"``, ``"2Gi"``) of a plugin's container."""

    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str


@dataclass(frozen=True)
class Plugin:
    """One catalog entry.

    ``command`` is run by ``sh -c`` with the plugin folder on PATH; ``artifact_types`` are the
    artifact types offline analysis runs the plugin on; ``timeout_seconds`` is positive;
    ``inputs`` are globs (relative to the artifact, see :func:`glob_matches`) of the files the
    plugin reads: offline analysis starts it only on an artifact holding one (empty: any
    artifact); ``metrics`` are the rules that pick its comparable metrics (`plugins.metrics`;
    empty: the generic rule, records with a ``name``).
    """

    name: str
    description: str
    command: str
    artifact_types: tuple[str, ...]
    resources: Resources
    timeout_seconds: int
    inputs: tuple[str, ...] = ()
    metrics: tuple[MetricRule, ...] = ()

    def reads(self, rel_path: str) -> bool:
        """Whether the artifact file ``rel_path`` (relative, ``/``-separated) is one of the
        plugin's inputs; True for every file when the plugin declares none."""
        return not self.inputs or any(glob_matches(p, rel_path) for p in self.inputs)


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out), re.IGNORECASE | re.DOTALL)


def glob_matches(pattern: str, rel_path: str) -> bool:
    """Whether the relative POSIX path ``rel_path`` matches the glob ``pattern``.

    ``*`` and ``?`` stay within one path component, ``**/`` is any number of leading folders
    (none included), and case is ignored, as the built-in plugins' own file filters ignore it
    (``**/*.json.gz`` matches ``x.json.gz`` and ``a/b/X.JSON.GZ``). ``fnmatch`` lets ``*``
    cross ``/`` and has no ``**``; ``PurePath.full_match`` needs Python 3.13.
    """
    return _glob_regex(pattern).fullmatch(rel_path) is not None


def _where(index: int, entry: Mapping[str, Any]) -> str:
    name = entry.get("name") if isinstance(entry.get("name"), str) else None
    return f"plugin {name!r}" if name else f"plugin #{index + 1}"


def _string(entry: Mapping[str, Any], field: str, where: str) -> str:
    value = entry[field]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {field} must be a non-empty string, got {value!r}")
    return value


def _artifact_types(entry: Mapping[str, Any], where: str) -> tuple[str, ...]:
    value = entry["artifact_types"]
    if (not isinstance(value, list) or not value
            or not all(isinstance(t, str) and t.strip() for t in value)):
        raise ValueError(f"{where}: artifact_types must be a non-empty list of strings, "
                         f"got {value!r}")
    return tuple(value)


def _quantity(value: Any, field: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{where}: resources.{field} must be a Kubernetes quantity, got {value!r}")
    text = str(value)
    if not QUANTITY_RE.fullmatch(text):
        raise ValueError(f"{where}: resources.{field} is not a Kubernetes quantity: {text!r}")
    return text


def _resources(entry: Mapping[str, Any], where: str) -> Resources:
    value = entry["resources"]
    if not isinstance(value, dict):
        raise ValueError(f"{where}: resources must be a mapping, got {value!r}")
    unknown = sorted(set(value) - set(RESOURCE_KEYS))
    missing = [k for k in RESOURCE_KEYS if k not in value]
    if unknown:
        raise ValueError(f"{where}: unknown field resources.{unknown[0]} "
                         f"(known: {', '.join(RESOURCE_KEYS)})")
    if missing:
        raise ValueError(f"{where}: missing field resources.{missing[0]}")
    q = {k: _quantity(value[k], k, where) for k in RESOURCE_KEYS}
    for kind in ("cpu", "memory"):
        if parse_quantity(q[f"{kind}_request"]) > parse_quantity(q[f"{kind}_limit"]):
            raise ValueError(f"{where}: resources.{kind}_request {q[f'{kind}_request']} exceeds "
                             f"resources.{kind}_limit {q[f'{kind}_limit']}")
    return Resources(**q)


def _inputs(entry: Mapping[str, Any], where: str) -> tuple[str, ...]:
    value = entry.get("inputs", [])
    if (not isinstance(value, list)
            or not all(isinstance(p, str) and p.strip() and not p.startswith("/")
                       and ".." not in p.split("/") for p in value)):
        raise ValueError(f"{where}: inputs must be a list of globs relative to the artifact "
                         f"(e.g. '**/*.json'), got {value!r}")
    return tuple(value)


def _timeout(entry: Mapping[str, Any], where: str) -> int:
    value = entry["timeout_seconds"]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: timeout_seconds must be a positive integer, got {value!r}")
    return value


def parse_entry(index: int, entry: Any) -> Plugin:
    """Validate one catalog entry (``index`` is 0-based) and return its Plugin.

    Raises ValueError naming the entry and the field: missing or unknown fields (every field
    but ``inputs`` and ``metrics`` is required), inputs that are not relative globs, a name that is
    not DNS-label-like (``[a-z0-9-]+``), a non-positive timeout, resources that are not
    Kubernetes quantities or whose request exceeds the limit.
    """
    if not isinstance(entry, dict):
        raise ValueError(f"plugin #{index + 1}: must be a mapping, got {entry!r}")
    where = _where(index, entry)
    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(FIELDS)})")
    missing = [f for f in FIELDS if f not in entry and f not in OPTIONAL_FIELDS]
    if missing:
        raise ValueError(f"{where}: missing field {missing[0]!r}")
    name = _string(entry, "name", where)
    if not NAME_RE.fullmatch(name):
        raise ValueError(f"{where}: name must be lowercase letters, digits and '-' "
                         f"(at most 63, no leading or trailing '-'), got {name!r}")
    return Plugin(name=name, description=_string(entry, "description", where),
                  command=_string(entry, "command", where),
                  artifact_types=_artifact_types(entry, where),
                  resources=_resources(entry, where), timeout_seconds=_timeout(entry, where),
                  inputs=_inputs(entry, where),
                  metrics=parse_rules(entry.get("metrics", []), where))


def parse_catalog(document: Any, source: str = "catalog") -> dict[str, Plugin]:
    """Validate a loaded catalog document ``{"plugins": [...]}``; see :func:`load_catalog`."""
    if not isinstance(document, dict) or set(document) != {"plugins"}:
        raise ValueError(f"{source}: must be a mapping with the single key 'plugins'")
    entries = document["plugins"]
    if not isinstance(entries, list):
        raise ValueError(f"{source}: 'plugins' must be a list")
    catalog: dict[str, Plugin] = {}
    for index, entry in enumerate(entries):
        plugin = parse_entry(index, entry)
        if plugin.name in catalog:
            raise ValueError(f"plugin {plugin.name!r} (#{index + 1}): duplicate name")
        catalog[plugin.name] = plugin
    return catalog


def load_catalog(path: str | Path = DEFAULT_CATALOG) -> dict[str, Plugin]:
    """Load and validate the catalog file at ``path``: plugin name -> Plugin, in file order.

    Raises ValueError naming the entry and the field of the first problem (or the YAML error),
    OSError when the file cannot be read.
    """
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from exc
    return parse_catalog(document, str(path))


def plugins_for_artifact_type(catalog: Mapping[str, Plugin], artifact_type: str) -> list[Plugin]:
    """The plugins offline analysis runs on artifacts of ``artifact_type``, in catalog order."""
    return [p for p in catalog.values() if artifact_type in p.artifact_types]
