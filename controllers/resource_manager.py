"""The resource manager: the ResourceManager controller (docs/cluster-behaviours.md).

Each tick lists the jobs of the clusters it serves that need cluster work (Pending, Running,
Aborting) with ListJobStates (only the fields a tick reads, an experiment's config only for
the jobs still to submit; 5,000 jobs a page), one page at a time: each page is observed (one
batched read of its jobs' states per cluster), decided and written before the next is read,
so a tick holds one page of jobs and the ids of the others (docs/decisions.md#dec-rm-pages);
a backend that must see a whole cluster at once (the local backend's admission) gets its
cluster's jobs together once the listing is read. Then:
- a Pending job with no cluster job yet is submitted (create, or adopt one that a previous run
  of this controller created: CB-3); its cluster job name is recorded. A cluster job
  that exists while no name is recorded is submitted again before its name is recorded, so
  whatever the interrupted `submit` did not finish (a Kubernetes headless Service) is made;
- the cluster state is mapped back: Running only when every replica runs,
  Succeeded when all succeeded, Failed when any failed (exit code and stderr tail in the
  message), a cluster job that vanished -> Failed with a reason that says so (CB-12); a move
  to Running, Succeeded or Failed carries the start the cluster reported (CB-25), so a job
  that went Pending -> Succeeded between two ticks still has its start and a duration;
- an Aborting job's cluster job is deleted (with its processes or pods), and the job is set
  Aborted once nothing of it is left (CB-13; a job already gone counts as done, CB-14).
The tick's writes to the API server are sent together once a cluster's jobs are handled, in
UpdateJobStatuses calls of 1,000 items (one guarded transition and one result per item; a
client without the batch call gets one UpdateJobStatus each), before that cluster is swept: a
tick at 10,000 changed jobs makes 10 calls, not 10,000. Every cluster action a write depends
on is done before it (a job is Aborted once its cluster job is gone), and the one that must
follow its write does (the delete of a timed-out cluster job, below); every action is
idempotent, so a manager killed between its actions and its writes loses nothing the next tick
does not redo.

An optional pending timeout fails a job that cannot start (CB-7) at once with reason
`PendingTimeout`: once that is recorded its cluster job is deleted in the same tick, and when
that is slow the cleanup goes on in the background (the sweep below) until nothing of it is
left; recorded first, so a manager that dies before the delete never leaves a job whose
cluster job is gone while its record waits (the next tick would call it missing); a
suspended cluster job (held by a queue) is waiting, not stuck, and is never timed out. The
timeout covers a job whose cluster job cannot even be created (a 403 from a quota or RBAC that
never clears, a foreign Job squatting on its name): the message then carries the last refusal.
A submit the cluster refuses for good (`PermanentBackendError`: Kubernetes 422 Invalid, a local
job larger than the cluster's replica limits) fails the job with reason `ClusterRejected` at
once; a job the cluster has no room for yet (`WaitingForCapacity`, the local cluster's
admission, CB-23) stays Pending with reason `WaitingForCapacity` and is submitted again each
tick until admitted; other backend errors are retried next tick.

A Running job whose cluster job stops running every replica (a Pod evicted, preempted, its node
lost; reason `ReplicaLost` from the backend) keeps Running with the cause in its message for at
most `progress_deadline` seconds, then fails with the backend's reason and message (naming the
Pod and the cause). A Pending job whose cluster job lost a replica before every one ran
(`ClusterJobState.replica_lost`) is held to the same deadline: it cannot run as it is, and
the pending timeout that would otherwise end it is optional.

After the jobs, a backend that holds outcomes (`held_outcomes`, Kubernetes) releases every
cluster job whose Falcon job is terminal: the ones that ended in this tick and the ones the API
server reports terminal (after a restart, a relist, a Job deleted before it was read), in the
same tick; nothing is concluded about a job the API does not report. Then a backend that can
(`sweep`) is swept: cluster jobs whose Falcon job is terminal or unknown lose Falcon's
finalizer, and those still running are deleted with their Pods (an orphan: a create that landed
after its experiment was aborted, a timed-out job whose delete was slow); see
`KubernetesBackend.sweep`.

A job whose decision last tick did nothing (no write, no cluster action) and neither read
nor started a clock, read again with equal inputs (its row's status, reason, message, cluster
job name and what its derived name is made of, and an equal observed state) and still no
clock, is not decided again: `decide` is pure, so it would do nothing again. Any change, and
any running pending timeout or progress deadline, decides it (docs/decisions.md#dec-rm-settled).

Data never stops the loop: a job the manager cannot handle (anything raised while observing,
deciding or acting on it, beyond the backend and API errors above) is logged with its id and the
reason and skipped for this tick, and the other jobs go on; so are the jobs the list call could
not read (`contract.skipped_of`). A batched `observe` that fails on one job's data is split until
the failing job is found, so the others are still observed. Only an unreachable cluster (a
`BackendError` from `observe`) stops that cluster's work for the tick.
"""
from __future__ import annotations

