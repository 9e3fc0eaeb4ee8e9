"""Time and peak RSS of trace-summary on a large synthetic trace (not run by the test suite).

    PYTHONPATH=$PWD .venv/bin/python bench/plugins.py [EVENTS]     # default 5,000,000

Writes the trace (gzip, streamed from a generator) to a temporary folder, runs
plugins/bin/trace-summary on it as a child process, prints wall time and the child's peak RSS.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from plugins.tests.synthetic import write_synthetic_trace  # noqa: E402


def main() -> int:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 5_000_000
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "big.trace.json.gz"
        started = time.monotonic()
        size = write_synthetic_trace(trace, events)
        print(f"wrote {events:,} events: {size / 1e6:.0f} MB of JSON, "
              f"{trace.stat().st_size / 1e6:.0f} MB gzipped, {time.monotonic() - started:.1f} s")
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        started = time.monotonic()
        proc = subprocess.run([str(ROOT / "plugins" / "bin" / "trace-summary"), "--input",
                               str(trace), "--output", str(Path(tmp) / "out.jsonl")], env=env)
        elapsed = time.monotonic() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"trace-summary: exit {proc.returncode}, {elapsed:.1f} s, peak RSS {peak:.0f} MiB")
        return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
