"""An analysis request's rules, row by row, as plugins.rules states them once.

The API server (`analysis.services.validate_create_fields`, the HTTP serializer), the
analyzer's CreateAnalysis and the CLI's `--script` limit all read these functions.
"""
from __future__ import annotations

import pytest

from plugins.rules import (
    SCRIPT_MAX_BYTES,
    lone_script_name_problem,
    plugin_or_command_problem,
    script_problem,
    script_with_plugin_problem,
)


@pytest.mark.parametrize("script, problem", [
    (None, None),
    ("", None),
    ("print(1)", None),
    ("x" * SCRIPT_MAX_BYTES, None),
    ("x" * (SCRIPT_MAX_BYTES + 1), f"is {SCRIPT_MAX_BYTES + 1} bytes in UTF-8; the limit"),
    ("é" * (SCRIPT_MAX_BYTES // 2 + 1), f"is {SCRIPT_MAX_BYTES + 2} bytes in UTF-8"),
    ("a\x00b", "contains a NUL character"),
    (b"bytes", "must be a string"),
])
def test_script(script, problem):
    answer = script_problem(script)
    assert answer == problem if problem is None else problem in answer


@pytest.mark.parametrize("plugin, command, refused", [
    ("summary", "", False), ("", "python run.py", False), ("", "  ", True), (None, None, True),
])
def test_plugin_or_command(plugin, command, refused):
    assert (plugin_or_command_problem(plugin, command) is not None) is refused


def test_a_script_with_a_plugin_is_refused_in_the_callers_own_field_names():
    assert script_with_plugin_problem("summary", "") is None
    assert script_with_plugin_problem("", "print(1)") is None
    assert script_with_plugin_problem("summary", "print(1)").endswith(
        "drop script_content, or send command instead of plugin_name.")
    assert script_with_plugin_problem("summary", "print(1)", script_field="script",
                                      plugin_field="plugin").endswith(
        "drop script, or send command instead of plugin.")


@pytest.mark.parametrize("name, script, refused", [
    ("run.py", "print(1)", False), ("", "", False), ("run.py", "", True), ("run.py", None, True),
])
def test_a_script_name_needs_a_script(name, script, refused):
    assert (lone_script_name_problem(name, script) is not None) is refused