import logging
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from core.errors import FalconError
from core.observability.logs import log_context
from core.domain.statuses import JOB_OPEN, JOB_TERMINAL, JobStatus

from .contract import FalconAPI, JobStatusUpdate, JobView, ListFilter, skipped_of
from .cluster_backends.k8s_logs import keep_logs
from .cluster_backends.base import (
    BackendError,
    ClusterBackend,
    ClusterJobState,
    PermanentBackendError,
    SubmitResult,
    WaitingForCapacity,
)
from .resource_decide import (
    Adopt,
    Decision,
    Delete,
    JobClocks,
    KeepLogs,
    Limits,
    Refused,
    Retry,
    Submit,
    Submitted,
    SubmitOutcome,
    Waiting,
    Write,
    decide,
    decide_submit,
)

log = logging.getLogger("falcon.controllers.resources")

# The jobs a tick reconciles (every open one), in the enum's order: a list filter is a tuple.
JOB_NON_TERMINAL = tuple(s for s in JobStatus if s in JOB_OPEN)
# The statuses whose outcome is recorded, as a list filter.
JOB_ENDED = tuple(s for s in JobStatus if s in JOB_TERMINAL)
# The reason of a job whose cluster job was deleted on abort: the status, as a word.
REASON_ABORTED = JobStatus.ABORTED.value
# The statuses a write carries the cluster's start with (the Job table's `reported_start`).
REPORTED_START = (JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED)
# Items per update_job_statuses call: the server's limit (docs/limits.md). The manager sends
# each batch as its own call, so the Lease fences every 1,000 writes (controllers.leader.Fenced).
WRITE_BATCH = 1000
# A job's clocks when none runs: what `_clocks` means by a job it has no entry for.
NO_CLOCKS = JobClocks()
# Values per list filter the API server accepts (`core.http.filters.MAX_FILTER_VALUES`).
ID_FILTER_MAX = 1000


def _settled_inputs(job: JobView, state: ClusterJobState | None) -> tuple:
    """What a decision of `job` reads besides its clocks (`_sync`): the observed state, the
    job's status, reason, message and cluster job name (decided on, compared by `_update`),
    and what its derived cluster job name is made of (its experiment's id and name, its role,
    its cluster). Equal inputs, no clock, the same decision: `decide` is pure and reads the
    time only against a clock."""
    return (state, job.status, job.reason, job.message, job.cluster_job_name, job.exp_id,
            job.exp_name, job.role, job.cluster_name)


def _kept_inputs(job: JobView, state: ClusterJobState | None) -> tuple:
    """`_settled_inputs`, equal, holding the state's strings where the job's are equal to
    them (a settled job's reason, message and name are its state's): 100,000 kept for a tick
    share them instead of holding one of each per job."""
    def shared(value: str, candidate: str | None) -> str:
        return candidate if candidate is not None and value == candidate else value

    reason, message, name = job.reason, job.message, job.cluster_job_name
    if state is not None:
        reason, message = shared(reason, state.reason), shared(message, state.message)
        name = shared(name, state.name)
    return (state, job.status, reason, message, name, job.exp_id, job.exp_name,
            sys.intern(job.role), sys.intern(job.cluster_name))


@dataclass
class _Write:
    """A write of this tick, sent with the others once the cluster's jobs are handled.

    `then` is the cluster work that must follow the write (run only once it is recorded)."""

    job: JobView
    update: JobStatusUpdate
    then: Callable[[], None] | None = None


