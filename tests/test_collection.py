"""Every test of the repository runs under the README's test command.

`make test` runs pytest with the `testpaths` of pyproject.toml; a folder left out of that list is
never collected and its tests silently never run (core/tests once stayed out for 25 tests).
"""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".venv", "var", ".git", "build", "dist", "node_modules", "__pycache__"}


def _pytest_settings() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["pytest"]["ini_options"]


def _test_files_and_folders() -> list[Path]:
    found = []
    stack = [ROOT]
    while stack:
        folder = stack.pop()
        for entry in folder.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                if entry.name in SKIP_DIRS or entry.name.startswith("."):
                    continue
                if entry.name == "tests":
                    found.append(entry)
                stack.append(entry)
            elif entry.is_file() and entry.name.startswith("test_") and entry.suffix == ".py":
                found.append(entry)
    return found


def test_every_tests_folder_and_test_module_is_under_a_testpath():
    testpaths = [ROOT / p for p in _pytest_settings()["testpaths"]]
    outside = [str(path.relative_to(ROOT)) for path in _test_files_and_folders()
               if not any(path == top or top in path.parents for top in testpaths)]
    assert outside == [], f"add their top folder to testpaths in pyproject.toml: {outside}"


def test_every_test_module_matches_the_collected_file_pattern():
    assert _pytest_settings()["python_files"] == ["test_*.py"]
    assert _test_files_and_folders(), "the walk found no tests: the check itself is broken"
