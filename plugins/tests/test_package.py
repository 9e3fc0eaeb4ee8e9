"""The plugins package stands alone: importing every module loads no Django."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_module_imports_django():
    code = ("import sys, plugins.catalog, plugins.common, plugins.render, plugins.trace_summary, "
            "plugins.hlo_stats, plugins.bench_summary; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework')]; "
            "assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
