"""`falcon analysis` and `falcon plugins`: the Data Analyzer's HTTP API (docs/analyzer.md).

One module per command family, as `cli.exp`: `group` holds the click group, the shared
constants and the rewording of the server's errors; each command module registers its commands
on it when imported here. Only click is imported at module level; urllib3, rich and yaml are
imported inside the commands.

The API server keeps the analysis records; what has a side effect on the analyzer controller
(creating, cancelling, deleting, the live log, the plugin catalog) goes through it, and a 503
means the controller is unavailable, while records stay readable.
"""
from __future__ import annotations

from . import create, lifecycle, read, results  # noqa: F401
from .create import read_script_file, wait_for
from .group import analysis_group, api_errors
from .plugins import plugins_group
from .read import follow_log
from .results import render_tables

__all__ = ["analysis_group", "api_errors", "follow_log", "plugins_group", "read_script_file",
           "render_tables", "wait_for"]