@dataclass
class ResourceTickStats:
    """What one tick did."""

    jobs: int = 0
    submitted: int = 0
    updated: int = 0
    deleted: int = 0
    failed: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)


class ResourceManager:
    """The resource-manager loop body; `tick()` is one level-triggered, idempotent pass.

    Args:
        api: the API server client (`controllers.contract.FalconAPI`).
        backends: `{cluster_name: ClusterBackend}`: the clusters this manager serves.
        pending_timeout: seconds a job may stay Pending after its cluster job was created
            before it is failed (None: wait forever). The clock starts when this manager
            creates the cluster job or first sees it Pending, never at the Falcon job's creation:
            a job that waited in the queue while no manager ran still gets its full time. A
            restarted manager starts the clocks again (it waits longer, it never fails early).
            A job whose cluster job cannot be created starts its clock at the first attempt.
        progress_deadline: seconds a job whose cluster job lost a replica (evicted,
            preempted, node lost; Running, or Pending when it never got to run every replica)
            may stay so before it is failed (None: wait forever); the clock works like the
            pending timeout's.
        orphan_grace: seconds; cluster jobs and Pods younger than this are never swept (a
            create racing this tick's list of open jobs).
        clock: seconds on a monotonic clock (`time.monotonic`); the pending timeout and the
            progress deadline are measured on it, so a test advances it instead of sleeping.
    """

    name = "resources"

    def __init__(self, api: FalconAPI, backends: dict[str, ClusterBackend],
                 pending_timeout: float | None = None,
                 progress_deadline: float | None = None, orphan_grace: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.api = api
        self.backends = backends
        self.pending_timeout = pending_timeout
        self.progress_deadline = progress_deadline
        self.orphan_grace = orphan_grace
        self._clock = clock
        self._limits = Limits(pending_timeout=pending_timeout,
                              progress_deadline=progress_deadline)
        # Falcon job id -> its clocks as the last decision left them (`resource_decide`):
        # when this manager first tried to create, created or first saw its cluster job
        # Pending, and when the cluster job stopped running every replica; dropped once the
        # job is neither Pending nor Running.
        self._clocks: dict[int, JobClocks] = {}
        # Falcon job id -> the last refusal of a create, for the log.
        self._last_refusal: dict[int, str] = {}
        # Falcon job id -> the inputs (`_settled_inputs`) of its last decision, when that
        # decision did nothing (no write, no cluster action) and neither read nor left a
        # clock: a job read again with the same inputs and still no clock would be decided
        # the same, so it is not decided again (`_reconcile_cluster`). Those of the last tick;
        # `_settled_next` gathers this tick's.
        self._settled: dict[int, tuple] = {}
        self._settled_next: dict[int, tuple] = {}
        # Falcon job ids this tick made terminal (their cluster jobs are swept this tick).
        self._ended: set[int] = set()
        # Cluster objects the sweep saw terminating, by cluster: logged once gone.
        self._cleaning: dict[str, set[str]] = defaultdict(set)
        # This cluster's writes not yet sent (`_flush`).
        self._writes: list[_Write] = []

    def reset(self) -> None:
        """Forget the clocks of a past leadership term (a new term starts them again)."""
        self._clocks.clear()
        self._last_refusal.clear()
        self._settled.clear()

    def tick(self) -> ResourceTickStats:
        """Reconcile every Pending, Running and Aborting job of the served clusters.

        The open jobs are read one ListJobStates page at a time (`list_job_state_pages`, when
        the client has it) and each page is observed, decided and written before the next is
        read, so a tick holds one page of jobs and the ids of the others (what the release and
        the sweep read), whatever the number of jobs. A backend that observes a whole cluster
        at once (`observes_whole_cluster`: the local backend's admission weighs every waiting
        job of the cluster) gets its cluster's jobs together once the listing is read, as
        before paging. Decisions are the same either way: each job's depends only on itself,
        its cluster job and its clocks.
        """
        stats = ResourceTickStats()
        self._ended = set()
        self._writes = []
        self._settled_next = {}
        flt = ListFilter(statuses=JOB_NON_TERMINAL, cluster_names=tuple(self.backends))
        # ListJobStates when the client has it: only the fields a tick reads, and each
        # experiment's config only for the jobs still to submit; page by page when it can.
        paged = getattr(self.api, "list_job_state_pages", None)
        if paged is not None:
            pages = paged(flt)
        else:
            read = getattr(self.api, "list_job_states", None) or self.api.list_jobs
            pages = iter((read(flt),))
        # What the tick keeps of the jobs it read: ids, no views (but the whole-cluster ones).
        pending: set[int] = set()
        running: set[int] = set()
        open_ids: dict[str, set[int]] = defaultdict(set)
        unreadable: set[int] = set()  # rows the API could not send: open to the sweep
        whole: dict[str, list[JobView]] = {
            cluster: [] for cluster, backend in self.backends.items()
            if getattr(backend, "observes_whole_cluster", False)}
        failed: set[str] = set()
        passes = [backend for backend in self.backends.values()
                  if hasattr(backend, "begin_observe_pass")]
        for backend in passes:
            backend.begin_observe_pass()
        try:
            for page in pages:
                stats.jobs += len(page)
                for row in skipped_of(page):
                    stats.skipped += 1
                    unreadable.add(row.id)
                    log.error("job %s (exp %s): skipped this tick: the API could not send it "
                              "(the API server's log says why)", row.id, row.exp_id,
                              extra={"exp_id": row.exp_id, "job_id": row.id})
                by_cluster: dict[str, list[JobView]] = defaultdict(list)
                for job in page:
                    open_ids[job.cluster_name].add(job.id)
                    if job.status == JobStatus.PENDING:
                        pending.add(job.id)
                    elif job.status == JobStatus.RUNNING:
                        running.add(job.id)
                        if job.id in self._clocks:  # (most running jobs have none)
                            self._pending_clock_stopped(job.id)
                    by_cluster[job.cluster_name].append(job)
                del page
                for cluster, jobs in by_cluster.items():
                    if cluster in whole:
                        whole[cluster].extend(jobs)
                    elif cluster in self.backends and cluster not in failed:
                        self._reconcile_part(cluster, jobs, failed, stats)
                del by_cluster
            for cluster, jobs in whole.items():
                if jobs:
                    self._reconcile_part(cluster, jobs, failed, stats)
            whole.clear()
        finally:
            for backend in passes:
                backend.end_observe_pass()
        # A clock lives while its job is open for it: the pending clock while it is Pending.
        self._clocks = {k: (v if k in pending else replace(v, pending_since=None))
                        for k, v in self._clocks.items() if k in pending or k in running}
        self._last_refusal = {k: v for k, v in self._last_refusal.items() if k in pending}
        # Only this tick's jobs are kept: a job not read (closed, its cluster failed) is
        # decided when it is read again.
        self._settled, self._settled_next = self._settled_next, {}
        for cluster, backend in self.backends.items():
            if cluster in failed:
                continue
            ids = open_ids.get(cluster, set())
            try:
                self._release_outcomes(cluster, backend, ids, unreadable, stats)
                self._sweep(cluster, backend, ids, unreadable, stats)
            except Exception as exc:  # one unreachable cluster must not stop the others
                self._cluster_failed(cluster, exc, stats)
        return stats

    def _pending_clock_stopped(self, job_id: int) -> None:
        """A job read as not Pending has no pending clock (as the end of the tick keeps it)."""
        clocks = self._clocks.get(job_id)
        if clocks is not None and clocks.pending_since is not None:
            self._clocks[job_id] = replace(clocks, pending_since=None)

    def _reconcile_part(self, cluster: str, jobs: list[JobView], failed: set[str],
                        stats: ResourceTickStats) -> None:
        """Reconcile some of a cluster's jobs (a page, or all of them) and send their writes;
        a cluster that fails is named in `failed` and left alone for the rest of the tick."""
        try:
            try:
                self._reconcile_cluster(self.backends[cluster], jobs, stats)
            finally:  # what was done before a cluster outage is recorded too
                self._flush(stats)
        except Exception as exc:  # one unreachable cluster must not stop the others
            failed.add(cluster)
            self._cluster_failed(cluster, exc, stats)

    @staticmethod
    def _cluster_failed(cluster: str, exc: Exception, stats: ResourceTickStats) -> None:
        stats.failed += 1
        stats.errors.append(f"{cluster}: {exc}")
        log.error("cluster %s: tick failed: %s", cluster, exc)

    def _release_outcomes(self, cluster: str, backend: ClusterBackend, job_ids: set[int],
                          unreadable: set[int], stats: ResourceTickStats) -> None:
        """Remove Falcon's finalizer from every cluster job whose Falcon job is terminal (CB-19).

        Level-triggered: each tick the backend says which cluster jobs hold the finalizer
        (`held_outcomes`, whatever this manager saw before: a restart, a relist, a Job being
        deleted); those whose Falcon job ended in this tick, or that the API server reports
        terminal, are released. A job the API does not report (deleted, or a row it could
        not read) is never concluded terminal here: the sweep's grace rules cover it. Jobs
        open in this tick's list are not asked about: a tick where no cluster job holds the
        finalizer for a job outside that list makes no extra call.

        Args:
            cluster: the cluster's name, for log lines.
            backend: its backend (skipped without `held_outcomes`).
            job_ids: the ids of the open jobs of this cluster the tick read.
            unreadable: ids of rows the list call could not read (kept as open).
            stats: this tick's counters, updated in place.

        Raises:
            BackendError: reading the cluster jobs failed; the next tick goes on.
            FalconError: the API server could not be read; the next tick goes on.
        """
        held = getattr(backend, "held_outcomes", None)
        if held is None:
            return
        holding = held()
        open_ids = (job_ids - self._ended) | unreadable
        ask = {i for i in holding.values()
               if i is not None and i not in open_ids and i not in self._ended}
        terminal = self._ended | self._terminal_ids(ask)
        names = sorted(name for name, job_id in holding.items() if job_id in terminal)
        if not names:
            return
        result = backend.release_outcomes(names)
        for name, error in sorted(result.failed.items()):
            stats.failed += 1
            stats.errors.append(error)
            log.warning("cluster %s: could not release the outcome of %s (next tick "
                        "retries): %s", cluster, name, error,
                        extra={"job_id": holding.get(name)})

    def _terminal_ids(self, ids: set[int]) -> set[int]:
        """Return those of `ids` whose Falcon job the API server reports terminal.

        Asked `ID_FILTER_MAX` ids a call (the list filters' limit, docs/limits.md).

        Raises:
            FalconError: a list call failed.
        """
        wanted = sorted(ids)
        found: set[int] = set()
        for start in range(0, len(wanted), ID_FILTER_MAX):
            chunk = tuple(wanted[start:start + ID_FILTER_MAX])
            rows = self.api.list_jobs(ListFilter(ids=chunk, statuses=JOB_ENDED))
            found |= {row.id for row in rows if row.id in ids and row.status in JOB_TERMINAL}
        return found

    def _sweep(self, cluster: str, backend: ClusterBackend, job_ids: set[int],
               unreadable: set[int], stats: ResourceTickStats) -> None:
        """Release finished outcomes and remove orphans of one cluster (backends with `sweep`).

        Args:
            cluster: the cluster's name, for log lines.
            backend: its backend.
            job_ids: the ids of the open jobs of this cluster the tick read.
            unreadable: ids of rows the list call could not read (kept as open).
            stats: this tick's counters, updated in place.

        Raises:
            BackendError: a cluster call failed; the next tick goes on.
        """
        sweep = getattr(backend, "sweep", None)
        if sweep is None:
            return
        open_ids = (job_ids - self._ended) | unreadable
        result = sweep(open_ids, grace=self.orphan_grace)
        stats.deleted += len(result.deleted)
        still = set(result.terminating)
        for name in sorted(self._cleaning[cluster] - still):
            log.info("cluster %s: %s is gone: nothing of it is left", cluster, name)
        self._cleaning[cluster] = still

    def _reconcile_cluster(self, backend: ClusterBackend, jobs: list[JobView],
                           stats: ResourceTickStats) -> None:
        aborting = [j for j in jobs if j.status == JobStatus.ABORTING]
        active = [j for j in jobs if j.status != JobStatus.ABORTING]
        for job in aborting:
            self._guard(job, stats, self._abort, backend, job, stats)
        if not active:
            return
        states = self._observe(backend, active, stats)
        settled, settled_next, clocks = self._settled, self._settled_next, self._clocks
        for job in active:
            if job.id not in states:  # `_observe` skipped it: no state is not "Missing"
                continue
            state = states[job.id]
            kept = settled.get(job.id)
            if kept is not None and job.id not in clocks \
                    and kept == _settled_inputs(job, state):
                # Decided with these inputs and no clock last tick, and that did nothing:
                # deciding again would do nothing again (a steady tick's 100,000 jobs).
                settled_next[job.id] = kept
                continue
            self._guard(job, stats, self._sync, backend, job, state, stats)

    def _observe(self, backend: ClusterBackend, jobs: list[JobView],
                 stats: ResourceTickStats) -> dict[int, ClusterJobState | None]:
        """`backend.observe(jobs)`, keyed by job id, every job present (None: no cluster job).

        A `BackendError` (the cluster unreachable) propagates: the whole cluster waits. Any
        other exception comes from one job's data: the batch is halved until that job is
        found, which is skipped (absent from the result) and logged; the others are observed.
        """
        try:
            states = backend.observe(jobs)
        except BackendError:
            raise
        except Exception as exc:
            if len(jobs) == 1:
                self._skip(jobs[0], stats, f"cannot read its cluster state: "
                           f"{type(exc).__name__}: {exc}")
                return {}
            half = len(jobs) // 2
            return {**self._observe(backend, jobs[:half], stats),
                    **self._observe(backend, jobs[half:], stats)}
        return {job.id: states.get(job.id) for job in jobs}

    def _skip(self, job: JobView, stats: ResourceTickStats, reason: str) -> None:
        stats.failed += 1
        stats.skipped += 1
        stats.errors.append(f"job {job.id}: {reason}")
        log.error("exp %s (id %s, job %s, role %s): skipped this tick: %s", job.exp_name,
                  job.exp_id, job.id, job.role, reason,
                  extra={"exp_id": job.exp_id, "job_id": job.id})

    def _guard(self, job: JobView, stats: ResourceTickStats, fn, *args) -> None:
        with log_context(exp_id=job.exp_id, job_id=job.id):  # every line about it: its ids
            self._guarded(job, stats, fn, *args)

    def _guarded(self, job: JobView, stats: ResourceTickStats, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:
            if not isinstance(exc, (FalconError, BackendError)):
                # Bad data or a bug for this job only: skip it this tick, the others go on.
                self._skip(job, stats, f"cannot handle it: {type(exc).__name__}: {exc}")
                return
            # One job's failure (a lost transition race, a replica that cannot start) is logged
            # and retried next tick; the other jobs go on.
            stats.failed += 1
            stats.errors.append(str(exc))
            log.warning("exp %s (id %s, job %s, role %s): %s", job.exp_name, job.exp_id, job.id,
                        job.role, exc)
            if isinstance(exc, BackendError):
                # Say it where the user looks, not only in this log: the job's message.
                try:
                    self._update(job, stats, job.status, reason="ClusterError",
                                 message=f"the cluster refused this job, retrying: {exc}")
                except FalconError:
                    pass  # the job moved meanwhile; the next tick reads it again

    def _update(self, job: JobView, stats: ResourceTickStats, status: JobStatus, *,
                reason: str | None = None, message: str | None = None,
                cluster_job_name: str | None = None, started_at: datetime | None = None,
                then: Callable[[], None] | None = None) -> None:
        """Queue a write of `job` for `_flush` (none when nothing would change).

        Args:
            job: the job as the tick read it.
            stats: this tick's counters (counted when the write is recorded).
            status: the target status (the job's own to refresh its reason and message).
            reason, message, cluster_job_name: set with it; None keeps the recorded one.
            started_at: the cluster's start of the job (`ClusterJobState.started_at`), sent
                only with a move to Running, Succeeded or Failed (the server keeps the first).
            then: cluster work to run once the write is recorded (skipped if it is refused).
        """
        if (status == job.status and (reason is None or reason == job.reason)
                and (message is None or message == job.message)
                and (cluster_job_name is None or cluster_job_name == job.cluster_job_name)):
            return  # nothing new: no write
        if status == job.status or status not in REPORTED_START:
            started_at = None
        self._writes.append(_Write(job, JobStatusUpdate(
            job_id=job.id, status=status, reason=reason, message=message,
            cluster_job_name=cluster_job_name, started_at=started_at), then))

    def _flush(self, stats: ResourceTickStats) -> None:
        """Send the queued writes: `update_job_statuses` per `WRITE_BATCH` items, or one
        `update_job_status` each with a client without it; then the work that follows each.

        A refused item (a lost race: the job moved meanwhile) is logged with the job's ids and
        counted as failed, as a single call's refusal is; the next tick reads the job again.

        Raises:
            FalconError: a whole batch call failed (the API server unreachable); the writes
                not yet recorded are dropped and the next tick decides them again.
        """
        writes, self._writes = self._writes, []
        batch = getattr(self.api, "update_job_statuses", None)
        if batch is None:
            for write in writes:
                self._guard(write.job, stats, self._write_one, write, stats)
            return
        for start in range(0, len(writes), WRITE_BATCH):
            chunk = writes[start:start + WRITE_BATCH]
            results = batch([w.update for w in chunk])
            for write, result in zip(chunk, results, strict=True):
                if result.error is None:
                    self._guard(write.job, stats, self._recorded, write, stats)
                    continue
                job = write.job
                stats.failed += 1
                stats.errors.append(str(result.error))
                with log_context(exp_id=job.exp_id, job_id=job.id):
                    log.warning("exp %s (id %s, job %s, role %s): %s", job.exp_name, job.exp_id,
                                job.id, job.role, result.error)

    def _write_one(self, write: _Write, stats: ResourceTickStats) -> None:
        u = write.update
        # The start only when there is one: a client of the older contract takes none.
        start = {} if u.started_at is None else {"started_at": u.started_at}
        self.api.update_job_status(job_id=u.job_id, status=u.status, reason=u.reason,
                                   message=u.message, cluster_job_name=u.cluster_job_name,
                                   **start)
        self._recorded(write, stats)

    def _recorded(self, write: _Write, stats: ResourceTickStats) -> None:
        stats.updated += 1
        if write.update.status in JOB_TERMINAL:
            self._ended.add(write.job.id)  # recorded: its cluster job may be released this tick
        if write.then is not None:
            write.then()

    def _abort(self, backend: ClusterBackend, job: JobView, stats: ResourceTickStats) -> None:
        keep_logs(backend, job)  # before the Pods go (k8s_logs)
        if backend.delete(job):
            stats.deleted += 1
            self._update(job, stats, JobStatus.ABORTED, reason=REASON_ABORTED,
                         message=f"cluster job {backend.cluster_job_name(job)} deleted")
        else:
            self._update(job, stats, JobStatus.ABORTING, message="waiting for the cluster job's "
                         "processes to stop")

    def _sync(self, backend: ClusterBackend, job: JobView, state: ClusterJobState | None,
              stats: ResourceTickStats) -> None:
        """Bring one Pending or Running job in line with its observed cluster job: ask
        `resource_decide.decide` what to do, then do it.

        Args:
            backend: the job's cluster backend.
            job: a Pending or Running job.
            state: its cluster job's state from `backend.observe`, None when not reported.
            stats: this tick's counters, updated in place.

        Raises:
            FalconError: an update was refused (a lost race); retried next tick.
            BackendError: a cluster call failed; retried next tick.
        """
        clocks = self._clocks.get(job.id, NO_CLOCKS)
        decision = decide(state, job, self._clock(), name=backend.cluster_job_name(job),
                          clocks=clocks, limits=self._limits)
        queued = len(self._writes)
        self._apply(backend, job, decision, stats)
        if (clocks == NO_CLOCKS and decision.clocks == NO_CLOCKS
                and len(self._writes) == queued
                and all(type(action) is Write for action in decision.actions)):
            # Nothing done and no clock read or started: the same inputs decide the same.
            self._settled_next[job.id] = _kept_inputs(job, state)

    def _apply(self, backend: ClusterBackend, job: JobView, decision: Decision,
               stats: ResourceTickStats) -> None:
        """Do a decision's actions in order and keep the job's clocks it hands back.

        The clocks are kept first: a failing action (retried next tick) keeps what the
        decision learnt, as the clocks it read were kept before.
        """
        if decision.clocks == NO_CLOCKS:
            # Most jobs (every one running all its replicas) have no clock running: none is
            # kept for them (`.get(id, NO_CLOCKS)` reads the same), not 100,000 empty ones.
            self._clocks.pop(job.id, None)
        else:
            self._clocks[job.id] = decision.clocks
        for action in decision.actions:
            if isinstance(action, Write):
                then = None
                if action.delete_after:
                    name = backend.cluster_job_name(job)
                    then = lambda: self._delete_timed_out(backend, job, name, stats)  # noqa: E731
                self._update(job, stats, action.status, reason=action.reason,
                             message=action.message, cluster_job_name=action.cluster_job_name,
                             started_at=action.started_at, then=then)
            elif isinstance(action, Delete):
                backend.delete(job)
            elif isinstance(action, KeepLogs):
                keep_logs(backend, job)  # the Pods' output, before they may go (k8s_logs)
            elif isinstance(action, Adopt):
                if self._submit(backend, job, stats) is None:
                    return  # refused for good: the job failed ClusterRejected
            elif isinstance(action, Submit):
                self._submit_and_decide(backend, job, stats)
            else:  # pragma: no cover - every action is handled above
                raise TypeError(f"unknown action {action!r}")

    def _submit_and_decide(self, backend: ClusterBackend, job: JobView,
                           stats: ResourceTickStats) -> None:
        """Submit `job`, then apply what `decide_submit` makes of the answer."""
        try:
            result = self._submit(backend, job, stats)
        except WaitingForCapacity as exc:
            outcome: SubmitOutcome = Waiting(str(exc))
        except BackendError as exc:
            self._last_refusal[job.id] = str(exc)
            outcome = Refused(str(exc))
            decision = decide_submit(outcome, job, self._clock(),
                                     clocks=self._clocks.get(job.id, NO_CLOCKS),
                                     limits=self._limits)
            if any(isinstance(a, Retry) for a in decision.actions):
                self._clocks[job.id] = decision.clocks
                raise
            self._apply(backend, job, decision, stats)
            return
        else:
            if result is None:
                return  # refused for good: the job failed ClusterRejected
            stats.submitted += 1
            outcome = Submitted(result)
        self._apply(backend, job, decide_submit(
            outcome, job, self._clock(), clocks=self._clocks.get(job.id, NO_CLOCKS),
            limits=self._limits), stats)

    def _delete_timed_out(self, backend: ClusterBackend, job: JobView, name: str,
                          stats: ResourceTickStats) -> None:
        """Delete the cluster job of a job whose pending timeout is recorded; a failure is
        logged and left to the sweep (it deletes cluster jobs of terminal jobs)."""
        try:
            gone = backend.delete(job)
        except BackendError as exc:
            log.warning("job %s: deleting timed-out cluster job %s failed (the sweep "
                        "retries): %s", job.id, name, exc)
            return
        if gone:
            stats.deleted += 1
            log.info("job %s: timed-out cluster job %s deleted", job.id, name)

    def _submit(self, backend: ClusterBackend, job: JobView,
                stats: ResourceTickStats) -> SubmitResult | None:
        """Submit `job`; fail it and return None when the cluster refuses it for good.

        A `PermanentBackendError` (Kubernetes: 422 Invalid, 400 Bad Request on create) would
        answer the same every tick, so the job fails now with reason `ClusterRejected` and the
        cluster's own message. Whatever the refused submit did create (a Job whose Service was
        refused) is deleted first, best effort: a Failed job is never looked at again, so
        anything left would run unobserved. Transient `BackendError`s propagate to `_guard`,
        which retries them next tick.
        """
        try:
            return backend.submit(job)
        except PermanentBackendError as exc:
            try:
                backend.delete(job)
            except BackendError as cleanup:
                log.warning("job %s: deleting what the refused submit left failed: %s",
                            job.id, cleanup)
            stats.failed += 1
            stats.errors.append(str(exc))
            log.warning("exp %s (id %s, job %s, role %s): refused by the cluster: %s",
                        job.exp_name, job.exp_id, job.id, job.role, exc)
            self._update(job, stats, JobStatus.FAILED, reason="ClusterRejected",
                         message=f"the cluster refused this job: {exc}")
            return None
