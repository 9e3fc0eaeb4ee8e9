"""Helpers for the plugin tests: run a plugin's bin/ executable as a real process, read JSONL."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

BIN = Path(__file__).resolve().parents[1] / "bin"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REAL = FIXTURES / "jax-mlp-cpu"
REAL_PROFILE = REAL / "profile" / "plugins" / "profile" / "2026_11_29_07_24_09"


@dataclass
class Run:
    """A finished plugin process: exit code, stderr, and the records of its result (if any)."""

    returncode: int
    stderr: str
    stdout: str
    output: Path | None

    @property
    def records(self) -> list[dict]:
        text = self.output.read_text() if self.output else self.stdout
        return [json.loads(line) for line in text.splitlines()]

    def kind(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["kind"] == kind]


def plugin_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a plugin process: this interpreter's bin first on PATH (the image has
    its own python3 with the plugins' dependencies), no FALCON_* variables unless given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FALCON_")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update(extra or {})
    return env


def run_plugin(name: str, *args: str | Path, output: Path | None = None,
               env: dict[str, str] | None = None, timeout: float = 120, **popen) -> Run:
    """Run ``bin/NAME ARGS [--output OUTPUT]`` as a subprocess and collect what it left."""
    argv = [str(BIN / name), *map(str, args)]
    if output is not None:
        argv += ["--output", str(output)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=plugin_env(env),
                          timeout=timeout, **popen)
    return Run(proc.returncode, proc.stderr, proc.stdout,
               output if output is not None and output.exists() else None)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """Where a test's plugin writes its result."""
    return tmp_path / "result" / "out.jsonl"
