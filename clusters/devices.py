"""Accelerator types a Kubernetes cluster offers: the ONE table an operator extends.

A TaskSpec names its accelerator with `device_type`, `device_count` and `device_topo` (their
limits: docs/limits.md). This module turns those three fields into what GKE schedules on:

- TPU (GKE "Deploy TPU workloads in GKE Standard", "Plan TPUs in GKE"): each Pod requests
  `google.com/tpu: <chips of its host>` and selects its node pool with the node labels
  `cloud.google.com/gke-tpu-accelerator` (e.g. `tpu-v5p-slice`) and
  `cloud.google.com/gke-tpu-topology` (e.g. `2x2x2`). `device_count` is the chips of ONE replica
  and must equal the product of the topology. A topology larger than one host is a multi-host
  slice: one Pod per host, each requesting that host's chips, addressed through a headless
  Service (the Kubernetes backend creates it).
- GPU (GKE "Run GPUs in GKE Standard node pools"): each Pod requests `nvidia.com/gpu:
  <device_count>` and selects nodes with `cloud.google.com/gke-accelerator` (e.g.
  `nvidia-h100-80gb`). GPUs have no topology; one replica is one Pod on one node.

GKE's ExtendedResourceToleration admission adds the tolerations for the `google.com/tpu` and
`nvidia.com/gpu` taints to Pods that request those resources, so no toleration is listed here.

Operators add or override types in the clusters file (`FALCON_CLUSTERS_FILE`), top level or per
cluster, with the fields of `DeviceType`::

    devices:
      tpu-v7x:
        kind: tpu
        node_selector: {cloud.google.com/gke-tpu-accelerator: tpu7x}
        topology_dims: 3
        chips_per_host: 4
        single_host_max_chips: 4
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TPU_RESOURCE = "google.com/tpu"
GPU_RESOURCE = "nvidia.com/gpu"
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
GPU_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
KINDS = ("tpu", "gpu")


class DeviceConfigError(ValueError):
    """A `devices:` entry of the clusters file is malformed (the message names the entry)."""


@dataclass(frozen=True)
class DeviceType:
    """How one `device_type` is scheduled.

    Attributes:
        name: the TaskSpec `device_type` value, e.g. `tpu-v5p`.
        kind: `tpu` or `gpu`.
        resource: the extended resource a container requests (`google.com/tpu`,
            `nvidia.com/gpu`).
        node_selector: node labels every Pod of this type selects (GKE's accelerator label).
        chips_per_host: chips one host of a multi-host slice offers (TPU), or the most GPUs one
            node offers (GPU).
        single_host_max_chips: the largest slice that fits one host (TPU v5e and v6e have
            8-chip single-host machines but 4-chip hosts in multi-host slices).
        topology_dims: how many dimensions a TPU topology has (3 for v4/v5p, 2 for v5e/v6e);
            0 for GPUs (no topology allowed).
        aliases: other names accepted for `device_type`.
    """

    name: str
    kind: str
    resource: str
    node_selector: Mapping[str, str]
    chips_per_host: int
    single_host_max_chips: int
    topology_dims: int = 0
    aliases: tuple[str, ...] = field(default=())

    def hosts(self, device_count: int) -> int:
        """Return how many hosts (Pods) one replica of `device_count` chips spans.

        Raises:
            ValueError: the count cannot be split into whole hosts.
        """
        if self.kind != "tpu" or device_count <= self.single_host_max_chips:
            return 1
        if device_count % self.chips_per_host:
            raise ValueError(f"{device_count} chips do not split into hosts of "
                             f"{self.chips_per_host} chips")
        return device_count // self.chips_per_host

    def chips_per_pod(self, device_count: int) -> int:
        """Return the chips (or GPUs) each Pod of one replica requests."""
        return device_count // self.hosts(device_count)


def _tpu(name: str, accelerator: str, dims: int, per_host: int, single_max: int,
         aliases: tuple[str, ...] = ()) -> DeviceType:
    return DeviceType(name=name, kind="tpu", resource=TPU_RESOURCE,
                      node_selector={TPU_ACCELERATOR_LABEL: accelerator},
                      chips_per_host=per_host, single_host_max_chips=single_max,
                      topology_dims=dims, aliases=aliases)


def _gpu(name: str, accelerator: str, per_node: int = 8,
         aliases: tuple[str, ...] = ()) -> DeviceType:
    return DeviceType(name=name, kind="gpu", resource=GPU_RESOURCE,
                      node_selector={GPU_ACCELERATOR_LABEL: accelerator},
                      chips_per_host=per_node, single_host_max_chips=per_node, aliases=aliases)


# GKE node labels as documented in "Plan TPUs in GKE" (TPU versions table) and "About GPUs in
# GKE" (accelerator names). Chips per host: v4 and v5p hosts have 4 chips; v5e (ct5lp) and v6e
# (ct6e) single-host machines have up to 8 chips, multi-host slices use 4-chip hosts.
BUILTIN_DEVICES: tuple[DeviceType, ...] = (
    _tpu("tpu-v4", "tpu-v4-podslice", 3, 4, 4),
    _tpu("tpu-v5p", "tpu-v5p-slice", 3, 4, 4),
    _tpu("tpu-v5e", "tpu-v5-lite-podslice", 2, 4, 8,
         aliases=("tpu-v5litepod", "tpu-v5-lite-podslice", "tpu-v5lite")),
    _tpu("tpu-v6e", "tpu-v6e-slice", 2, 4, 8, aliases=("tpu-v6e-slice", "trillium")),
    _gpu("nvidia-tesla-t4", "nvidia-tesla-t4", 4, aliases=("t4",)),
    _gpu("nvidia-l4", "nvidia-l4", 8, aliases=("l4",)),
    _gpu("nvidia-tesla-a100", "nvidia-tesla-a100", 16, aliases=("a100", "a100-40gb")),
    _gpu("nvidia-a100-80gb", "nvidia-a100-80gb", 8, aliases=("a100-80gb",)),
    _gpu("nvidia-h100-80gb", "nvidia-h100-80gb", 8, aliases=("h100",)),
    _gpu("nvidia-h100-mega-80gb", "nvidia-h100-mega-80gb", 8, aliases=("h100-mega",)),
    _gpu("nvidia-h200-141gb", "nvidia-h200-141gb", 8, aliases=("h200",)),
    _gpu("nvidia-b200", "nvidia-b200", 8, aliases=("b200",)),
)


def device_from_config(name: str, raw: Any) -> DeviceType:
    """Build a `DeviceType` from a `devices:` entry of the clusters file.

    Args:
        name: the entry's key (the `device_type` users write).
        raw: mapping with `kind` (tpu|gpu), `node_selector` (mapping, required), and optional
            `resource`, `chips_per_host`, `single_host_max_chips`, `topology_dims`, `aliases`.

    Raises:
        DeviceConfigError: a field is missing or has the wrong type.
    """
    where = f"devices.{name}"
    if not isinstance(raw, Mapping):
        raise DeviceConfigError(f"{where}: must be a mapping")
    unknown = set(raw) - {"kind", "resource", "node_selector", "chips_per_host",
                          "single_host_max_chips", "topology_dims", "aliases"}
    if unknown:
        raise DeviceConfigError(f"{where}: unknown fields {sorted(unknown)}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise DeviceConfigError(f"{where}.kind: must be one of {KINDS}")
    selector = raw.get("node_selector")
    if not isinstance(selector, Mapping) or not selector:
        raise DeviceConfigError(f"{where}.node_selector: a mapping of node labels is required")
    per_host = raw.get("chips_per_host", 4 if kind == "tpu" else 8)
    single = raw.get("single_host_max_chips", per_host)
    dims = raw.get("topology_dims", 2 if kind == "tpu" else 0)
    for key, value in (("chips_per_host", per_host), ("single_host_max_chips", single)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise DeviceConfigError(f"{where}.{key}: must be an integer >= 1")
    if not isinstance(dims, int) or dims < 0 or (kind == "tpu" and dims < 1):
        raise DeviceConfigError(f"{where}.topology_dims: must be an integer >= 1 for a TPU")
    aliases = raw.get("aliases") or ()
    if isinstance(aliases, str) or not all(isinstance(a, str) for a in aliases):
        raise DeviceConfigError(f"{where}.aliases: must be a list of names")
    return DeviceType(name=name, kind=kind,
                      resource=str(raw.get("resource") or
                                   (TPU_RESOURCE if kind == "tpu" else GPU_RESOURCE)),
                      node_selector={str(k): str(v) for k, v in selector.items()},
                      chips_per_host=per_host, single_host_max_chips=single,
                      topology_dims=dims if kind == "tpu" else 0, aliases=tuple(aliases))


class DeviceTable:
    """Look up `DeviceType`s by name or alias: the built-in table plus operator entries.

    Args:
        extra: `{name: devices-entry}` from the clusters file; an entry with a built-in name
            replaces the built-in one.

    Raises:
        DeviceConfigError: an entry is malformed.
    """

    def __init__(self, extra: Mapping[str, Any] | None = None):
        types = {d.name: d for d in BUILTIN_DEVICES}
        for name, raw in (extra or {}).items():
            types[str(name)] = device_from_config(str(name), raw)
        self._by_name: dict[str, DeviceType] = {}
        for device in types.values():
            for key in (device.name, *device.aliases):
                self._by_name[key] = device
        # Names win over aliases when an operator reuses an alias as a new type's name.
        self._by_name.update(types)

    def get(self, name: str) -> DeviceType | None:
        """Return the type called `name` (or with that alias), None when unknown."""
        return self._by_name.get(name)

    def names(self) -> list[str]:
        """Return the primary names of all known types, sorted."""
        return sorted({d.name for d in self._by_name.values()})

    def check(self, *, device_type: str, device_count: int, device_topo: str) -> dict[str, str]:
        """Return `{task_spec field: problem}` for one TaskSpec's device fields ({} = fine).

        Rules: a known `device_type`; for TPUs a topology with the type's number of dimensions
        whose product equals `device_count`, split into whole hosts when it spans several; for
        GPUs no topology and at most one node's GPUs per replica. No device type means a CPU
        task: then a `device_count` or `device_topo` is an error, not silently dropped.
        """
        if not device_type:
            problems = {}
            if device_count:
                problems["device_count"] = ("is set but device_type is empty: name the "
                                            f"accelerator ({', '.join(self.names())}).")
            if device_topo:
                problems["device_topo"] = "is set but device_type is empty."
            return problems
        device = self.get(device_type)
        if device is None:
            return {"device_type": f"{device_type!r} has no mapping on this cluster; known: "
                                   f"{', '.join(self.names())}."}
        if device.kind == "gpu":
            if device_topo:
                return {"device_topo": f"must be empty for the GPU type {device.name}: GPUs "
                                       "have no topology."}
            if device_count > device.chips_per_host:
                return {"device_count": f"{device_count} {device.name} GPUs do not fit one node "
                                        f"(at most {device.chips_per_host}); use more replicas."}
            return {}
        if not device_topo:
            return {"device_topo": f"is required for {device.name}: a "
                                   f"{device.topology_dims}-dimensional topology such as "
                                   f"{'x'.join(['2'] * device.topology_dims)}."}
        dims = [int(d) for d in device_topo.split("x")]
        if len(dims) != device.topology_dims:
            return {"device_topo": f"{device_topo!r} has {len(dims)} dimensions; {device.name} "
                                   f"topologies have {device.topology_dims}."}
        chips = math.prod(dims)
        if chips != device_count:
            return {"device_topo": f"{device_topo!r} is {chips} chips but device_count is "
                                   f"{device_count}: device_count is the chips of one replica "
                                   "and must equal the product of the topology."}
        try:
            device.hosts(device_count)
        except ValueError as exc:
            return {"device_topo": f"{device_topo!r}: {exc}."}
        return {}
