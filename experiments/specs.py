"""Validation of CreateExp input: names, the role -> TaskSpec map, envs and the config.

These are domain rules, shared by every interface (HTTP, gRPC, admin, CLI-side pre-checks go
through the API). Each problem is reported under the path of the field it concerns, with what
to do about it, and all problems are reported at once.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from core.errors import PayloadTooLarge, ValidationFailed

# Kubernetes DNS-1123 label (RFC 1123): role names become parts of Kubernetes object names.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MAX = 63
# POSIX portable environment variable names (IEEE Std 1003.1, 8.1), as Kubernetes accepts them
# in `env[].name` when they are C identifiers.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
EXP_TYPE = re.compile(r"^[a-z][a-z0-9_-]*$")
TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)*$")

# Upper bounds that keep one request from exhausting the cluster or the controller: a local
# replica is a process, a Kubernetes replica a pod; the command and each env value travel in a
# process's argv/environment, which Linux caps (ARG_MAX; one string at most 128 KiB).
MAX_REPLICA = 1024
MAX_DEVICE_COUNT = 4096
MAX_COMMAND_BYTES = 64 * 1024
MAX_ENV_VALUE_BYTES = 64 * 1024
MAX_ENVS = 256

CONFIG_ENV = "CUSTOM_CONFIG_KEY"
RESERVED_ENV_PREFIX = "FALCON_"
TASK_SPEC_FIELDS = ("command", "replica", "image", "device_count", "device_type", "device_topo",
                    "envs")


def _is_int(value: Any) -> bool:
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
    if not _is_int(replica) or not 1 <= replica <= MAX_REPLICA:
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
    elif not _is_int(count) or not 1 <= count <= MAX_DEVICE_COUNT:
        errors.setdefault(f"{path}.device_count", []).append(
            f"must be an integer from 1 to {MAX_DEVICE_COUNT}; got {count!r}.")
    out["device_count"] = count if _is_int(count) else None

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


def validate_create(*, name: Any, cluster_name: Any, exp_type: Any, role_to_task_spec: Any,
                    config: Any, priority: Any) -> dict[str, Any]:
    """Validate every CreateExp field and return them normalised.

    `cluster_name` must name a cluster of the clusters file (`controllers.clusters`), and each
    TaskSpec must be runnable there (`ClusterBackend.validate`: on Kubernetes an image, a known
    device type, a topology matching `device_count`).

    Raises:
        PayloadTooLarge: `config` is over `FALCON_CONFIG_MAX_BYTES` (just under 128 KiB) in
            UTF-8 (HTTP 413).
        ValidationFailed: any other field is missing or malformed, the cluster is unknown (the
            message lists the known clusters), or a TaskSpec cannot run on it; `errors` names
            each field (`cluster_name`, `role_to_task_spec.<role>.<field>`).
    """
    errors: dict[str, list[str]] = {}

    def need_str(field: str, value: Any, pattern: re.Pattern, hint: str, max_len: int = 255):
        if not isinstance(value, str) or not value:
            errors.setdefault(field, []).append(f"is required: {hint}.")
        elif len(value) > max_len or not pattern.match(value):
            errors.setdefault(field, []).append(f"{value!r} is not valid: {hint}.")

    need_str("name", name, NAME,
             "letters, digits, '.', '_' or '-', starting with a letter or digit, "
             "at most 128 characters", max_len=128)
    need_str("cluster_name", cluster_name, NAME,
             "the name of a configured cluster (letters, digits, '.', '_', '-')")
    need_str("exp_type", exp_type, EXP_TYPE,
             "a lowercase type such as profiling or benchmark", max_len=63)

    if config is None:
        config = ""
    if not isinstance(config, str):
        errors.setdefault("config", []).append(
            "must be a string: send the config file's text unparsed.")
    elif "\x00" in config:
        errors.setdefault("config", []).append(
            f"contains a NUL character; it is given to tasks as {CONFIG_ENV}, an environment "
            "variable, which cannot hold one. Send a text file.")
    elif len(config.encode("utf-8")) > settings.FALCON_CONFIG_MAX_BYTES:
        raise PayloadTooLarge({"config": [
            f"is {len(config.encode('utf-8'))} bytes; the limit is "
            f"{settings.FALCON_CONFIG_MAX_BYTES} bytes, because tasks receive it as the "
            f"environment variable {CONFIG_ENV} and Linux caps one at 128 KiB. Keep large data "
            "in the artifact store and reference it from the config."]})

    if priority is None:
        priority = -1
    if not _is_int(priority):
        errors.setdefault("priority", []).append(f"must be an integer; got {priority!r}.")

    specs: dict[str, Any] = {}
    if not isinstance(role_to_task_spec, Mapping) or not role_to_task_spec:
        errors.setdefault("role_to_task_spec", []).append(
            "is required: a non-empty mapping of role name to TaskSpec, e.g. "
            "{main: {command: ..., replica: 1}}.")
    else:
        for role, spec in role_to_task_spec.items():
            if (not isinstance(role, str) or len(role) > DNS1123_LABEL_MAX
                    or not DNS1123_LABEL.match(role)):
                errors.setdefault(f"role_to_task_spec.{role}", []).append(
                    "is not a valid role name: use a Kubernetes DNS-1123 label (lowercase "
                    "letters, digits and '-', starting and ending with a letter or digit, at "
                    "most 63 characters).")
                continue
            specs[role] = validate_task_spec(role, spec, errors)

    if "cluster_name" not in errors and isinstance(cluster_name, str):
        # The cluster must exist in the clusters file and accept each TaskSpec (a Kubernetes
        # cluster needs an image and a mapped device type); checked here, at CreateExp, not
        # discovered later by a failing cluster Job. A problem the shape rules above already
        # reported for a field is not repeated.
        from controllers.clusters import cluster_problems

        for key, messages in cluster_problems(cluster_name, specs).items():
            if key not in errors:
                errors[key] = messages

    if errors:
        raise ValidationFailed(errors)
    return {"name": name, "cluster_name": cluster_name, "exp_type": exp_type,
            "role_to_task_spec": specs, "config": config, "priority": priority}
