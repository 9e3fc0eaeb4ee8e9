"""The TaskSpec of a Job: the shape rules every cluster needs, checked with no cluster at hand.

A TaskSpec has the fields of a role in the user's `tasks.yaml`: `command`, `replica`, `image`,
`device_count`, `device_type`, `device_topo`, `envs`. Each problem is reported under the path of
the field it concerns, with what to do about it, and all problems are reported at once. The
rules that depend on the cluster (an image and a known device on Kubernetes) are in
`clusters.validation`. The numeric limits are listed in docs/limits.md.

The checks work on the raw mapping (a spec with problems has no typed form); a spec that passes
them becomes a `TaskSpec` (`task_spec_of`), the one form stored and run from then on.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from core.domain.statuses import CONFIG_ENV
from core.domain.taskspec import TaskSpec
from core.limits.jsoninput import has_surrogate, path_part

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
MAX_ENV_NAME_CHARS = 256
# One experiment: at most this many roles (one Job each) and replicas over all its roles.
MAX_ROLES = 64
MAX_TOTAL_REPLICAS = 4096
# What one process receives: `sh -c <command>` plus its environment ("NAME=value\0" for every
# env, CUSTOM_CONFIG_KEY=<config>, and the FALCON_* variables Falcon adds, reserved as
# FALCON_ENV_RESERVE_BYTES: ids, role, replica index and count, a 512-character artifact path).
# Linux's ARG_MAX is a quarter of the stack limit (2 MiB with the default 8 MiB); half of it is
# left to the variables a task inherits (PATH, HOME, ...).
MAX_ENVIRONMENT_BYTES = 1024 * 1024
FALCON_ENV_RESERVE_BYTES = 4096
# The text of all TaskSpecs of one experiment together (commands, env names and values, images,
# device fields), in UTF-8: keeps the largest valid CreateExp body under the 8 MiB request cap.
MAX_TASK_SPECS_BYTES = 4 * 1024 * 1024

RESERVED_ENV_PREFIX = "FALCON_"
TASK_SPEC_FIELDS = ("command", "replica", "image", "device_count", "device_type", "device_topo",
                    "envs")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def kind_of(value: Any) -> str:
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


SURROGATE_PROBLEM = ("holds a lone UTF-16 surrogate (an escape such as \\ud800 that is not "
                     "text); send valid Unicode.")


def _text_problem(value: str, max_bytes: int) -> str | None:
    """Why `value` cannot be passed to a process (NUL byte, surrogate, too long), or None."""
    if "\x00" in value:
        return "contains a NUL character, which no process argument or environment can hold."
    if has_surrogate(value):
        return SURROGATE_PROBLEM
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


def _add(errors: dict[str, list[str]], key: str, message: str) -> None:
    """Append `message` to the problems reported under `key`.

    Args:
        errors: `{error key: [message]}`, updated in place.
        key: the field's path, e.g. `role_to_task_spec.<role>.replica`.
        message: what is wrong and what to do, one sentence.
    """
    errors.setdefault(key, []).append(message)


def _check_unknown_fields(path: str, spec: Mapping[str, Any],
                          errors: dict[str, list[str]]) -> None:
    """Report every key of `spec` that is not a TaskSpec field.

    Args:
        path: the spec's error-key prefix, `role_to_task_spec.<role>`.
        spec: the raw TaskSpec mapping.
        errors: collects `{"<path>.<key>": [message]}`.
    """
    for key in sorted(set(spec) - set(TASK_SPEC_FIELDS), key=str):
        _add(errors, f"{path}.{path_part(key)}",
             f"is not a TaskSpec field; use one of {', '.join(TASK_SPEC_FIELDS)}.")


def _check_command(path: str, spec: Mapping[str, Any],
                   errors: dict[str, list[str]]) -> str | None:
    """Return the `command` (a non-empty shell string of at most `MAX_COMMAND_BYTES`), or None.

    Args:
        path: the spec's error-key prefix, `role_to_task_spec.<role>`.
        spec: the raw TaskSpec mapping.
        errors: collects `{"<path>.command": [message]}` when the command is unusable.
    """
    command = spec.get("command")
    if command is None or (isinstance(command, str) and not command.strip()):
        _add(errors, f"{path}.command", "is required: a non-empty shell command string.")
    elif not isinstance(command, str):
        _add(errors, f"{path}.command", f"must be a shell command string; got {kind_of(command)}. "
             "Join a list with spaces.")
    elif problem := _text_problem(command, MAX_COMMAND_BYTES):
        _add(errors, f"{path}.command",
             f"{problem} Put long scripts in the image or the artifact store.")
    else:
        return command
    return None


def _check_replica(path: str, spec: Mapping[str, Any],
                   errors: dict[str, list[str]]) -> int | None:
    """Return `replica` (default 1; an integer from 1 to `MAX_REPLICA`), or None when invalid.

    Args:
        path: the spec's error-key prefix, `role_to_task_spec.<role>`.
        spec: the raw TaskSpec mapping.
        errors: collects `{"<path>.replica": [message]}`.
    """
    replica = spec.get("replica", 1)
    if not is_int(replica) or not 1 <= replica <= MAX_REPLICA:
        _add(errors, f"{path}.replica",
             f"must be an integer from 1 to {MAX_REPLICA}; got {replica!r}.")
        return None
    return replica


def _check_string(path: str, spec: Mapping[str, Any], key: str,
                  errors: dict[str, list[str]]) -> str | None:
    """Return the optional string field `key` (`image`, `device_type`; null means ""), or None.

    Args:
        path: the spec's error-key prefix, `role_to_task_spec.<role>`.
        spec: the raw TaskSpec mapping.
        key: the field's name.
        errors: collects `{"<path>.<key>": [message]}` when it is not a string.
    """
    value = spec.get(key, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        _add(errors, f"{path}.{key}", f"must be a string; got {kind_of(value)}.")
        return None
    if problem := _text_problem(value, MAX_COMMAND_BYTES):
        _add(errors, f"{path}.{key}", problem)
        return None
    return value


def _check_device_topo(path: str, spec: Mapping[str, Any],
                       errors: dict[str, list[str]]) -> str | None:
    """Return `device_topo` ("" or a topology such as `2x2x2`), or None when malformed.

    Args:
        path: the spec's error-key prefix, `role_to_task_spec.<role>`.
        spec: the raw TaskSpec mapping.
        errors: collects `{"<path>.device_topo": [message]}`.
    """
    topo = spec.get("device_topo", "") or ""
    if not isinstance(topo, str) or (topo and not TOPOLOGY.fullmatch(topo)):
        _add(errors, f"{path}.device_topo",
             f"must look like 2x2x2 (positive integers joined by x); got {topo!r}.")
        return None
    return topo


def _check_device_count(path: str, spec: Mapping[str, Any], device_type: str | None,
                        errors: dict[str, list[str]]) -> int | None:
    """Return `device_count` when it is an integer (even out of range), else None.

    `device_count` is absent (null) when the task uses no accelerator, so a spec read back from
    the API can be sent again as it is; it is required once a device type is set.

    Args:
        path: the spec's error-key prefix, `role_to_task_spec.<role>`.
        spec: the raw TaskSpec mapping.
        device_type: the checked `device_type` ("" or None: no accelerator asked for).
        errors: collects `{"<path>.device_count": [message]}`: missing with a device type,
            or not an integer from 1 to `MAX_DEVICE_COUNT`.
    """
    count = spec.get("device_count")
    if count is None:
        if device_type:
            _add(errors, f"{path}.device_count",
                 "is required when device_type is set: an integer >= 1.")
    elif not is_int(count) or not 1 <= count <= MAX_DEVICE_COUNT:
        _add(errors, f"{path}.device_count",
             f"must be an integer from 1 to {MAX_DEVICE_COUNT}; got {count!r}.")
    return count if is_int(count) else None


def _check_env(field: str, name: Any, value: Any, errors: dict[str, list[str]]) -> str | None:
    """Return one environment variable's value as the string a process sees, or None.

    Args:
        field: the variable's error key, `role_to_task_spec.<role>.envs.<name>`.
        name: the variable's name: a C identifier, neither `CONFIG_ENV` nor `FALCON_*`.
        value: a string, number or boolean of at most `MAX_ENV_VALUE_BYTES` bytes.
        errors: collects `{field: [message]}` for the first problem found.
    """
    if (not isinstance(name, str) or len(name) > MAX_ENV_NAME_CHARS
            or not ENV_NAME.fullmatch(name)):
        _add(errors, field, "is not a valid environment variable name: use letters, digits "
             f"and _, not starting with a digit, at most {MAX_ENV_NAME_CHARS} characters.")
        return None
    if name == CONFIG_ENV or name.startswith(RESERVED_ENV_PREFIX):
        _add(errors, field, f"is reserved: Falcon sets {CONFIG_ENV} from --config and every "
             f"{RESERVED_ENV_PREFIX}* variable itself; rename it.")
        return None
    coerced = _env_value(value)
    if coerced is None:
        _add(errors, field, f"must be a string, number or boolean; got {kind_of(value)}. "
             "Quote structured values as a string (use \"\" for an empty value).")
        return None
    if problem := _text_problem(coerced, MAX_ENV_VALUE_BYTES):
        _add(errors, field, problem)
        return None
    return coerced


def _check_envs(path: str, spec: Mapping[str, Any],
                errors: dict[str, list[str]]) -> dict[str, str]:
    """Return the valid variables of `envs` (at most `MAX_ENVS`), values as strings.

    Args:
        path: the spec's error-key prefix, `role_to_task_spec.<role>`.
        spec: the raw TaskSpec mapping.
        errors: collects `{"<path>.envs": [message]}` when `envs` is not a mapping or is too
            large (no variable is then checked), and `{"<path>.envs.<name>": [message]}` per
            bad variable.
    """
    envs = spec.get("envs")
    if envs is None:  # absent or null: no variables ([] or "" are refused, not taken for {})
        envs = {}
    if not isinstance(envs, Mapping):
        _add(errors, f"{path}.envs", f"must be a mapping of NAME: value; got {kind_of(envs)}.")
        return {}
    if len(envs) > MAX_ENVS:
        _add(errors, f"{path}.envs", f"has {len(envs)} variables; the limit is {MAX_ENVS}.")
        return {}
    clean: dict[str, str] = {}
    for name, value in envs.items():
        coerced = _check_env(f"{path}.envs.{path_part(name)}", name, value, errors)
        if coerced is not None:
            clean[name] = coerced
    return clean


def validate_task_spec(role: str, spec: Any, errors: dict[str, list[str]]) -> dict[str, Any]:
    """Check one role's TaskSpec and return it normalised (defaults filled, envs as strings).

    Every field is checked, so all problems are reported at once; a field with a problem is
    left out of the result (`device_count` is kept when it is an integer).

    Args:
        role: the role name (already checked by the caller).
        spec: the raw spec, expected to be a mapping with the fields of a role in tasks.yaml.
        errors: collects `{"role_to_task_spec.<role>.<field>": [message]}`.
    """
    path = f"role_to_task_spec.{path_part(role)}"
    if not isinstance(spec, Mapping):
        _add(errors, path,
             f"must be a mapping with {', '.join(TASK_SPEC_FIELDS)}; got {kind_of(spec)}.")
        return {}
    _check_unknown_fields(path, spec, errors)
    checked = {
        "command": _check_command(path, spec, errors),
        "replica": _check_replica(path, spec, errors),
        "image": _check_string(path, spec, "image", errors),
        "device_type": _check_string(path, spec, "device_type", errors),
        "device_topo": _check_device_topo(path, spec, errors),
    }
    out: dict[str, Any] = {key: value for key, value in checked.items() if value is not None}
    out["device_count"] = _check_device_count(path, spec, out.get("device_type"), errors)
    out["envs"] = _check_envs(path, spec, errors)
    return out


def task_spec_of(checked: Mapping[str, Any]) -> TaskSpec:
    """Return the `TaskSpec` of a spec `validate_task_spec` checked with no problem.

    Args:
        checked: the normalised mapping `validate_task_spec` returned (every field present).
    """
    return TaskSpec(**checked)


def validate_role(role: Any) -> str | None:
    """Return why `role` cannot name a role, or None when it is a Kubernetes DNS-1123 label.

    Role names become parts of Kubernetes object names (RFC 1123 labels: lowercase letters,
    digits and '-', starting and ending with a letter or digit, at most 63 characters).
    """
    if isinstance(role, str) and len(role) <= DNS1123_LABEL_MAX and DNS1123_LABEL.fullmatch(role):
        return None
    if role == "":
        return "is empty: give the role a name such as main or worker."
    return ("is not a valid role name: use a Kubernetes DNS-1123 label (lowercase letters, "
            "digits and '-', starting and ending with a letter or digit, at most 63 "
            "characters).")


def environment_bytes(spec: Mapping[str, Any], config: str) -> int:
    """Return what one replica of `spec` passes to exec: argv and environment, in bytes.

    `sh\0-c\0<command>\0`, `NAME=value\0` per env, `CUSTOM_CONFIG_KEY=<config>\0`, plus
    `FALCON_ENV_RESERVE_BYTES` for the FALCON_* variables Falcon adds.

    Args:
        spec: a TaskSpec as `validate_task_spec` returns it (valid fields only).
        config: the experiment's config (valid text).
    """
    size = len(b"sh\0-c\0") + len(spec.get("command", "").encode("utf-8")) + 1
    for name, value in (spec.get("envs") or {}).items():
        size += len(name.encode("utf-8")) + 1 + len(str(value).encode("utf-8")) + 1
    size += len(CONFIG_ENV) + 1 + len(config.encode("utf-8")) + 1
    return size + FALCON_ENV_RESERVE_BYTES


def environment_problem(spec: Mapping[str, Any], config: str) -> str | None:
    """Return why one replica of `spec` could not be started (ARG_MAX), or None.

    Args:
        spec: a TaskSpec as `validate_task_spec` returns it.
        config: the experiment's config.
    """
    size = environment_bytes(spec, config)
    if size <= MAX_ENVIRONMENT_BYTES:
        return None
    return (f"the command, the envs and the config ({CONFIG_ENV}) make {size} bytes of "
            f"arguments and environment, {FALCON_ENV_RESERVE_BYTES} of them reserved for the "
            f"FALCON_* variables; the limit is {MAX_ENVIRONMENT_BYTES} bytes, so it is "
            f"{size - MAX_ENVIRONMENT_BYTES} bytes over and no process could be started. Put "
            "large values in files (in the image or the artifact store) instead.")


def spec_text_bytes(spec: Mapping[str, Any]) -> int:
    """Return the UTF-8 size of a checked TaskSpec's text (command, envs, image, device)."""
    size = sum(len(str(spec.get(key) or "").encode("utf-8"))
               for key in ("command", "image", "device_type", "device_topo"))
    for name, value in (spec.get("envs") or {}).items():
        size += len(name.encode("utf-8")) + len(str(value).encode("utf-8"))
    return size


