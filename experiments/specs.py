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

from falcon_site.errors import PayloadTooLarge, ValidationFailed

# Kubernetes DNS-1123 label (RFC 1123): role names become parts of Kubernetes object names.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MAX = 63
# POSIX portable environment variable names (IEEE Std 1003.1, 8.1), as Kubernetes accepts them
# in `env[].name` when they are C identifiers.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
EXP_TYPE = re.compile(r"^[a-z][a-z0-9_-]*$")
TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)*$")

CONFIG_ENV = "CUSTOM_CONFIG_KEY"
RESERVED_ENV_PREFIX = "FALCON_"
TASK_SPEC_FIELDS = ("command", "replica", "image", "device_count", "device_type", "device_topo",
                    "envs")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
            f"must be a mapping with {', '.join(TASK_SPEC_FIELDS)}; got {type(spec).__name__}.")
        return {}
    unknown = sorted(set(spec) - set(TASK_SPEC_FIELDS))
    for key in unknown:
        errors.setdefault(f"{path}.{key}", []).append(
            f"is not a TaskSpec field; use one of {', '.join(TASK_SPEC_FIELDS)}.")

    out: dict[str, Any] = {}
    command = spec.get("command")
    if not isinstance(command, str) or not command.strip():
        errors.setdefault(f"{path}.command", []).append(
            "is required: a non-empty shell command string.")
    else:
        out["command"] = command

    replica = spec.get("replica", 1)
    if not _is_int(replica) or replica < 1:
        errors.setdefault(f"{path}.replica", []).append(
            f"must be an integer >= 1; got {replica!r}.")
    else:
        out["replica"] = replica

    for key in ("image", "device_type"):
        value = spec.get(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            errors.setdefault(f"{path}.{key}", []).append(f"must be a string; got {value!r}.")
        else:
            out[key] = value

    topo = spec.get("device_topo", "") or ""
    if not isinstance(topo, str) or (topo and not TOPOLOGY.match(topo)):
        errors.setdefault(f"{path}.device_topo", []).append(
            f"must look like 2x2x2 (positive integers joined by x); got {topo!r}.")
    else:
        out["device_topo"] = topo

    count = spec.get("device_count")
    if count is None:
        count = 0
        if out.get("device_type"):
            errors.setdefault(f"{path}.device_count", []).append(
                "is required when device_type is set: an integer >= 1.")
    elif not _is_int(count) or count < 1:
        errors.setdefault(f"{path}.device_count", []).append(
            f"must be an integer >= 1; got {count!r}.")
    out["device_count"] = count if _is_int(count) else 0

    envs = spec.get("envs") or {}
    if not isinstance(envs, Mapping):
        errors.setdefault(f"{path}.envs", []).append(
            f"must be a mapping of NAME: value; got {type(envs).__name__}.")
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
                f"must be a string, number or boolean; got a {type(value).__name__}. "
                "Quote structured values as a string.")
            continue
        clean_envs[name] = coerced
    out["envs"] = clean_envs
    return out


def validate_create(*, name: Any, cluster_name: Any, exp_type: Any, role_to_task_spec: Any,
                    config: Any, priority: Any) -> dict[str, Any]:
    """Validate every CreateExp field and return them normalised.

    Raises:
        PayloadTooLarge: `config` is over `FALCON_CONFIG_MAX_BYTES` (1 MiB) in UTF-8 (HTTP 413).
        ValidationFailed: any other field is missing or malformed; `errors` names each field.
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
    elif len(config.encode("utf-8")) > settings.FALCON_CONFIG_MAX_BYTES:
        raise PayloadTooLarge({"config": [
            f"is {len(config.encode('utf-8'))} bytes; the limit is "
            f"{settings.FALCON_CONFIG_MAX_BYTES} bytes (1 MiB). Keep large data in the "
            "artifact store and reference it from the config."]})

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

    if errors:
        raise ValidationFailed(errors)
    return {"name": name, "cluster_name": cluster_name, "exp_type": exp_type,
            "role_to_task_spec": specs, "config": config, "priority": priority}
