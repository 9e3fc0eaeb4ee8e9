"""`falcon exp`: the ExperimentService over HTTP, one module per command family.

`group` holds the click group and the shared limits; each command module registers its commands
on it when imported here. Only click is imported at module level (`falcon --help` stays fast).
"""
from __future__ import annotations

from . import clone, compare, create, describe, diff, files, label, lifecycle, read  # noqa: F401
from .group import CONFIG_MAX_BYTES, PAGE_SIZE, TASKS_MAX_BYTES, exp_group
from .inputs import create_exp, read_config_file, read_tasks_file
from .lifecycle import wait_for

__all__ = ["CONFIG_MAX_BYTES", "PAGE_SIZE", "TASKS_MAX_BYTES", "create_exp", "exp_group",
           "read_config_file", "read_tasks_file", "wait_for"]