def experiment_size_problems(specs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Return the limits of one experiment's roles together that `specs` passes.

    Checks the number of roles (`MAX_ROLES`), the replicas over all roles
    (`MAX_TOTAL_REPLICAS`) and the text of all TaskSpecs (`MAX_TASK_SPECS_BYTES`).

    Args:
        specs: `{role: TaskSpec}` as `validate_task_spec` returns them (all of the experiment's).

    Returns:
        `{"role_to_task_spec": [message]}`, empty when every limit holds.
    """
    problems: list[str] = []
    if len(specs) > MAX_ROLES:
        problems.append(f"has {len(specs)} roles; the limit is {MAX_ROLES}, so "
                        f"{len(specs) - MAX_ROLES} too many. Split the experiment.")
    replicas = sum(spec.get("replica") or 0 for spec in specs.values())
    if replicas > MAX_TOTAL_REPLICAS:
        problems.append(f"asks for {replicas} replicas over all roles; the limit is "
                        f"{MAX_TOTAL_REPLICAS}, so {replicas - MAX_TOTAL_REPLICAS} too many.")
    size = sum(spec_text_bytes(spec) for spec in specs.values())
    if size > MAX_TASK_SPECS_BYTES:
        problems.append(f"holds {size} bytes of text (commands, envs, images); the limit is "
                        f"{MAX_TASK_SPECS_BYTES} bytes, so it is {size - MAX_TASK_SPECS_BYTES} "
                        "bytes over. Move large values into the artifact store.")
    return {"role_to_task_spec": problems} if problems else {}
