"""Every test of the repository runs under the README's test command.

`make test` runs pytest with the `testpaths` of pyproject.toml; a folder left out of that list is
never collected and its tests silently never run (core/tests once stayed out for 25 tests). Being
under a testpath is not enough either (a module pytest skips, a folder a conftest ignores), so the
last test checks what pytest really collected: this session's collection when it runs the whole
suite, else a `pytest --collect-only` of its own.
"""
from __future__ import annotations

import subprocess
import sys
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


def _collected_by_the_test_command(config, session) -> set[Path]:
    """The files holding at least one test that `pytest` with no argument collects."""
    testpaths = sorted((ROOT / p).resolve() for p in _pytest_settings()["testpaths"])
    if sorted(Path(arg).resolve() for arg in config.args) == testpaths:
        return {Path(item.path).resolve() for item in session.falcon_collected}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {(ROOT / line.split("::", 1)[0]).resolve()
            for line in done.stdout.splitlines() if "::" in line}


def test_every_test_module_and_tests_folder_holds_collected_tests(request):
    collected = _collected_by_the_test_command(request.config, request.session)
    missing = []
    for path in _test_files_and_folders():
        path = path.resolve()
        if path.is_dir():
            if not any(path in file.parents for file in collected):
                missing.append(str(path.relative_to(ROOT)))
        elif path not in collected:
            missing.append(str(path.relative_to(ROOT)))
    assert missing == [], f"pytest collects no test from these (give them one, or fix the " \
                          f"collection: an import error, a conftest ignoring them): {missing}"


def _collect(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_the_database_pass_keeps_every_test_that_reaches_the_database():
    """`--database-tests-only` (the MariaDB pass) drops only tests that cannot reach it."""
    files = ["core/tests/test_logs.py", "tests/test_database_settings.py", "tests/test_e2e.py",
             "cli/tests/test_exp_files.py"]
    everything = _collect(*files)
    kept = _collect("--database-tests-only", *files)
    assert kept < everything
    dropped = everything - kept
    # A django_db mark; the every_database mark (a subprocess inheriting DATABASE_URL); a
    # module-scoped platform on `django_db_setup`; the CLI against `live_server`.
    assert "core/tests/test_logs.py::test_lines_an_http_view_logs_carry_the_ids_of_its_path" \
        in kept
    assert "tests/test_database_settings.py::test_reused_connections_are_health_checked" in kept
    assert {t for t in everything if t.startswith("tests/test_e2e.py")} <= kept
    assert {t for t in everything if t.startswith("cli/tests/test_exp_files.py")} <= kept
    # Pure functions run once, in the SQLite pass.
    assert "core/tests/test_logs.py::test_redact_keeps_ordinary_text" in dropped
    assert all(t.startswith(("core/", "tests/test_database_settings.py")) for t in dropped)
