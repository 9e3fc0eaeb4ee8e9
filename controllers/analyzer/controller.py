"""The analyzer controller's loop: queues, offline discovery, runs, recovery (docs/analyzer.md).

`AnalyzerController.tick()` is level-triggered, like `controllers.exp_controller`: every tick
reads the records it acts on again (through AnalysisRecordService, never the database) and the
runs' states (one backend scan), and moves each analysis one step:

1. first tick only: rebuild the queues from the pending records; hold a slot for every running
   record (its run is re-attached below, or recovered); stop runs the backend still holds whose
   record is terminal or gone ("Recovery");
2. every `poll_seconds`: offline discovery (ListExpsAwaitingAnalysis with the catalog's plugin ->
   artifact types map, CreateAnalysisRecord offline for each triple; ALREADY_EXISTS is fine),
   and pending records not queued yet are queued;
3. observe the running records' runs and write outcomes (expected_status running, so a cancel
   that raced wins); a run whose object is gone ends by the outcome it stored itself
   (`AnalysisBackend.stored_outcome`), else failed as the backend says (a Pod deleted or
   vanished) or, never seen by this process, it is started again after a capped exponential
   back-off, at most `max_attempts` runs in all, then the record fails (RunLost); a run the
   backend could not read (unknown) is left as it is;
4. stop runs whose record is no longer running (cancelled, failed, deleted); a slot is released
   only when the backend says nothing of the run is alive;
5. admit from the queues while slots are free, users taking turns under a per-user cap
   (`queues.AnalysisQueues`): mark running (attempts + 1, cluster_object_name) with
   expected_status pending, then start the run.

One analysis never has two runs: a run is (re)started only when the backend reports none alive.

The cluster's failures are transient (docs/analyzer.md, "Only what the controller knows"): a
`BackendError` out of recovery, the scan or a stop fails the tick's cluster work (logged,
`cluster_errors` in the stats, counted by `controllers.metrics`), nothing is concluded from it,
and the next cluster work waits the capped back-off; a start the cluster refused for now
(`BackendError` but not `RunRefused`) is tried again after the same back-off without counting
an attempt, at most `max_start_retries` times, while a refusal for good fails the analysis.
AnalyzerService (`server.py`) shares this object: every access holds `self.lock`.

Every step about one analysis runs inside its `about` block (`core.observability.logs.log_context`), so every
line logged meanwhile, the backends' and the API client's included, carries `analysis_id` and,
once a record of it was read, `exp_id` as fields, as the exp controller's lines carry `exp_id`.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from artifacts.store import store_for
from core.errors import Conflict, NotFound
from core.observability.logs import log_context

from .backends.base import MISSING, UNKNOWN, AnalysisBackend, BackendError, RunRefused, RunSpec
from .backends.base import PENDING as RUN_PENDING
from .backends.base import RUNNING as RUN_RUNNING
from .backends.base import SUCCEEDED as RUN_SUCCEEDED
from .contract import (
    FAILED, OFFLINE, PENDING, RUNNING, SKIPPED, SUCCEEDED, AlreadyExists, AnalysisRecordAPI,
    AnalysisView, AwaitingView,
)
from .queues import Admission, AnalysisQueues

log = logging.getLogger("falcon.controllers.analyzer")

ONLINE_TIMEOUT_SECONDS = 3600
RUN_LOST = "RunLost"
START_FAILED = "StartFailed"
NO_INPUTS = "NoInputs"
MESSAGE_MAX = 4000
RESOURCE_KEYS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")


@dataclass(frozen=True)
class AnalyzerConfig:
    """The controller's settings (falcon_site/settings/analysis.py).

    Attributes:
        result_root: `FALCON_ANALYSIS_ROOT`, sent on create as `result_root`.
        limits: `FALCON_ANALYSIS_CONCURRENCY` (queue -> runs at once).
        max_running_per_user: `FALCON_ANALYZER_MAX_RUNNING_PER_USER`: runs of one queue one
            user may have at once; None: half the queue's slots rounded up (`per_user_limits`).
        poll_seconds: seconds between two offline discovery polls.
        max_attempts: runs started for one analysis before recovery gives up.
        backoff_seconds, backoff_max_seconds: the capped exponential back-off before a lost
            run is started again: min(backoff * 2**(attempts - 1), max), in seconds.
        online_timeout_seconds: the time limit of a command without a plugin.
        discovery_limit: triples asked for per offline poll.
        max_start_retries: starts the cluster refused for now (429, 5xx, no answer) tried
            again, after the same back-off, before the analysis fails StartFailed; they do not
            count as attempts (no run started).
    """

    result_root: str
    limits: Mapping[str, int]
    poll_seconds: float = 10.0
    max_attempts: int = 3
    backoff_seconds: float = 2.0
    backoff_max_seconds: float = 60.0
    online_timeout_seconds: int = ONLINE_TIMEOUT_SECONDS
    discovery_limit: int = 100
    max_running_per_user: int | None = None
    max_start_retries: int = 10

    @classmethod
    def from_settings(cls) -> AnalyzerConfig:
        """The config of `django.conf.settings` (FALCON_ANALYSIS_*)."""
        from django.conf import settings

        return cls(result_root=settings.FALCON_ANALYSIS_ROOT,
                   limits=dict(settings.FALCON_ANALYSIS_CONCURRENCY),
                   poll_seconds=settings.FALCON_ANALYSIS_POLL_SECONDS,
                   max_attempts=settings.FALCON_ANALYSIS_MAX_ATTEMPTS,
                   backoff_seconds=settings.FALCON_ANALYSIS_BACKOFF_SECONDS,
                   backoff_max_seconds=settings.FALCON_ANALYSIS_BACKOFF_MAX_SECONDS,
                   max_running_per_user=settings.FALCON_ANALYZER_MAX_RUNNING_PER_USER,
                   max_start_retries=settings.FALCON_ANALYSIS_MAX_START_RETRIES)

    def per_user_limits(self) -> dict[str, int]:
        """Queue -> runs one user may have at once in it: `max_running_per_user`, else half
        the queue's slots rounded up (at least 1), so one user's backlog leaves slots free
        for the others."""
        from core.domain.fairshare import default_per_user

        return {queue: self.max_running_per_user or default_per_user(int(limit))
                for queue, limit in self.limits.items()}

    def backoff(self, attempts: int) -> float:
        """Seconds to wait before run number `attempts + 1` (recovery, capped exponential)."""
        return min(self.backoff_seconds * 2 ** max(0, attempts - 1), self.backoff_max_seconds)


def _cut(text: str, limit: int = MESSAGE_MAX) -> str:
    return text if len(text) <= limit else text[:limit - 14] + " ...[cut]"


class AnalyzerController:
    """The analyzer's reconciler (see the module docstring).

    Args:
        api: the record calls (`AnalysisRecordAPI`; fenced under leader election).
        backend: where runs execute (`AnalysisBackend`; start/stop fenced).
        catalog: plugin name -> `plugins.catalog.Plugin` (read once at start-up).
        config: `AnalyzerConfig`.
        clock: monotonic seconds (tests may pass a fake).
    """

    name = "analyzer"

    def __init__(self, api: AnalysisRecordAPI, backend: AnalysisBackend, catalog: Mapping,
                 config: AnalyzerConfig, *, clock: Callable[[], float] = time.monotonic):
        self.api = api
        self.backend = backend
        self.catalog = dict(catalog)
        self.config = config
        self.clock = clock
        self.queues = AnalysisQueues(config.limits, config.per_user_limits())
        self.lock = threading.RLock()
        self.wake = threading.Event()
        # analysis id -> resource override (Kubernetes quantities), memory only, never stored.
        self.overrides: dict[str, dict[str, str]] = {}
        self.active: dict[str, str] = {}      # analysis id -> queue: runs holding a slot
        self.stopping: set[str] = set()       # runs to stop: their record is not running
        self.retry_at: dict[str, float] = {}  # lost runs to start again, at this clock time
        self.created: dict[str, Any] = {}     # analysis id -> created_at (queue order)
        self.exp_ids: dict[str, int] = {}     # analysis id -> exp id, of the records read
        # Starts refused for now: analysis id -> (clock time to try again, refusals so far).
        self.start_retry: dict[str, tuple[float, int]] = {}
        self.cluster_failures = 0             # cluster work failed this many ticks in a row
        self.cluster_retry_at = 0.0           # no cluster work before this clock time
        self.recovered = False
        self.next_poll = 0.0

    def reset(self) -> None:
        """Forget the queues, slots and retries, so the next tick recovers from the records.

        Called when this replica becomes the leader (again): what it knew from an earlier term
        is stale, since another leader may have admitted, finished or cancelled analyses since.
        Resource overrides are kept (they live only in the memory of the replica that took the
        request).
        """
        with self.lock:
            self.queues = AnalysisQueues(self.config.limits, self.config.per_user_limits())
            self.active.clear()
            self.stopping.clear()
            self.retry_at.clear()
            self.created.clear()
            self.exp_ids.clear()
            self.start_retry.clear()
            self.cluster_failures = 0
            self.cluster_retry_at = 0.0
            self.recovered = False
            self.next_poll = 0.0
            backend_reset = getattr(self.backend, "reset", None)
            if callable(backend_reset):  # e.g. the Pod backend's memory of Pods it saw
                backend_reset()

    # -- helpers ----------------------------------------------------------------------------

    @contextmanager
    def about(self, analysis_id: str, exp_id: int | None = None) -> Iterator[None]:
        """Run the block inside the analysis' log context: every line carries `analysis_id`
        and its `exp_id` (the one given, remembered for the analysis' later lines, or the one
        of the last record of it read).

        Args:
            analysis_id: the analysis' id (`an-...`).
            exp_id: its experiment's id, when the caller has it.
        """
        if exp_id:
            self.exp_ids[analysis_id] = exp_id
        with log_context(analysis_id=analysis_id, exp_id=self.exp_ids.get(analysis_id)):
            yield

    def exp_of(self, analysis_id: str) -> int | None:
        """The experiment id of an analysis whose record this controller read, else None."""
        return self.exp_ids.get(analysis_id)

    def plugin_artifact_types(self) -> dict[str, tuple[str, ...]]:
        """The catalog's plugin -> artifact types map sent to ListExpsAwaitingAnalysis."""
        return {name: tuple(p.artifact_types) for name, p in self.catalog.items()}

    def enqueue(self, record: AnalysisView) -> bool:
        """Queue a pending record by (created_at, analysis_id); False when already known."""
        with self.lock:
            self.exp_ids[record.analysis_id] = record.exp_id
            if record.analysis_id in self.active or record.analysis_id in self.stopping:
                return False
            self.created[record.analysis_id] = record.created_at
            return self.queues.enqueue(record.analysis_type, record.analysis_id,
                                       record.created_at, record.creator_email)

    def spec_for(self, record: AnalysisView, attempt: int) -> RunSpec:
        """The `RunSpec` of a record (with its script): the plugin's timeout and resources,
        the in-memory resource override over them."""
        plugin = self.catalog.get(record.plugin_name) if record.plugin_name else None
        resources: dict[str, str] = {}
        if plugin is not None:
            resources = {key: getattr(plugin.resources, key) for key in RESOURCE_KEYS}
        resources.update({k: v for k, v in self.overrides.get(record.analysis_id, {}).items()
                          if v})
        result_path = record.result_path if record.result_path.endswith("/") \
            else record.result_path + "/"
        return RunSpec(
            analysis_id=record.analysis_id, exp_id=record.exp_id, command=record.command,
            artifact_path=record.artifact_path, result_path=result_path,
            plugin_name=record.plugin_name, script=record.script_content,
            script_name=record.script_name,
            timeout_seconds=plugin.timeout_seconds if plugin is not None
            else self.config.online_timeout_seconds,
            resources=resources, attempt=attempt)

    def _fail(self, analysis_id: str, reason: str, message: str) -> None:
        """running -> failed; a record no longer running (a cancel won) is left as it is."""
        with self.about(analysis_id):
            try:
                self.api.update_record(analysis_id, expected_status=RUNNING, status=FAILED,
                                       reason=reason, error_message=_cut(message))
            except (Conflict, NotFound) as exc:
                log.info("analysis %s: not marked failed (%s): %s", analysis_id, reason, exc)

    # -- the loop ---------------------------------------------------------------------------

    def tick(self) -> dict[str, int]:
        """One reconciliation pass (see the module docstring); returns counters.

        Raises:
            ApiUnavailable: the API server cannot be reached (transient: the loop retries).
        """
        stats = {"created": 0, "admitted": 0, "succeeded": 0, "failed": 0, "restarted": 0,
                 "stopped": 0, "cluster_errors": 0}
        with self.lock:
            now = self.clock()
            if now < self.cluster_retry_at:
                return stats  # backing off after a failed cluster call
            try:
                if not self.recovered:
                    self.recover()
                    self.recovered = True
                if now >= self.next_poll:
                    stats["created"] = self.discover()
                    self.next_poll = now + self.config.poll_seconds
                self.observe(stats)
                self.stop_finished(stats)
                stats["admitted"] = self.admit()
            except BackendError as exc:
                # The cluster did not answer (or refused a read): a failed tick, not a fact
                # about any run. The process stays up; what was written stays written.
                stats["cluster_errors"] += 1
                self.cluster_failures += 1
                wait = self.config.backoff(self.cluster_failures)
                self.cluster_retry_at = self.clock() + wait
                log.warning("analyzer: cluster call failed (%d in a row), nothing concluded; "
                            "next try in %.1f s: %s", self.cluster_failures, wait, exc)
                return stats
            self.cluster_failures = 0
        return stats

    def recover(self) -> None:
        """Rebuild the queues and the slots after a start (docs/analyzer.md, "Recovery").

        Raises:
            BackendError: the backend's runs could not be listed (read first, so nothing
                was rebuilt: the next tick recovers again).
        """
        runs = self.backend.list_runs()
        for record in self.api.list_records(statuses=(PENDING,)):
            self.enqueue(record)
        running = {r.analysis_id: r for r in self.api.list_running()}
        for analysis_id, record in running.items():
            self.exp_ids[analysis_id] = record.exp_id
            self.queues.hold(record.analysis_type, analysis_id, record.creator_email)
            self.active[analysis_id] = record.analysis_type
        for analysis_id in runs:
            if analysis_id in running:
                continue
            with self.about(analysis_id):
                try:
                    record = self.api.get_record(analysis_id)
                except NotFound:
                    record = None
                if record is not None:
                    self.exp_ids[analysis_id] = record.exp_id
                if record is not None and record.status == PENDING:
                    continue  # admission adopts it (start is idempotent)
                # Terminal or deleted while no controller ran (a cancel written straight to the
                # database): stop its run, holding the slot of a known record until it is gone.
                if record is not None:
                    self.queues.hold(record.analysis_type, analysis_id, record.creator_email)
                    self.active[analysis_id] = record.analysis_type
                self.stopping.add(analysis_id)
        log.info("analyzer recovered: %d pending, %d running, %d runs to stop",
                 sum(len(self.queues.pending(q)) for q in self.queues.limits),
                 len(running), len(self.stopping))

    def discover(self) -> int:
        """Queue pending records not queued yet (and drop queued ones no longer pending);
        create the offline records of ListExpsAwaitingAnalysis. Returns records created."""
        pending = self.api.list_records(statuses=(PENDING,))
        pending_ids = {r.analysis_id for r in pending}
        for queue in self.queues.limits:
            for analysis_id in self.queues.pending(queue):
                if analysis_id not in pending_ids:
                    self.queues.remove(analysis_id)
        for record in pending:
            self.enqueue(record)
        created = 0
        if not self.catalog:
            return 0
        for item in self.api.list_awaiting(self.plugin_artifact_types(),
                                           self.config.discovery_limit):
            plugin = self.catalog.get(item.plugin_name)
            if plugin is None:
                continue
            with log_context(exp_id=item.exp_id, artifact_id=item.artifact_id):
                try:
                    found = self.input_present(plugin, item)
                except Exception as exc:  # noqa: BLE001 - a store error: asked again next poll
                    log.warning("offline %s of exp %s not created: cannot list its artifact "
                                "%s: %s", plugin.name, item.exp_id, item.artifact_path, exc)
                    continue
                try:
                    record = self.api.create_record(
                        exp_id=item.exp_id, analysis_type=OFFLINE, plugin_name=plugin.name,
                        command=plugin.command, artifact_id=item.artifact_id,
                        creator_email=item.creator_email, result_root=self.config.result_root,
                        name=f"{plugin.name} of {item.exp_name}"[:200],
                        plugin_artifact_types=tuple(plugin.artifact_types))
                except AlreadyExists:
                    continue  # idempotent on (artifact, plugin)
                created += 1
                with self.about(record.analysis_id, record.exp_id):
                    if found is None:
                        self._skip(record, plugin)
                        continue
                    log.info("analysis %s: created offline (%s of exp %s)", record.analysis_id,
                             plugin.name, item.exp_id)
                    self.enqueue(record)
        return created

    @staticmethod
    def input_present(plugin, item: AwaitingView) -> str | None:
        """The first file of the artifact `plugin` reads (its catalog `inputs` globs), or None.

        The listing stops at the first match (`ArtifactStore.find_first`); a plugin that
        declares no inputs takes any artifact ("" is returned without listing).

        Raises:
            ValueError, OSError, google.api_core.exceptions.GoogleAPICallError: the artifact
                cannot be listed (the caller asks again on the next poll).
        """
        if not plugin.inputs:
            return ""
        return store_for(item.artifact_path).find_first(item.artifact_path, plugin.reads)

    def _skip(self, record: AnalysisView, plugin) -> None:
        """pending -> skipped: the artifact holds none of the plugin's inputs.

        The record is kept, in a terminal state, so ListExpsAwaitingAnalysis never offers this
        (artifact, plugin) again: the artifact is listed once, not on every poll. A failed
        transition (the API server is down) leaves the record pending; the next poll queues it
        like any other, and the plugin then runs and fails as it would have.
        """
        message = (f"the artifact holds none of the files {plugin.name} reads "
                   f"({', '.join(plugin.inputs)}); nothing was run")
        try:
            self.api.update_record(record.analysis_id, expected_status=PENDING,
                                   status=SKIPPED, reason=NO_INPUTS, error_message=message)
        except (Conflict, NotFound) as exc:
            log.info("analysis %s: not marked skipped: %s", record.analysis_id, exc)
            return
        log.info("analysis %s: skipped (%s of exp %s): %s", record.analysis_id, plugin.name,
                 record.exp_id, message)

    def observe(self, stats: dict[str, int]) -> None:
        """Re-attach, finish or recover every running record's run; mark runs to stop."""
        running = {r.analysis_id: r for r in self.api.list_running()}
        ids = set(self.active) | set(running) | self.stopping
        states = self.backend.observe(sorted(ids))
        now = self.clock()
        for analysis_id, record in running.items():
            if analysis_id in self.stopping:
                continue
            with self.about(analysis_id, record.exp_id):
                self._observe_one(record, states[analysis_id], now, stats)
        for analysis_id in list(self.active):
            if analysis_id in running or analysis_id in self.stopping:
                continue
            with self.about(analysis_id):
                try:
                    record = self.api.get_record(analysis_id)
                except NotFound:
                    record = None
                if record is None or record.terminal:  # cancelled, failed or deleted elsewhere
                    self.retry_at.pop(analysis_id, None)
                    self.stopping.add(analysis_id)

    def _observe_one(self, record: AnalysisView, state, now: float,
                     stats: dict[str, int]) -> None:
        """One running record and its run's `RunState`: re-attach, finish, or recover it."""
        analysis_id = record.analysis_id
        if analysis_id not in self.active:  # running with no slot: re-attach
            self.queues.hold(record.analysis_type, analysis_id)
            self.active[analysis_id] = record.analysis_type
        if state.phase == UNKNOWN:
            return  # could not be read: nothing concluded, it keeps its slot
        if state.phase == MISSING and analysis_id in self.start_retry:
            self._retry_start(record, now, stats)
            return
        if state.gone or state.phase == MISSING:
            try:
                stored = self.backend.stored_outcome(analysis_id, record.result_path,
                                                     record.attempts)
            except BackendError as exc:
                log.warning("analysis %s: its run is gone and its stored outcome cannot be "
                            "read, nothing concluded this tick: %s", analysis_id, exc)
                return
            if stored is not None:
                log.info("analysis %s: its run is gone; it had finished (%s, exit code %s)",
                         analysis_id, stored.reason or "succeeded", stored.exit_code)
                state = stored
        if state.phase in (RUN_PENDING, RUN_RUNNING):
            self.retry_at.pop(analysis_id, None)
            self.start_retry.pop(analysis_id, None)
        elif state.ended:
            if state.phase == RUN_SUCCEEDED:
                try:
                    self.api.update_record(analysis_id, expected_status=RUNNING,
                                           status=SUCCEEDED, reason="", error_message="")
                    log.info("analysis %s: succeeded", analysis_id)
                except (Conflict, NotFound) as exc:
                    log.info("analysis %s: success not written: %s", analysis_id, exc)
                stats["succeeded"] += 1
            else:
                log.info("analysis %s: its run failed (%s)", analysis_id,
                         state.reason or "RunFailed")
                self._fail(analysis_id, state.reason or "RunFailed",
                           state.message or f"the run failed ({state.reason})")
                stats["failed"] += 1
            self.stopping.add(analysis_id)
        elif state.phase == MISSING:
            self._recover_lost(record, now, stats)

    def _recover_lost(self, record: AnalysisView, now: float, stats: dict[str, int]) -> None:
        """A running record with no run: start it again after the back-off, or give up."""
        analysis_id = record.analysis_id
        due = self.retry_at.get(analysis_id)
        if due is None:
            if record.attempts >= self.config.max_attempts:
                self._fail(analysis_id, RUN_LOST,
                           f"the run was lost {record.attempts} times "
                           f"(attempts {record.attempts} of {self.config.max_attempts}, "
                           "FALCON_ANALYSIS_MAX_ATTEMPTS); giving up")
                stats["failed"] += 1
                self.stopping.add(analysis_id)
            else:
                wait = self.config.backoff(record.attempts)
                self.retry_at[analysis_id] = now + wait
                log.warning("analysis %s: run lost (attempt %d); starting it again in %.1f s",
                            analysis_id, record.attempts, wait)
            return
        if now < due:
            return
        del self.retry_at[analysis_id]
        full = self.api.get_record(analysis_id, with_script=True)
        attempt = full.attempts + 1
        try:
            self.api.update_record(analysis_id, expected_status=RUNNING, attempts=attempt)
        except (Conflict, NotFound):
            return  # cancelled meanwhile: the next tick stops it
        self._start(full, attempt)
        stats["restarted"] += 1

    def _retry_start(self, record: AnalysisView, now: float, stats: dict[str, int]) -> None:
        """Start again, once its back-off passed, a run whose start the cluster refused for
        now; the same attempt (no run was started)."""
        due, _refusals = self.start_retry[record.analysis_id]
        if now < due:
            return
        try:
            full = self.api.get_record(record.analysis_id, with_script=True)
        except NotFound:
            return  # deleted meanwhile: the next tick stops it
        self._start(full, full.attempts)
        stats["restarted"] += 1

    def _start(self, record: AnalysisView, attempt: int) -> None:
        """Start the record's run; a refusal for good fails it (StartFailed), a refusal for
        now is tried again after the back-off (`start_retry`), at most `max_start_retries`
        times."""
        analysis_id = record.analysis_id
        with self.about(analysis_id, record.exp_id):
            try:
                self.backend.start(self.spec_for(record, attempt))
                log.info("analysis %s: run %s started (attempt %d)", analysis_id,
                         self.backend.run_name(analysis_id), attempt)
                self.start_retry.pop(analysis_id, None)
            except RunRefused as exc:
                log.error("analysis %s: cannot start its run: %s", analysis_id, exc)
                self.start_retry.pop(analysis_id, None)
                self._fail(analysis_id, START_FAILED, f"cannot start the run: {exc}")
                self.stopping.add(analysis_id)
            except BackendError as exc:
                refusals = self.start_retry.get(analysis_id, (0.0, 0))[1] + 1
                if refusals > self.config.max_start_retries:
                    log.error("analysis %s: cannot start its run (%d tries): %s", analysis_id,
                              refusals, exc)
                    self.start_retry.pop(analysis_id, None)
                    self._fail(analysis_id, START_FAILED,
                               f"cannot start the run ({refusals} tries, "
                               f"FALCON_ANALYSIS_MAX_START_RETRIES): {exc}")
                    self.stopping.add(analysis_id)
                    return
                wait = self.config.backoff(refusals)
                self.start_retry[analysis_id] = (self.clock() + wait, refusals)
                log.warning("analysis %s: the cluster refused its run for now (%d of %d); "
                            "trying again in %.1f s: %s", analysis_id, refusals,
                            self.config.max_start_retries, wait, exc)

    def stop_finished(self, stats: dict[str, int]) -> None:
        """Stop the runs of records no longer running; release a slot when nothing is left."""
        for analysis_id in sorted(self.stopping):
            with self.about(analysis_id):
                if not self.backend.stop(analysis_id):
                    continue
                log.debug("analysis %s: nothing of its run is left; slot released",
                          analysis_id)
            self.stopping.discard(analysis_id)
            self.active.pop(analysis_id, None)
            self.retry_at.pop(analysis_id, None)
            self.start_retry.pop(analysis_id, None)
            self.overrides.pop(analysis_id, None)
            self.created.pop(analysis_id, None)
            self.exp_ids.pop(analysis_id, None)
            self.queues.release(analysis_id)
            stats["stopped"] += 1

    def admit(self) -> int:
        """Admit pending analyses while slots are free: pending -> running, then start."""
        admitted = 0
        for admission in self.queues.admit_all():
            with self.about(admission.analysis_id):
                admitted += self._admit_one(admission)
        return admitted

    def _admit_one(self, admission: Admission) -> int:
        """Mark one admitted analysis running and start its run; 1 if it started, else 0."""
        analysis_id = admission.analysis_id
        try:
            record = self.api.get_record(analysis_id, with_script=True)
            if record.status != PENDING:
                self.queues.release(analysis_id)
                return 0
            attempt = record.attempts + 1
            script = record.script_content
            record = self.api.update_record(
                analysis_id, expected_status=PENDING, status=RUNNING, attempts=attempt,
                cluster_object_name=self.backend.run_name(analysis_id))
        except (Conflict, NotFound) as exc:  # cancelled or deleted while it waited
            log.info("analysis %s: not admitted: %s", analysis_id, exc)
            self.queues.release(analysis_id)
            self.overrides.pop(analysis_id, None)
            return 0
        except BaseException:  # the API server is down: back in its place, next tick
            user = self.queues.user_of(analysis_id) or ""
            self.queues.release(analysis_id)
            self.queues.enqueue(admission.queue, analysis_id, self.created.get(analysis_id),
                                user)
            raise
        self.active[analysis_id] = admission.queue
        self._start(dataclasses.replace(record, script_content=script), attempt)
        return 1
