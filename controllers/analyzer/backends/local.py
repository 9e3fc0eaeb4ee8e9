"""The local analysis backend: each run a `controllers.analyzer.runner` process in its own session.

Layout of `state_dir` (`$FALCON_VAR_DIR/local-analyzer/`), one folder per run, named by
`run_name(analysis_id)`::

    state_dir/
      .lock               flock held by start and stop, so two controllers never race
      analysis-an-0f3c.../
        spec.json         the run's spec (RunSpec plus the runner's paths), written first
        run.json          the runner's pid and process start time (/proc), and the analysis id
        child.json        the command's pid and start time (its own process group)
        exit.json         written by the runner at the end: exit_code, reason, message
        runner.log        the runner's own stdout and stderr
        work/             input/ (the artifact's copy), output/, script

A controller that restarts reads these files again: a live run (same pid AND start time, which
defends against pid reuse) is adopted, never started twice; a run whose runner is gone with no
exit.json was killed from outside (phase failed, reason Killed, with the log tail). `stop` sends
SIGTERM to the runner's and the command's process groups, SIGKILL after `grace_seconds`, and
removes the folder only when no process of either group is left.

Linux only: liveness and process groups are read from /proc.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from artifacts.store import store_for
from controllers.cluster_backends.local import DEFAULT_PASSTHROUGH_ENV
from controllers.cluster_backends.local_state import process_table, read_stat
from core.processes import safefs
from core.processes.atomicfiles import locked, write_atomic
from core.observability.logs import log_context

from .base import (
    FAILED, KILLED, MISSING_STATE, RUNNING, SUCCEEDED, AnalysisBackend, BackendError,
    RunConflict, RunSpec, RunState, StartResult, log_tail,
)

log = logging.getLogger("falcon.controllers.analyzer.local")
# Passed to the runner with the environment it needs, so its own lines are formatted the same.
LOG_ENV = ("FALCON_LOG_FORMAT", "FALCON_LOG_LEVEL")

SPEC, RUN, CHILD, EXIT = "spec.json", "run.json", "child.json", "exit.json"


def _group_alive(table: dict, rec: dict | None) -> bool:
    """Whether a process of the group led by `rec["pid"]` lives (the leader's start time must
    match when the leader is there: a reused pid is another group)."""
    if not rec or rec.get("pid", 0) <= 0:
        return False
    pgid = rec["pid"]
    leader = table.get(pgid)
    if leader is not None and leader.start_time != rec.get("start_time"):
        return False
    return any(p.pgrp == pgid and p.live for p in table.values())


def _proc_alive(table: dict, rec: dict | None) -> bool:
    """Whether the process of `rec` (pid and start time) is alive."""
    if not rec:
        return False
    proc = table.get(rec.get("pid", 0))
    return proc is not None and proc.live and proc.start_time == rec.get("start_time")


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot read {path}: {exc}") from exc


class LocalAnalysisBackend(AnalysisBackend):
    """Runs on this machine (the embedded default; docs/analyzer.md, "Runs on the local backend").

    Args:
        state_dir: the folder of run folders (created).
        plugin_dir: put first on the command's PATH (`settings.FALCON_PLUGIN_DIR`).
        grace_seconds: seconds between SIGTERM and SIGKILL on stop and timeout.
        log_upload_seconds: seconds between two puts of output.log for a gs:// result folder.
        workdir: the runner's working directory (None: this process's).

    Raises:
        RuntimeError: not on Linux (no /proc).
    """

    name = "local"

    def __init__(self, state_dir: str | os.PathLike, *, plugin_dir: str = "",
                 grace_seconds: float = 5.0, log_upload_seconds: float = 5.0,
                 workdir: str | os.PathLike | None = None):
        if not os.path.exists("/proc/self/stat"):
            raise RuntimeError("LocalAnalysisBackend needs Linux /proc to track processes.")
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.plugin_dir = plugin_dir
        self.grace_seconds = float(grace_seconds)
        self.log_upload_seconds = float(log_upload_seconds)
        self.workdir = workdir
        self._children: dict[int, subprocess.Popen] = {}
        self._term_sent: dict[str, float] = {}

    def folder(self, analysis_id: str) -> Path:
        """The run folder of `analysis_id`."""
        return self.state_dir / self.run_name(analysis_id)

    def _reap(self) -> None:
        for pid, proc in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[pid]

    # -- start ------------------------------------------------------------------------------

    def start(self, spec: RunSpec) -> StartResult:
        """Start the runner of `spec`, or adopt the run of that name (see the base class).

        Raises:
            RunConflict: the folder of that name holds a run of another analysis.
            BackendError: the runner cannot be started.
        """
        with log_context(analysis_id=spec.analysis_id, exp_id=spec.exp_id):
            name = self.run_name(spec.analysis_id)
            folder = self.state_dir / name
            with locked(self.state_dir / ".lock"):
                self._reap()
                table = process_table()
                rec = _read_json(folder / RUN) if folder.is_dir() else None
                if rec is not None:
                    if rec.get("analysis_id") != spec.analysis_id:
                        raise RunConflict(f"run {name} belongs to analysis "
                                          f"{rec.get('analysis_id')!r}, not {spec.analysis_id!r}; "
                                          "it is not adopted")
                    child = _read_json(folder / CHILD)
                    if (folder / EXIT).exists() or _proc_alive(table, rec) \
                            or _group_alive(table, rec) or _group_alive(table, child):
                        log.info("analysis %s: adopted its run %s (runner pid %s)",
                                 spec.analysis_id, name, rec.get("pid"))
                        return StartResult(run_name=name, adopted=True,
                                           object_name=f"local-{rec['pid']}")
                # No run, or one gone without an exit status: (re)start it from a clean folder.
                if folder.exists():
                    shutil.rmtree(folder)
                work = folder / "work"
                work.mkdir(parents=True)
                runner_spec = {**asdict(spec), "work_dir": str(work),
                               "exit_file": str(folder / EXIT), "child_file": str(folder / CHILD),
                               "plugin_dir": self.plugin_dir, "grace_seconds": self.grace_seconds,
                               # Processes here get what the machine has: the runner says so.
                               "backend": self.name, "enforces_resources": False,
                               "log_upload_seconds": self.log_upload_seconds}
                (folder / SPEC).touch(mode=0o600)
                write_atomic(folder / SPEC, json.dumps(runner_spec, indent=1))
                os.chmod(folder / SPEC, 0o600)
                # The run.json written before the runner exists names the analysis, so a crash
                # between here and the spawn leaves a folder start() claims again, never a stranger.
                write_atomic(folder / RUN, json.dumps({"analysis_id": spec.analysis_id, "pid": 0,
                                                       "start_time": -1}))
                # A subset of this process's environment, as for the local cluster backend's tasks:
                # the controller holds tokens and database URLs that a user's script must not read.
                # The log settings too: the runner's own lines (runner.log) follow them.
                env = {k: os.environ[k] for k in (*DEFAULT_PASSTHROUGH_ENV, *LOG_ENV)
                       if k in os.environ}
                root = str(Path(__file__).resolve().parents[3])
                env["PYTHONPATH"] = os.pathsep.join(
                    p for p in (root, env.get("PYTHONPATH", "")) if p)
                try:
                    with open(folder / "runner.log", "ab") as out:
                        proc = subprocess.Popen(
                            [sys.executable, "-m", "controllers.analyzer.runner", "--spec",
                             str(folder / SPEC)], stdin=subprocess.DEVNULL, stdout=out,
                            stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
                            start_new_session=True, close_fds=True)
                except (OSError, ValueError) as exc:
                    raise BackendError(f"cannot start the run {name}: {exc}") from exc
                self._children[proc.pid] = proc
                stat = read_stat(proc.pid)
                write_atomic(folder / RUN, json.dumps({
                    "analysis_id": spec.analysis_id, "pid": proc.pid,
                    "start_time": stat.start_time if stat else -1, "started_at": time.time(),
                    "attempt": spec.attempt}))
                log.info("analysis %s: started its runner (pid %d) in %s (attempt %d)",
                         spec.analysis_id, proc.pid, folder, spec.attempt)
                return StartResult(run_name=name, adopted=False,
                                   object_name=f"local-{proc.pid}")

    # -- observe ----------------------------------------------------------------------------

    def _log_tail(self, folder: Path) -> str:
        try:
            spec = _read_json(folder / SPEC) or {}
            url = spec.get("result_path", "")
            if url.startswith("file:"):
                data = store_for(url + "output.log").read_range(url + "output.log")
            else:
                # The run's script may have swapped the log for a link: not followed.
                with os.fdopen(safefs.open_regular(folder / "work" / "output.log"),
                               "rb") as fh:
                    data = fh.read()
        except (OSError, ValueError, BackendError):
            return ""
        return log_tail(data)

    def _state(self, table: dict, analysis_id: str) -> RunState:
        folder = self.folder(analysis_id)
        rec = _read_json(folder / RUN) if folder.is_dir() else None
        if rec is None or rec.get("analysis_id") != analysis_id:
            return MISSING_STATE
        child = _read_json(folder / CHILD)
        alive = _group_alive(table, rec) or _group_alive(table, child)
        status = _read_json(folder / EXIT)
        if status is not None:
            reason = status.get("reason") or ""
            return RunState(phase=FAILED if reason else SUCCEEDED, alive=alive,
                            exit_code=status.get("exit_code"), reason=reason,
                            message=status.get("message") or "")
        if _proc_alive(table, rec) or (rec.get("pid", 0) == 0 and alive):
            return RunState(phase=RUNNING, alive=True)
        if rec.get("pid", 0) == 0:
            return MISSING_STATE  # the folder of a start that crashed before the spawn
        tail = self._log_tail(folder)
        message = "the run's runner ended without an exit status (killed from outside?)"
        return RunState(phase=FAILED, alive=alive, reason=KILLED,
                        message=f"{message}; log tail:\n{tail}" if tail else message)

    def observe(self, analysis_ids: Iterable[str]) -> dict[str, RunState]:
        """The state of each run, from one read of the process table."""
        self._reap()
        table = process_table()
        return {analysis_id: self._state(table, analysis_id) for analysis_id in analysis_ids}

    def list_runs(self) -> list[str]:
        """The analysis ids of the run folders in `state_dir`."""
        out = []
        for folder in sorted(self.state_dir.iterdir()):
            if folder.is_dir():
                try:
                    rec = _read_json(folder / RUN)
                except BackendError:
                    continue
                if rec and rec.get("analysis_id"):
                    out.append(rec["analysis_id"])
        return out

    # -- stop -------------------------------------------------------------------------------

    def stop(self, analysis_id: str) -> bool:
        """SIGTERM both process groups, SIGKILL after `grace_seconds`; True (and the folder
        removed) once no process of either is left."""
        with log_context(analysis_id=analysis_id):
            folder = self.folder(analysis_id)
            with locked(self.state_dir / ".lock"):
                self._reap()
                rec = _read_json(folder / RUN) if folder.is_dir() else None
                if rec is not None and rec.get("analysis_id") != analysis_id:
                    raise RunConflict(f"run {folder.name} belongs to analysis "
                                      f"{rec.get('analysis_id')!r}; not stopped")
                child = _read_json(folder / CHILD) if rec else None
                table = process_table()
                groups = [r["pid"] for r in (rec, child) if _group_alive(table, r)]
                if not groups:
                    self._term_sent.pop(analysis_id, None)
                    if folder.exists():
                        shutil.rmtree(folder, ignore_errors=True)
                    return True
                first = self._term_sent.get(analysis_id)
                if first is None:
                    self._term_sent[analysis_id] = time.monotonic()
                    sig = signal.SIGTERM
                elif time.monotonic() - first >= self.grace_seconds:
                    sig = signal.SIGKILL
                else:
                    return False  # SIGTERM sent once; the run has its grace period
                log.info("analysis %s: stopping its run: %s to process group%s %s",
                         analysis_id, sig.name, "" if len(groups) == 1 else "s",
                         ", ".join(map(str, groups)))
                for pgid in groups:
                    try:
                        os.killpg(pgid, sig)
                    except ProcessLookupError:
                        pass
                return False

    # -- logs -------------------------------------------------------------------------------

    def read_log(self, analysis_id: str, result_path: str, offset: int = 0,
                 limit: int = 1 << 20) -> bytes:
        """Read output.log from the store (file:// is written live; gs:// every few seconds)."""
        url = (result_path if result_path.endswith("/") else result_path + "/") + "output.log"
        try:
            return store_for(url).read_range(url, offset, limit)
        except FileNotFoundError:
            return b""
