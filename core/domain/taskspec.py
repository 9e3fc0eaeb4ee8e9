"""`TaskSpec`: one role of the user's `tasks.yaml`, typed, as CreateExp accepted it.

The shape rules live in `jobs.specs` (and the per-cluster ones in `clusters.validation`); once
they hold, the validator builds a `TaskSpec`, and everything after it (the services that store
it, the cluster backends that turn it into processes or Pods) reads typed fields instead of a
`dict[str, Any]`. The database, REST and gRPC keep the JSON object they always had:
`to_json()` writes it, `from_json()` reads it back (docs/decisions.md, `dec-typed-task-spec`).

Django-free: the controllers, which reach data only over gRPC, build it from `task_spec_json`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# The stored JSON object's keys, in the order CreateExp has always written them.
FIELDS = ("command", "replica", "image", "device_type", "device_topo", "device_count", "envs")


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A validated TaskSpec: the command each replica runs, how many, where, with what.

    Attributes:
        command: the shell command (`sh -c`), non-empty once validated.
        replica: how many replicas (processes, or Pods per host) run the command.
        image: the container image ("" on a cluster that needs none, e.g. local).
        device_type: the accelerator type from the cluster's device table ("" for none).
        device_topo: the accelerator topology such as `2x2x2` ("" for none).
        device_count: accelerators per replica, None when `device_type` is "".
        envs: the task's environment variables, values as the strings a process sees
            (read-only).
    """

    command: str = ""
    replica: int = 1
    image: str = ""
    device_type: str = ""
    device_topo: str = ""
    device_count: int | None = None
    envs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not isinstance(self.envs, MappingProxyType):
            object.__setattr__(self, "envs", MappingProxyType(dict(self.envs)))

    def __reduce__(self):
        """Pickle as the fields with `envs` a plain dict (a read-only mapping cannot be
        pickled): a `TaskSpec` crosses process boundaries (multiprocessing) whole."""
        return (type(self), (self.command, self.replica, self.image, self.device_type,
                             self.device_topo, self.device_count, dict(self.envs)))

    def to_json(self) -> dict[str, Any]:
        """Return the JSON object stored in `Job.task_spec` and `Experiment.role_to_task_spec`
        (every field, in `FIELDS` order, `envs` a plain dict)."""
        return {"command": self.command, "replica": self.replica, "image": self.image,
                "device_type": self.device_type, "device_topo": self.device_topo,
                "device_count": self.device_count, "envs": dict(self.envs)}

    @classmethod
    def from_json(cls, value: Any) -> TaskSpec:
        """Read a stored TaskSpec JSON object back (absent fields take their defaults).

        Stored specs were validated when they were written; a row changed behind Falcon's
        back is refused field by field rather than carried as a wrong type.

        Raises:
            ValueError: `value` is not a mapping, or a field has the wrong kind (the message
                names it).
        """
        # `type(...) is dict` first: a decoded JSON object, without the ABC's slower check (a
        # resource manager reads 100,000 of these a tick).
        if type(value) is not dict and not isinstance(value, Mapping):
            raise ValueError(f"a TaskSpec must be a JSON object; got {type(value).__name__}")
        get = value.get
        command, image = get("command") or "", get("image") or ""
        device_type, device_topo = get("device_type") or "", get("device_topo") or ""
        if not (type(command) is type(image) is type(device_type) is type(device_topo) is str):
            for key, got in (("command", command), ("image", image),
                             ("device_type", device_type), ("device_topo", device_topo)):
                if type(got) is not str:
                    raise ValueError(f"TaskSpec field {key} must be a string; got {got!r}")
        replica = get("replica")
        if replica is None:
            replica = 1
        elif type(replica) is not int:
            raise ValueError(f"TaskSpec field replica must be an integer; got {replica!r}")
        count = get("device_count")
        if count is not None and type(count) is not int:
            raise ValueError(f"TaskSpec field device_count must be an integer; got {count!r}")
        envs = get("envs") or {}
        if type(envs) is not dict and not isinstance(envs, Mapping):
            raise ValueError(f"TaskSpec field envs must be a mapping; got {envs!r}")
        # Values stored before they were text are made text.
        if envs and not all(type(v) is str for v in envs.values()):
            envs = {str(k): str(v) for k, v in envs.items()}
        return cls(command, replica, image, device_type, device_topo, count,
                   MappingProxyType(dict(envs)))


# What a job view carries when its read did not include the spec (the exp controller's).
EMPTY = TaskSpec()
