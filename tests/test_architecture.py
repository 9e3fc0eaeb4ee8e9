"""The house's import rules hold: the import-linter contracts of pyproject.toml are kept.

The contracts say that dependencies point one way (falcon_site > controllers | cli > experiments
> jobs | artifacts > accounts > core > clusters | falcon_proto), that controllers reach data only
over gRPC, and that what the CLI and both sides of the gRPC API share imports no Django. And no
product module imports another module's private (`_name`) function: what two modules share is
public and documented.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("falcon_site", "controllers", "cli", "analysis", "experiments", "jobs", "artifacts",
            "accounts", "schedules", "core", "clusters", "falcon_proto", "plugins")


def lint_imports() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command;"
                           "lint_imports_command()", "--no-cache"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_every_import_contract_is_kept():
    result = lint_imports()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "4 kept, 0 broken" in result.stdout


def test_the_contracts_catch_a_domain_app_importing_the_controllers(tmp_path):
    """The check is not vacuous: a copy of the tree with one forbidden import fails it."""
    copy = tmp_path / "tree"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, copy / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "jobs" / "selectors.py").open("a") as fh:
        fh.write("\nimport controllers.contract  # a forbidden import\n")
    result = subprocess.run([sys.executable, "-c", "from importlinter.cli import "
                             "lint_imports_command; lint_imports_command()", "--no-cache"],
                            cwd=copy, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "jobs.selectors -> controllers.contract" in result.stdout


def private_imports(root: Path) -> list[str]:
    """Return `path:line name` for each `from x import _name` in the product code of `root`
    (tests, migrations and generated code are left out)."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if {"tests", "migrations"} & set(rel.parts) or path.name.endswith("_pb2.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom):
                    found.extend(f"{rel}:{node.lineno} {alias.name}" for alias in node.names
                                 if alias.name.startswith("_")
                                 and not alias.name.startswith("__"))
    return found


def test_no_module_imports_a_private_name_of_another():
    assert private_imports(ROOT) == []


def test_the_private_import_check_sees_one(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "selectors.py").write_text("from jobs.specs import _check_env\n")
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
    assert private_imports(tmp_path) == ["jobs/selectors.py:1 _check_env"]
