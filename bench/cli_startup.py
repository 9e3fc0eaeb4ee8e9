"""Measure how fast `falcon --help` starts (budget: 0.3 s), and what `import cli.main` loads.

Run from the repository root:  .venv/bin/python bench/cli_startup.py [--runs 15]

Prints the median and best wall-clock time of `falcon --help` over several fresh processes (the
console script when it is installed next to this interpreter, else `python -m cli`), the bare
interpreter's startup for comparison, the slowest imports of `cli.main` from `python -X
importtime`, and whether any heavy library (httpx, rich, yaml, jwt, django) is imported by it.
Exits 1 when the median is over budget. This is a measurement, not a test: timings depend on the
machine, so no test asserts them.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET_SECONDS = 0.3
HEAVY = ("httpx", "rich", "yaml", "jwt", "django")


def _time(cmd: list[str], runs: int) -> list[float]:
    """Return the wall-clock seconds of `runs` executions of `cmd` (after one warm-up)."""
    subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return times


def _import_profile(top: int) -> tuple[list[tuple[int, str]], list[str]]:
    """Return the `top` slowest imports of `cli.main` (cumulative microseconds, module) and the
    heavy top-level packages it loaded."""
    probe = ("import sys, cli.main; "
             "print(','.join(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", probe], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        rows.append((int(cumulative), name.strip()))
    loaded = set(done.stdout.strip().split(","))
    return sorted(rows, reverse=True)[:top], sorted(loaded & set(HEAVY))


def main() -> int:
    """Print the startup figures; return 1 when the median is over budget."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="processes to time (default 15)")
    args = parser.parse_args()

    script = Path(sys.executable).with_name("falcon")
    cmd = [str(script), "--help"] if script.exists() else [sys.executable, "-m", "cli", "--help"]
    help_times = _time(cmd, args.runs)
    bare_times = _time([sys.executable, "-c", "pass"], args.runs)
    slowest, heavy = _import_profile(top=8)

    median = statistics.median(help_times)
    print(f"command: {' '.join(Path(c).name if i == 0 else c for i, c in enumerate(cmd))}")
    print(f"falcon --help: median {median:.3f} s, best {min(help_times):.3f} s over "
          f"{args.runs} runs (budget {BUDGET_SECONDS:.1f} s)")
    print(f"bare interpreter startup: median {statistics.median(bare_times):.3f} s")
    print("slowest imports of cli.main (cumulative):")
    for micros, name in slowest:
        print(f"  {micros / 1000:7.1f} ms  {name}")
    print(f"heavy libraries imported by cli.main: {', '.join(heavy) if heavy else 'none'}")
    return 0 if median <= BUDGET_SECONDS and not heavy else 1


if __name__ == "__main__":
    sys.exit(main())
