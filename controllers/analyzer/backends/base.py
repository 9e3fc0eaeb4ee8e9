"""The contract of an analysis backend: start, observe and stop one run per analysis.

A backend runs `controllers.analyzer.runner` for an analysis (a process group on the local
backend, a Pod on Kubernetes later) under a deterministic name, so a controller that restarts
finds its runs again by name instead of starting them twice (docs/analyzer.md, "Recovery").
Nothing else in the controller knows how a run executes: a Kubernetes Pod backend implements
this class and is passed to `AnalyzerController`, with no change elsewhere.
"""
from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field

# RunState.phase values. UNKNOWN: the run could not be read this time (the cluster did not
# answer); nothing about it may be concluded, it keeps its slot and is read again next tick.
PENDING, RUNNING, SUCCEEDED, FAILED, MISSING, UNKNOWN = (
    "pending", "running", "succeeded", "failed", "missing", "unknown")
# RunState.reason values the runner and the backends write.
NON_ZERO_EXIT, TIMEOUT, KILLED, NO_RESULTS, FETCH_FAILED, STOPPED = (
    "NonZeroExit", "Timeout", "Killed", "NoResults", "FetchFailed", "Stopped")
RUN_NAME_MAX = 63
LOG_TAIL_BYTES = 4096
LOG_TAIL_LINES = 20
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


class BackendError(RuntimeError):
    """A backend call failed (cannot spawn, cannot read its state): the message says why."""


class RunRefused(BackendError):
    """The cluster refused the run for good (an invalid spec, forbidden): starting it again
    cannot help, so the analysis fails. A plain `BackendError` from `start` is transient (the
    cluster did not answer, 429, 5xx): the run is started again after a back-off."""


class RunConflict(RunRefused):
    """A run of this name exists but belongs to another analysis: it is never adopted."""


@dataclass(frozen=True)
class RunSpec:
    """Everything a run needs, written to the run (spec.json on the local backend).

    Attributes:
        analysis_id: the record's id (a DNS-1123 label).
        exp_id: the experiment analysed.
        command: a shell command run by `sh -c` (the plugin's, from the catalog, or the user's).
        artifact_path: the artifact folder (file:// or gs://) copied to FALCON_INPUT_DIR.
        result_path: the output folder ({root}/analysis/{exp}/{id}/, ends with '/').
        plugin_name: "" for a command without a plugin; names the results file.
        script: the user's script (UTF-8), "" when none; saved as `script`, mode 0700.
        script_name: the file name the script is also saved under (e.g. `run.py`), "" for none.
        timeout_seconds: the run's time limit in seconds (the plugin's, or the online default).
        resources: cpu_request, cpu_limit, memory_request, memory_limit (Kubernetes quantities);
            the local backend ignores them (the log's first line says so), a Pod backend sets
            them on its container.
        attempt: the run's attempt number (1 for the first run).
    """

    analysis_id: str
    exp_id: int
    command: str
    artifact_path: str
    result_path: str
    plugin_name: str = ""
    script: str = ""
    script_name: str = ""
    timeout_seconds: int = 3600
    resources: dict[str, str] = field(default_factory=dict)
    attempt: int = 1


@dataclass(frozen=True)
class StartResult:
    """What `start` did: `adopted` is True when a run of that name already existed."""

    run_name: str
    adopted: bool
    object_name: str = ""


@dataclass(frozen=True)
class RunState:
    """What the backend sees of one analysis' run.

    Attributes:
        phase: pending, running, succeeded, failed, or missing (no run of that name).
        alive: whether anything of the run still runs; the analysis keeps its queue slot while
            it is True, whatever its phase (a failed run still stopping holds its slot).
        exit_code: the command's exit code once it ended (None otherwise or when unknown).
        reason: why it failed: NonZeroExit, Timeout, Killed, NoResults, FetchFailed, Stopped.
        message: a sentence, with the tail of the run's log on failure.
        gone: the run's object vanished without the cluster saying how it ended (a Pod
            deleted or garbage-collected): the outcome the run stored itself
            (`stored_outcome`) decides over this state.
    """

    phase: str
    alive: bool = False
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    gone: bool = False

    @property
    def ended(self) -> bool:
        """Whether the run reached succeeded or failed."""
        return self.phase in (SUCCEEDED, FAILED)


