"""Shared helpers of the analyzer's tests: a catalog, a controller on the local backend."""
from __future__ import annotations

import os
from pathlib import Path

from controllers.analyzer.backends.local import LocalAnalysisBackend
from controllers.analyzer.controller import AnalyzerConfig, AnalyzerController
from core.testing import wait_until as poll_until
from plugins.catalog import Plugin, Resources

RES = Resources(cpu_request="100m", cpu_limit="1", memory_request="64Mi", memory_limit="1Gi")


def plugin(name: str, command: str, timeout: int = 60, types=("profiling",)) -> Plugin:
    """A catalog entry for tests."""
    return Plugin(name=name, description=f"{name} (test)", command=command,
                  artifact_types=tuple(types), resources=RES, timeout_seconds=timeout)


CATALOG = {
    "echo-ok": plugin("echo-ok", 'echo "hello from $FALCON_ANALYSIS_ID"; '
                      'ls "$FALCON_INPUT_DIR" > /dev/null; '
                      'echo \'{"ok": 1}\' > "$FALCON_RESULT_FILE"'),
    "no-results": plugin("no-results", "echo nothing"),
    "slow": plugin("slow", 'echo first line; sleep 30; echo never'),
    "short-timeout": plugin("short-timeout", "echo started; sleep 30", timeout=1),
}


def make_controller(api, tmp_path: Path, *, limits=None, catalog=None, clock=None, **config):
    """An AnalyzerController over `api` and a LocalAnalysisBackend under `tmp_path`; `clock`
    (e.g. a `core.testing.FakeClock`) replaces its monotonic clock."""
    backend = LocalAnalysisBackend(tmp_path / "state", grace_seconds=0.5,
                                   log_upload_seconds=0.2)
    cfg = dict(result_root=(tmp_path / "results").as_uri(), limits=limits or
               {"offline": 2, "online": 2}, poll_seconds=0.05, max_attempts=3,
               backoff_seconds=0.1, backoff_max_seconds=0.4)
    cfg.update(config)
    return AnalyzerController(api, backend, catalog if catalog is not None else CATALOG,
                              AnalyzerConfig(**cfg), **({"clock": clock} if clock else {}))


def artifact(tmp_path: Path) -> str:
    """An artifact folder with one file; its file:// URL."""
    folder = tmp_path / "artifact"
    folder.mkdir(exist_ok=True)
    (folder / "trace.json").write_text("{}")
    return folder.as_uri()


def until(predicate, timeout: float = 60.0, every: float = 0.05, tick=None):
    """Call `tick` (if any) and poll `predicate` until true; AssertionError after `timeout`
    (a deadline only: generous, for a loaded machine)."""
    return poll_until(predicate, timeout=max(timeout, 60.0), every=every, tick=tick)


def runner_pids(spec_fragment: str) -> list[int]:
    """Live processes whose command line holds `spec_fragment` (e.g. a run folder name)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "controllers.analyzer.runner" in cmd and spec_fragment in cmd and state != "Z":
            out.append(int(entry))
    return out
