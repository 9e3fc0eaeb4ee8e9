"""Validation of CreateExp input: the experiment's name, cluster, type, priority and config, and
its role -> TaskSpec map (each TaskSpec by `jobs.specs`, then against the cluster).

These are domain rules, shared by every interface (HTTP, gRPC, admin). Each problem is reported
under the path of the field it concerns, with what to do about it, and all problems are reported
at once. The limits are listed in docs/limits.md.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from core.cluster_settings import cluster_problems
from core.errors import PayloadTooLarge, ValidationFailed
from core.limits.jsoninput import has_surrogate, path_part
from core.domain.statuses import CONFIG_ENV
from jobs.specs import (
    MAX_ROLES, environment_problem, experiment_size_problems, is_int, task_spec_of,
    validate_role, validate_task_spec,
)

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
EXP_TYPE = re.compile(r"^[a-z][a-z0-9_-]*$")
# `priority` is a 32-bit column (IntegerField) and an `int32` gRPC field: the narrower of both.
PRIORITY_MIN = -2**31
PRIORITY_MAX = 2**31 - 1


def validate_create(*, name: Any, cluster_name: Any, exp_type: Any, role_to_task_spec: Any,
                    config: Any, priority: Any) -> dict[str, Any]:
    """Validate every CreateExp field and return them normalised, each TaskSpec a `TaskSpec`.

    `cluster_name` must name a cluster of the clusters file (`core.cluster_settings`), and
    each TaskSpec must be runnable there (`clusters.validation`: on Kubernetes an image, a known
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
        elif len(value) > max_len or not pattern.fullmatch(value):
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
    elif has_surrogate(config):
        errors.setdefault("config", []).append(
            "holds a lone UTF-16 surrogate (an escape such as \\ud800 that is not text); send "
            "the config file's text as valid Unicode.")
    elif len(config.encode("utf-8")) > settings.FALCON_CONFIG_MAX_BYTES:
        raise PayloadTooLarge({"config": [
            f"is {len(config.encode('utf-8'))} bytes; the limit is "
            f"{settings.FALCON_CONFIG_MAX_BYTES} bytes, because tasks receive it as the "
            f"environment variable {CONFIG_ENV} and Linux caps one at 128 KiB. Keep large data "
            "in the artifact store and reference it from the config."]})

    if priority is None:
        priority = -1
    if not is_int(priority) or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        errors.setdefault("priority", []).append(
            f"must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX} (32 bits, as its column "
            f"and the gRPC int32 field); got {priority!r}.")

    specs: dict[str, Any] = {}
    example = "e.g. {main: {command: ..., replica: 1}}"
    if role_to_task_spec is None:
        errors.setdefault("role_to_task_spec", []).append(
            f"is required: a mapping of role name to TaskSpec, {example}.")
    elif not isinstance(role_to_task_spec, Mapping):
        kind = ("a list" if isinstance(role_to_task_spec, (list, tuple))
                else f"a {type(role_to_task_spec).__name__}")
        errors.setdefault("role_to_task_spec", []).append(
            f"must be a mapping of role name to TaskSpec, {example}; got {kind}.")
    elif not role_to_task_spec:
        errors.setdefault("role_to_task_spec", []).append(
            f"is empty: give at least one role, {example}.")
    elif len(role_to_task_spec) > MAX_ROLES:
        # Not checked role by role: the count alone is the problem.
        errors.update(experiment_size_problems(dict.fromkeys(role_to_task_spec, {})))
    else:
        for role, spec in role_to_task_spec.items():
            if problem := validate_role(role):
                errors.setdefault(f"role_to_task_spec.{path_part(role)}", []).append(problem)
                continue
            specs[role] = validate_task_spec(role, spec, errors)
        if "config" not in errors:
            for role, spec in specs.items():
                if problem := environment_problem(spec, config):
                    errors.setdefault(f"role_to_task_spec.{role}", []).append(problem)
        errors.update(experiment_size_problems(specs))

    if "cluster_name" not in errors and isinstance(cluster_name, str):
        # The cluster must exist in the clusters file and accept each TaskSpec (a Kubernetes
        # cluster needs an image and a mapped device type); checked here, at CreateExp, not
        # discovered later by a failing cluster Job. A problem the shape rules above already
        # reported for a field is not repeated.
        for key, messages in cluster_problems(cluster_name, specs).items():
            if key not in errors:
                errors[key] = messages

    if errors:
        raise ValidationFailed(errors)
    return {"name": name, "cluster_name": cluster_name, "exp_type": exp_type,
            "role_to_task_spec": {role: task_spec_of(spec) for role, spec in specs.items()},
            "config": config, "priority": priority}