MISSING_STATE = RunState(phase=MISSING)
UNKNOWN_STATE = RunState(phase=UNKNOWN, alive=True)


def run_name_for(analysis_id: str) -> str:
    """Return the deterministic DNS-1123 label naming the run of `analysis_id`.

    `analysis-<id>` lower-cased with other characters squeezed to '-'; a name too long for a
    label (63 characters) is cut and ends in 8 hex of sha256(analysis_id), so two ids still
    differ.
    """
    name = re.sub("-+", "-", _NOT_DNS.sub("-", f"analysis-{analysis_id}".lower())).strip("-")
    if len(name) <= RUN_NAME_MAX:
        return name
    digest = hashlib.sha256(analysis_id.encode()).hexdigest()[:8]
    return f"{name[:RUN_NAME_MAX - 9].rstrip('-')}-{digest}"


def log_tail(data: bytes) -> str:
    """The last LOG_TAIL_LINES lines of the last LOG_TAIL_BYTES of `data`, decoded."""
    text = data[-LOG_TAIL_BYTES:].decode("utf-8", errors="replace")
    return "\n".join(text.rstrip("\n").splitlines()[-LOG_TAIL_LINES:])


class AnalysisBackend(ABC):
    """Start, observe and stop runs of `controllers.analyzer.runner`, one per analysis.

    Every method may raise `BackendError`; `start` and `stop` are the writes (fenced under
    leader election).
    """

    name = "backend"

    def run_name(self, analysis_id: str) -> str:
        """The deterministic DNS-1123 name of the analysis' run (`run_name_for`)."""
        return run_name_for(analysis_id)

    @abstractmethod
    def start(self, spec: RunSpec) -> StartResult:
        """Start the run of `spec.analysis_id`, or adopt the live run of that name.

        Idempotent: a run of that name that is alive or ended with an exit status is adopted,
        never started twice. A run that is gone without an exit status is started again.

        Raises:
            RunConflict: the run of that name belongs to another analysis id.
            RunRefused: the cluster refused the run for good.
            BackendError: the run cannot be started now (transient: try again later).
        """

    @abstractmethod
    def observe(self, analysis_ids: Iterable[str]) -> dict[str, RunState]:
        """The state of each analysis' run, from one scan of the cluster (missing: no run;
        unknown: it could not be read this time).

        Raises:
            BackendError: the scan failed: nothing may be concluded about any run.
        """

    def stored_outcome(self, analysis_id: str, result_path: str,
                       attempt: int) -> RunState | None:
        """The outcome run `attempt` of the analysis stored beside its results, when its
        object is gone (`RunState.gone`, or missing); None when it stored none (it did not
        finish). Backends whose run state outlives the run (the local backend's exit.json)
        have nothing more to say: None.

        Raises:
            BackendError: the store could not be read (nothing may be concluded).
        """
        return None

    @abstractmethod
    def stop(self, analysis_id: str) -> bool:
        """Stop the run (graceful, then forced after a grace period) and remove its traces.

        Returns True only once nothing of the run is left (also when there was none); False
        while something still runs: call again later.
        """

    @abstractmethod
    def list_runs(self) -> list[str]:
        """The analysis ids of every run the backend holds (alive or not): orphans a restarted
        controller must stop when their record is terminal or gone."""

    @abstractmethod
    def read_log(self, analysis_id: str, result_path: str, offset: int = 0,
                 limit: int = 1 << 20) -> bytes:
        """Up to `limit` bytes of the run's output.log from byte `offset` (b"" when none)."""
