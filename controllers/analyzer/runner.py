"""The entry point inside an analysis run: `python -m controllers.analyzer.runner --spec FILE`.

Django-free (import-linter: only the artifact store and the standard library). Steps, in the
design's order (docs/analyzer.md, "Runs on the local backend"):

0. when the backend does not enforce the run's resources (the local backend) and some are
   requested (the plugin's defaults or the user's override), say so on the log's first line;
1. copy the artifact's files from the store into `{work}/input` (`artifacts.store.fetch_tree`);
2. save the user's script as `{work}/script`, mode 0700, when there is one, and under the file
   name the user gave (`script_name`, e.g. `{work}/run.py`) too;
3. run the command with `sh -c` in its own process group, the plugin folder first on PATH and
   FALCON_INPUT_DIR, FALCON_OUTPUT_DIR, FALCON_RESULT_FILE, FALCON_SCRIPT, FALCON_ANALYSIS_ID,
   FALCON_EXP_ID set; its stdout and stderr are appended to `output.log` as the run goes (for a
   file:// result folder straight into `{result_path}output.log`, line by line; for gs:// into a
   local file put whole to the store every `log_upload_seconds` and at the end: objects cannot
   be appended);
4. stop it after `timeout_seconds` (SIGTERM to its group, SIGKILL after `grace_seconds`);
5. put `{plugin or "result"}.jsonl` from the output folder to `{result_path}`;
6. write the exit status (`exit_code`, `reason`, `message`, `finished_at`, `attempt`) to
   `exit_file`, atomically. Reasons: NonZeroExit, Timeout, NoResults (a plugin exited 0
   without results), FetchFailed, Stopped (SIGTERM from the backend);
7. when the spec names `exit_url` (the Pod backend: `{result_path}exit.json`), put the exit
   status there too, last: once it is in the store the results and output.log are complete,
   and the run's outcome outlives its Pod (a Pod garbage-collected before the controller read
   its status still ends the analysis by what the run did, not as "deleted").

In an analysis Pod (`--spec-env FALCON_RUN_SPEC --termination-log /dev/termination-log`, the
Kubernetes backend) the spec comes from the environment, the exit status is also written as the
container's termination message (at most 4096 bytes, Kubernetes `terminationMessagePath`), and
the process exits 0 on success and non-zero otherwise (the command's own code when it has one),
so the Pod's phase says the outcome. gs:// writes carry generation preconditions and retry on
429 and 5xx (`controllers.analyzer.upload`).

A runner killed outright writes no exit status; the backend reports that run failed (Killed),
and what the command printed so far stays in output.log.

The runner's own lines (its start and end, a failed upload; the local backend's `runner.log`, a
Pod's container log) are log records (`core.observability.logs`, `FALCON_LOG_FORMAT`: JSON lines in
production) carrying the run's `analysis_id` and `exp_id`; what the command prints goes to
output.log only.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from artifacts.store import fetch_tree, local_path, store_for
from core.processes.atomicfiles import write_atomic
from core.observability.logs import configure, log_context
from core.processes.proctree import become_subreaper, describe_exit, reap_orphans, signal_descendants

from .upload import writer_for

log = logging.getLogger("falcon.controllers.analyzer.runner")

NON_ZERO_EXIT, TIMEOUT, NO_RESULTS, FETCH_FAILED, STOPPED = (
    "NonZeroExit", "Timeout", "NoResults", "FetchFailed", "Stopped")
RESOURCE_KEYS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")
TAIL_BYTES = 4096
TAIL_LINES = 20
TERMINATION_MESSAGE_MAX = 4096  # bytes kubelet keeps of terminationMessagePath


def tail(path: Path) -> str:
    """The last TAIL_LINES lines within the last TAIL_BYTES bytes of the file at `path`."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - TAIL_BYTES))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.rstrip("\n").splitlines()[-TAIL_LINES:])





