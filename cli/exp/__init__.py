"""`falcon exp`: the ExperimentService over HTTP, one module per command family.

`group` holds the click group and the shared limits; each command module registers its commands
on it when imported, which `group.ExpGroup` does for the command that runs (`falcon exp list`
imports `read` only). Only click is imported at module level (`falcon --help` stays fast).
"""
from __future__ import annotations

import importlib
from typing import Any

from .group import CONFIG_MAX_BYTES, PAGE_SIZE, TASKS_MAX_BYTES, exp_group

# Imported from their modules on first use (PEP 562).
_LAZY = {"create_exp": "inputs", "read_config_file": "inputs", "read_tasks_file": "inputs",
         "wait_for": "lifecycle"}

__all__ = ["CONFIG_MAX_BYTES", "PAGE_SIZE", "TASKS_MAX_BYTES", "create_exp", "exp_group",
           "read_config_file", "read_tasks_file", "wait_for"]


def __getattr__(name: str) -> Any:
    """The functions of `_LAZY`, and the command modules (`cli.exp.read`), on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
