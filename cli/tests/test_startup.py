"""`falcon --help` stays fast: the entry module imports no heavy library (checked in a fresh
interpreter; the startup time itself is measured by bench/cli_startup.py, not asserted)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("httpx", "rich", "yaml", "jwt", "django", "rest_framework", "cryptography")


def _modules_after(code: str) -> set[str]:
    probe = (f"import sys, json\n{code}\n"
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_entry_point_imports_no_heavy_library():
    loaded = _modules_after("import cli.main")
    assert "cli" in loaded and "rich_click" in loaded
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_help_lists_the_command_groups_without_django():
    done = subprocess.run([sys.executable, "-m", "cli", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "auth" in done.stdout and "exp" in done.stdout
    loaded = _modules_after("from cli.main import main\n"
                            "try:\n    main(['exp', '--help'])\nexcept SystemExit:\n    pass")
    assert "django" not in loaded and "httpx" not in loaded