class Run:
    """One run of a spec (the JSON written by the backend; fields in `RunSpec` plus
    `work_dir`, `exit_file`, `child_file`, `plugin_dir`, `log_upload_seconds`, `grace_seconds`,
    and `backend` and `enforces_resources`: a backend that does not enforce `resources` says so,
    and the runner writes it as the log's first line).
    """

    def __init__(self, spec: dict):
        self.spec = spec
        self.work = Path(spec["work_dir"])
        self.result_path = spec["result_path"]
        if not self.result_path.endswith("/"):
            self.result_path += "/"
        self.log_url = self.result_path + "output.log"
        self.local_log = self.result_path.startswith("file:")
        self.log_file = (local_path(self.log_url) if self.local_log
                         else self.work / "output.log")
        self.stopping = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.log_writer = None if self.local_log else writer_for(self.log_url)

    # -- the log ----------------------------------------------------------------------------

    def say(self, log, text: str) -> None:
        """Append one line of the runner's own to the log, on a line of its own: after output
        that does not end with a newline, a newline first."""
        log.write(f"{self.line_start(log)}[falcon-analyzer] {text}\n".encode())
        log.flush()

    def line_start(self, log) -> str:
        """"\n" when the log's last byte (the command writes to the same file) is not one."""
        try:
            with open(self.log_file, "rb") as fh:
                if fh.seek(0, os.SEEK_END) == 0:
                    return ""
                fh.seek(-1, os.SEEK_END)
                return "" if fh.read(1) == b"\n" else "\n"
        except OSError:
            return ""

    def resources_note(self) -> str:
        """The log's first line when the backend does not enforce the run's resources
        (`enforces_resources` false in the spec, e.g. the local backend) and some are
        requested; "" otherwise."""
        if self.spec.get("enforces_resources", True):
            return ""
        resources = self.spec.get("resources") or {}
        requested = ", ".join(f"{key}={resources[key]}" for key in RESOURCE_KEYS
                              if resources.get(key))
        if not requested:
            return ""
        backend = self.spec.get("backend") or "this"
        return f"the {backend} backend does not enforce resources (requested: {requested})"

    def open_log(self):
        """Open a new, empty output.log for this attempt, for appending.

        It replaces a previous attempt's log whole, as a gs:// put does: written under a
        temporary name, then renamed over output.log (a reader sees the old log or the new
        one, never the two run together). A file:// log is written live in the store; a
        gs:// run's local log is new anyway (its work folder is).
        """
        tmp = self.log_file.with_name(f".{self.log_file.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o644)
        try:
            os.replace(tmp, self.log_file)
        except OSError:
            os.close(fd)
            raise
        return open(fd, "ab", buffering=0)

    def upload_log(self) -> None:
        """Put the local log to the store (gs:// result folders only); failures are printed."""
        if self.local_log:
            return
        try:
            self.log_writer.put(self.log_file)
        except Exception as exc:  # the next upload retries; the run must go on
            log.warning("cannot upload %s: %s", self.log_url, exc)

    # -- the command ------------------------------------------------------------------------

    def save_script(self) -> Path | None:
        """Save the user's script as `{work}/script` (mode 0700) and, when the spec names it
        (`script_name`, e.g. `run.py`), under that name too, so `python run.py` finds it.
        Returns the `script` path ($FALCON_SCRIPT), or None without a script.

        Raises:
            ValueError: `script_name` is not a plain file name (the API server refuses those).
        """
        text = self.spec.get("script") or ""
        if not text:
            return None
        names = ["script"]
        name = self.spec.get("script_name") or ""
        if name:
            if name in (".", "..", "input", "output", "output.log") or "/" in name \
                    or "\x00" in name:
                raise ValueError(f"script_name {name!r} is not a plain file name")
            names.append(name)
        for each in dict.fromkeys(names):
            path = self.work / each
            path.write_text(text, encoding="utf-8")
            path.chmod(0o700)
        return self.work / "script"

    def environment(self, input_dir: Path, output_dir: Path, script: Path | None) -> dict:
        """The command's environment: this process's, the plugin folder first on PATH, and
        Falcon's variables (they win over inherited ones)."""
        env = dict(os.environ)
        path = [p for p in (self.spec.get("plugin_dir") or "",
                            str(Path(sys.executable).parent)) if p]
        env["PATH"] = os.pathsep.join([*path, env.get("PATH", os.defpath)])
        plugin = self.spec.get("plugin_name") or ""
        env.update({
            "FALCON_INPUT_DIR": str(input_dir),
            "FALCON_OUTPUT_DIR": str(output_dir),
            "FALCON_RESULT_FILE": str(output_dir / f"{plugin or 'result'}.jsonl"),
            "FALCON_ANALYSIS_ID": self.spec["analysis_id"],
            "FALCON_EXP_ID": str(self.spec["exp_id"]),
            # A Python command's prints reach output.log as they happen, not when its buffer
            # fills or it exits (its stdout is a file, not a terminal).
            "PYTHONUNBUFFERED": "1",
        })
        env.pop("FALCON_SCRIPT", None)
        if script is not None:
            env["FALCON_SCRIPT"] = str(script)
        return env

    def put_results(self, results: Path) -> None:
        """Put the results file to `{result_path}{name}`: a plain copy for file://, for gs://
        a write under a generation precondition (a previous attempt's object is replaced
        deliberately, a retry never writes twice).

        Raises:
            OSError, UploadConflict, google.api_core.exceptions.GoogleAPICallError: not put.
        """
        url = self.result_path + results.name
        if self.local_log:
            store_for(url).put_file(results, url)
        else:
            writer_for(url).put(results)

    def put_outcome(self, exit_file: Path, url: str) -> None:
        """Put the exit status file to `url` (beside the results), as the results are put.

        Raises:
            OSError, UploadConflict, google.api_core.exceptions.GoogleAPICallError: not put.
        """
        if url.startswith("file:"):
            store_for(url).put_file(exit_file, url)
        else:
            writer_for(url).put(exit_file)

    def terminate(self) -> None:
        """SIGTERM to the command's group and to every process below this runner, SIGKILL to
        both after `grace_seconds` (in a thread).

        The runner is a child subreaper (`core.processes.proctree`), so a process the command detached
        with `setsid` (out of its group) is still below the runner and is stopped too.
        """
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        grace = float(self.spec.get("grace_seconds", 5.0))
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        signal_descendants(signal.SIGTERM)

        def later():
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
            try:  # the group may outlive its leader
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            signal_descendants(signal.SIGKILL)

        threading.Thread(target=later, daemon=True).start()

    def on_sigterm(self, signum, frame) -> None:
        """The backend stops the run: stop the command, then finish (reason Stopped)."""
        self.stopping.set()
        self.terminate()

    def execute(self) -> dict:
        """Fetch, run, put results; return the exit status dict (never raises for the
        command's failures)."""
        input_dir, output_dir = self.work / "input", self.work / "output"
        for folder in (input_dir, output_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.open_log() as log:
            if int(self.spec.get("attempt") or 1) > 1:
                self.say(log, f"attempt {self.spec['attempt']}: this log replaces the one of "
                              "the earlier attempt")
            if note := self.resources_note():
                self.say(log, note)
            try:
                files = fetch_tree(self.spec["artifact_path"], input_dir)
            except Exception as exc:
                self.say(log, f"cannot fetch the artifact {self.spec['artifact_path']}: {exc}")
                self.upload_log()
                return {"exit_code": None, "reason": FETCH_FAILED,
                        "message": f"cannot fetch the artifact: {exc}"}
            self.say(log, f"fetched {files} file{'' if files == 1 else 's'} of "
                          f"{self.spec['artifact_path']}")
            script = self.save_script()
            timeout = float(self.spec.get("timeout_seconds") or 3600)
            self.proc = subprocess.Popen(
                ["sh", "-c", self.spec["command"]], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, cwd=self.work, process_group=0,
                env=self.environment(input_dir, output_dir, script))
            write_atomic(self.spec["child_file"], json.dumps(
                {"pid": self.proc.pid, "start_time": _start_time(self.proc.pid)}))
            deadline = time.monotonic() + timeout
            interval = float(self.spec.get("log_upload_seconds", 5.0))
            timed_out = False
            while True:
                try:
                    code = self.proc.wait(min(interval, max(0.01, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    self.upload_log()
                    if time.monotonic() >= deadline and not timed_out:
                        timed_out = True
                        self.say(log, f"timed out after {timeout:g} s: stopping the command")
                        self.terminate()
                        deadline = float("inf")
            # The run is over when its command is: what it left running (a `setsid` helper,
            # adopted by this subreaper) is stopped now, as a container's processes end with
            # the container.
            signal_descendants(signal.SIGKILL)
            reap_orphans()
            plugin = self.spec.get("plugin_name") or ""
            results = output_dir / f"{plugin or 'result'}.jsonl"
            put_error = ""
            if results.is_file():
                try:
                    self.put_results(results)
                except Exception as exc:
                    put_error = f"cannot put {results.name} to {self.result_path}: {exc}"
                    self.say(log, put_error)
            self.say(log, f"the command ended with exit code {code}" if code >= 0
                     else f"the command was {describe_exit(code)}")
        self.upload_log()
        if timed_out:
            return {"exit_code": code, "reason": TIMEOUT,
                    "message": f"timed out after {timeout:g} s"}
        if self.stopping.is_set():
            return {"exit_code": code, "reason": STOPPED,
                    "message": f"stopped ({describe_exit(code)})"}
        if code != 0:
            # A negative code is a signal (Popen's -N): "terminated by SIGKILL", not "code -9".
            return {"exit_code": code, "reason": NON_ZERO_EXIT,
                    "message": f"exited with code {code}" if code >= 0 else describe_exit(code)}
        if put_error:
            return {"exit_code": code, "reason": NO_RESULTS, "message": put_error}
        if plugin and not results.is_file():
            return {"exit_code": code, "reason": NO_RESULTS,
                    "message": f"plugin {plugin} exited 0 without writing {results.name}"}
        return {"exit_code": code, "reason": "", "message": ""}


def _start_time(pid: int) -> int:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat field 22), -1 if gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return -1
    return int(data[data.rfind(b")") + 2:].split()[19])


def termination_message(status: dict) -> str:
    """The exit status as JSON of at most TERMINATION_MESSAGE_MAX bytes: the message (whose
    end is the log tail) is cut from its start until it fits, so the JSON stays whole."""
    status = dict(status)
    message = status.get("message") or ""
    while True:
        text = json.dumps(status)
        if len(text.encode()) <= TERMINATION_MESSAGE_MAX or not message:
            return text
        excess = len(text.encode()) - TERMINATION_MESSAGE_MAX
        message = message[max(excess + 8, len(message) // 8):]
        status["message"] = "[...] " + message


def pod_exit_code(status: dict) -> int:
    """The process exit code in an analysis Pod: 0 on success, the command's code when it
    failed with one, 1 otherwise (fetch failed, no results, stopped...)."""
    if not status.get("reason"):
        return 0
    code = status.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1


def main(argv: list[str] | None = None) -> int:
    """Run the spec named by `--spec` (or held by the environment variable `--spec-env`);
    write its exit status file. Returns 0 (the status file, not this process's exit code,
    tells the outcome), or with `--termination-log` (in a Pod) `pod_exit_code`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec", help="the run's spec.json")
    source.add_argument("--spec-env", help="the environment variable holding the spec's JSON")
    parser.add_argument("--termination-log", default="",
                        help="write the exit status here too (a Pod's terminationMessagePath) "
                        "and exit non-zero on failure")
    args = parser.parse_args(argv)
    try:
        configure()
    except ValueError as exc:  # a bad FALCON_LOG_FORMAT must not lose the run: readable lines
        configure("text")
        log.warning("%s", exc)
    if args.spec_env:
        spec = json.loads(os.environ[args.spec_env])
    else:
        spec = json.loads(Path(args.spec).read_text(encoding="utf-8"))
    with log_context(analysis_id=spec.get("analysis_id"), exp_id=spec.get("exp_id")):
        return _run(spec, args.termination_log)


def _run(spec: dict, termination_log: str) -> int:
    """`main` once the spec is read (inside the run's log context)."""
    for key in ("work_dir", "exit_file", "child_file"):
        Path(spec[key]).parent.mkdir(parents=True, exist_ok=True)
    run = Run(spec)
    # Before the command starts: whatever it detaches stays below this runner (core.processes.proctree).
    become_subreaper()
    signal.signal(signal.SIGTERM, run.on_sigterm)
    log.info("analysis %s: run started (attempt %s)", spec.get("analysis_id"),
             spec.get("attempt", 1))
    try:
        status = run.execute()
    except Exception as exc:  # a runner bug or an unwritable folder: still say so
        log.exception("analysis %s: the runner failed", spec.get("analysis_id"))
        status = {"exit_code": None, "reason": "RunnerFailed",
                  "message": f"{type(exc).__name__}: {exc}"}
    log.info("analysis %s: run ended: %s (%s)", spec.get("analysis_id"),
             status["reason"] or "succeeded", describe_exit(status.get("exit_code")))
    if status["reason"]:
        log_tail = tail(run.log_file)
        if log_tail:
            status["message"] = f"{status['message']}; log tail:\n{log_tail}"
    status["finished_at"] = time.time()
    status["attempt"] = spec.get("attempt", 1)
    write_atomic(spec["exit_file"], json.dumps(status))
    if spec.get("exit_url"):
        try:
            run.put_outcome(Path(spec["exit_file"]), spec["exit_url"])
        except Exception as exc:  # the termination message still carries it, while the Pod lives
            log.error("cannot put the exit status to %s: %s", spec["exit_url"], exc)
    if termination_log:
        try:
            Path(termination_log).write_text(termination_message(status), encoding="utf-8")
        except OSError as exc:
            log.error("cannot write %s: %s", termination_log, exc)
        return pod_exit_code(status)
    return 0


if __name__ == "__main__":
    sys.exit(main())
