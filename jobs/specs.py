"""The TaskSpec of a Job: the shape rules every cluster needs, checked with no cluster at hand.

A TaskSpec has the fields of a role in the user's `tasks.yaml`: `command`, `replica`, `image`,
`device_count`, `device_type`, `device_topo`, `envs`. Each problem is reported under the path of
the field it concerns, with what to do about it, and all problems are reported at once. The
rules that depend on the cluster (an image and a known device on Kubernetes) are in
`clusters.validation`. The numeric limits are listed in docs/limits.md.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from core.statuses import CONFIG_ENV

# Kubernetes DNS-1123 label (RFC 1123): role names become parts of Kubernetes object names.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MAX = 63
# POSIX portable environment variable names (IEEE Std 1003.1, 8.1), as Kubernetes accepts them
# in `env[].name` when they are C identifiers.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)*$")

# Upper bounds that keep one request from exhausting the cluster or the controller: a local
# replica is a process, a Kubernetes replica a pod; the command and each env value travel in a
# process's argv/environment, which Linux caps (ARG_MAX; one string at most 128 KiB).
MAX_REPLICA = 1024
MAX_DEVICE_COUNT = 4096
MAX_COMMAND_BYTES = 64 * 1024
MAX_ENV_VALUE_BYTES = 64 * 1024
MAX_ENVS = 256

RESERVED_ENV_PREFIX = "FALCON_"
TASK_SPEC_FIELDS = ("command", "replica", "image", "device_count", "device_type", "device_topo",
                    "envs")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    """Name a JSON/YAML value's kind for a message ("a list", "null"), not a Python type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def _text_problem(value: str, max_bytes: int) -> str | None:
    """Why `value` cannot be passed to a process (NUL byte, too long), or None."""
    if "\x00" in value:
        return "contains a NUL character, which no process argument or environment can hold."
    size = len(value.encode("utf-8"))
    if size > max_bytes:
        return f"is {size} bytes; the limit is {max_bytes} bytes."
    return None


def _env_value(value: Any) -> str | None:
    """Coerce a scalar env value to the string a process sees; None for maps and lists."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def validate_task_spec(role: str, spec: Any, errors: dict[str, list[str]]) -> dict[str, Any]:
    """Check one role's TaskSpec and return it normalised (defaults filled, envs as strings).

    Args:
        role: the role name (already checked by the caller).
        spec: the raw spec, expected to be a mapping with the fields of seed 3.3.4's tasks.yaml.
        errors: collects `{"role_to_task_spec.<role>.<field>": [message]}`.
    """
    path = f"role_to_task_spec.{role}"
    if not isinstance(spec, Mapping):
        errors.setdefault(path, []).append(
            f"must be a mapping with {', '.join(TASK_SPEC_FIELDS)}; got {_kind(spec)}.")
        return {}
    unknown = sorted(set(spec) - set(TASK_SPEC_FIELDS))
    for key in unknown:
        errors.setdefault(f"{path}.{key}", []).append(
            f"is not a TaskSpec field; use one of {', '.join(TASK_SPEC_FIELDS)}.")

    out: dict[str, Any] = {}
    command = spec.get("command")
    if command is None or (isinstance(command, str) and not command.strip()):
        errors.setdefault(f"{path}.command", []).append(
            "is required: a non-empty shell command string.")
    elif not isinstance(command, str):
        errors.setdefault(f"{path}.command", []).append(
            f"must be a shell command string; got {_kind(command)}. Join a list with spaces.")
    elif problem := _text_problem(command, MAX_COMMAND_BYTES):
        errors.setdefault(f"{path}.command", []).append(
            f"{problem} Put long scripts in the image or the artifact store.")
    else:
        out["command"] = command

    replica = spec.get("replica", 1)
    if not is_int(replica) or not 1 <= replica <= MAX_REPLICA:
        errors.setdefault(f"{path}.replica", []).append(
            f"must be an integer from 1 to {MAX_REPLICA}; got {replica!r}.")
    else:
        out["replica"] = replica

    for key in ("image", "device_type"):
        value = spec.get(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            errors.setdefault(f"{path}.{key}", []).append(f"must be a string; got {_kind(value)}.")
        else:
            out[key] = value

    topo = spec.get("device_topo", "") or ""
    if not isinstance(topo, str) or (topo and not TOPOLOGY.match(topo)):
        errors.setdefault(f"{path}.device_topo", []).append(
            f"must look like 2x2x2 (positive integers joined by x); got {topo!r}.")
    else:
        out["device_topo"] = topo

    # device_count is absent (null) when the task uses no accelerator, so a spec read back from
    # the API can be sent again as it is.
    count = spec.get("device_count")
    if count is None:
        if out.get("device_type"):
            errors.setdefault(f"{path}.device_count", []).append(
                "is required when device_type is set: an integer >= 1.")
    elif not is_int(count) or not 1 <= count <= MAX_DEVICE_COUNT:
        errors.setdefault(f"{path}.device_count", []).append(
            f"must be an integer from 1 to {MAX_DEVICE_COUNT}; got {count!r}.")
    out["device_count"] = count if is_int(count) else None

    envs = spec.get("envs") or {}
    if not isinstance(envs, Mapping):
        errors.setdefault(f"{path}.envs", []).append(
            f"must be a mapping of NAME: value; got {_kind(envs)}.")
        envs = {}
    elif len(envs) > MAX_ENVS:
        errors.setdefault(f"{path}.envs", []).append(
            f"has {len(envs)} variables; the limit is {MAX_ENVS}.")
        envs = {}
    clean_envs: dict[str, str] = {}
    for name, value in envs.items():
        field = f"{path}.envs.{name}"
        if not isinstance(name, str) or not ENV_NAME.match(name):
            errors.setdefault(field, []).append(
                "is not a valid environment variable name: use letters, digits and _, "
                "not starting with a digit.")
            continue
        if name == CONFIG_ENV or name.startswith(RESERVED_ENV_PREFIX):
            errors.setdefault(field, []).append(
                f"is reserved: Falcon sets {CONFIG_ENV} from --config and every "
                f"{RESERVED_ENV_PREFIX}* variable itself; rename it.")
            continue
        coerced = _env_value(value)
        if coerced is None:
            errors.setdefault(field, []).append(
                f"must be a string, number or boolean; got {_kind(value)}. "
                "Quote structured values as a string (use \"\" for an empty value).")
            continue
        if problem := _text_problem(coerced, MAX_ENV_VALUE_BYTES):
            errors.setdefault(field, []).append(problem)
            continue
        clean_envs[name] = coerced
    out["envs"] = clean_envs
    return out


def validate_role(role: Any) -> str | None:
    """Return why `role` cannot name a role, or None when it is a Kubernetes DNS-1123 label.

    Role names become parts of Kubernetes object names (RFC 1123 labels: lowercase letters,
    digits and '-', starting and ending with a letter or digit, at most 63 characters).
    """
    if isinstance(role, str) and len(role) <= DNS1123_LABEL_MAX and DNS1123_LABEL.match(role):
        return None
    return ("is not a valid role name: use a Kubernetes DNS-1123 label (lowercase letters, "
            "digits and '-', starting and ending with a letter or digit, at most 63 "
            "characters).")
