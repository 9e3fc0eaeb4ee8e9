"""The exp controller: FalconController.expController.

Each tick reads the experiments that are not terminal with ALL jobs of those experiments and
their artifacts (ListExpStates: one call per 5,000 experiments, each experiment with its jobs
and artifact read together in one transaction; a client without it makes three paged list
calls), decides per experiment, and writes through UpdateArtifactStatus then the experiments'
transitions, in that order: the experiments' transitions of a whole tick go together in
UpdateExpStatuses calls (1,000 items each, one guarded transition and one result per item), so
a tick over 10,000 changed experiments makes a handful of calls, not one each. It reads the
jobs of non-terminal *experiments*, not only the non-terminal jobs, so that a tick killed
between a job's last update and its experiment's update is finished by the next tick (the loop
is re-entrant).

Rules per experiment (one Job per role; docs/architecture.md, State machines):
- Aborting: once every job is terminal, Artifact Failed (reason + message), Exp Aborted.
- any job Failed: the other roles are aborted, Artifact Failed, Exp Failed with the job's reason.
- any job Aborted (without an abort of the experiment): Artifact Failed, Exp Aborting -> Aborted.
- all jobs Succeeded: the artifact path must hold at least one file in the artifact store:
  then Artifact Succeeded and Exp Succeeded; else Artifact Failed and Exp Failed saying so.
- otherwise `job_status_to_exp_status` (jobStatus2expStatus): Running once every role runs (or
  has succeeded); an experiment some of whose roles still wait for the cluster stays Created, and
  a Running experiment is never moved back.
Every failed update is logged with exp name, exp id and job id, and the loop goes on.

Data never stops the loop: an experiment the controller cannot handle (deciding or applying its
updates raises) is logged with its id and the reason and skipped for this tick, and the other
experiments go on. An experiment one of whose jobs or artifact the list calls could not read
(`contract.skipped_of`: the API server could not encode the row) is skipped too, without a
decision: deciding from the jobs that could be read might end it wrongly (no jobs -> Failed,
the readable jobs Succeeded -> Succeeded). Only infrastructure failures end a tick early.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from core.errors import FalconError
from core.observability.logs import log_context
from core.domain.statuses import (
    EXP_OPEN,
    JOB_ACTIVE,
    JOB_OPEN,
    ArtifactStatus,
    ExpStatus,
    JobStatus,
)

from .contract import (
    ArtifactView,
    ExpStatusUpdate,
    ExpView,
    FalconAPI,
    JobView,
    ListFilter,
    skipped_of,
)

log = logging.getLogger("falcon.controllers.exp")

# The experiments a tick reads (and whose jobs and artifacts it reads), in the enum's order: a
# list filter is a tuple.
EXP_NON_TERMINAL = tuple(s for s in ExpStatus if s in EXP_OPEN)
# The largest page the API serves: a tick's call count is ceil(rows / PAGE) per list.
PAGE = {"page_size": 1000}
# The reason this controller gives an experiment it aborts because one of its jobs was aborted.
JOB_ABORTED = "JobAborted"
# The reasons of an experiment that ends by abort or success: the status, as a word.
REASON_ABORTED = ExpStatus.ABORTED.value
REASON_SUCCEEDED = ExpStatus.SUCCEEDED.value


def job_status_to_exp_status(job_statuses: list[str]) -> str:
    """jobStatus2expStatus: the experiment status while its jobs are not finished.

    Args:
        job_statuses: the statuses of all jobs of one experiment, none Failed or Aborted.

    Returns:
        `ExpStatus.RUNNING` once EVERY job is Running or Succeeded, else `ExpStatus.CREATED`:
        a distributed experiment whose third role cannot be scheduled is not running, however
        ready the other two roles are (docs/architecture.md, State machines).
    """
    started = (JobStatus.RUNNING, JobStatus.SUCCEEDED)
    if job_statuses and all(s in started for s in job_statuses):
        return ExpStatus.RUNNING
    return ExpStatus.CREATED


@dataclass(frozen=True)
class Update:
    """One write the controller wants: `kind` is "job", "artifact" or "exp"."""

    kind: str
    id: int
    status: ExpStatus | JobStatus | ArtifactStatus
    reason: str | None = None
    message: str | None = None
    job_id: int | None = None  # the job this update is about, for the log line


@dataclass
class TickStats:
    """What one tick did: experiments seen, updates applied and failed, experiments skipped
    (unreadable, or one of their rows unreadable, or handling them raised)."""

    exps: int = 0
    jobs: int = 0
    applied: int = 0
    failed: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)


def _summary(jobs: list[JobView]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for job in jobs:
        counts[job.status] += 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


def _abort_siblings(jobs: list[JobView], reason: str, cause: str) -> list[Update]:
    """Abort every role still Pending or Running: one role's end ends the experiment."""
    return [Update("job", j.id, JobStatus.ABORTING, reason, f"aborted because {cause}", j.id)
            for j in jobs if j.status in JOB_ACTIVE]


def _fail_artifact(artifact: ArtifactView | None, reason: str, message: str,
                   job_id: int | None = None) -> list[Update]:
    """Fail the artifact if it is still open; a missing or finished one is left as it is.

    Args:
        artifact: the experiment's artifact record, or None when it has none.
        reason: a CamelCase word for the artifact's `reason`.
        message: a sentence for the artifact's `message`.
        job_id: the job the failure is about, for the log line (None: every job).

    Returns:
        `[Update("artifact", ..., Failed)]` for a Created artifact, else `[]`.
    """
    if artifact is None or artifact.status != ArtifactStatus.CREATED:
        return []
    return [Update("artifact", artifact.id, ArtifactStatus.FAILED, reason, message, job_id)]


def _all_terminal(jobs: list[JobView]) -> bool:
    """Return True when no job of `jobs` is open (Pending, Running or Aborting).

    Args:
        jobs: the jobs of one experiment.
    """
    return all(j.status not in JOB_OPEN for j in jobs)


def _decide_no_jobs(exp: ExpView, artifact: ArtifactView | None) -> list[Update]:
    """Fail an experiment that has no job, and its artifact.

    Args:
        exp: a non-terminal experiment with no jobs.
        artifact: its artifact record, or None.

    Returns:
        The artifact's failure (when open), then the experiment's, both with reason `NoJobs`.
    """
    message = "the experiment has no jobs"
    return [*_fail_artifact(artifact, "NoJobs", message),
            Update("exp", exp.id, ExpStatus.FAILED, "NoJobs", message)]


def _decide_aborting(exp: ExpView, jobs: list[JobView],
                     artifact: ArtifactView | None) -> list[Update]:
    """Finish an Aborting experiment as Aborted once every job is terminal; else wait.

    An experiment this controller set Aborting because a role was aborted (reason
    `JOB_ABORTED`, see `_decide_aborted_sibling`) keeps that reason and message, so a tick that
    stopped between Aborting and Aborted is finished as an uninterrupted one would have been.

    Args:
        exp: an experiment in status Aborting.
        jobs: all of its jobs (none when they were deleted).
        artifact: its artifact record, or None.

    Returns:
        `[]` while a job is open; else the artifact's failure (when open), then exp Aborted.
    """
    if not _all_terminal(jobs):
        return []
    if exp.reason == JOB_ABORTED:
        return [*_fail_artifact(artifact, JOB_ABORTED, exp.message),
                Update("exp", exp.id, ExpStatus.ABORTED, JOB_ABORTED, exp.message)]
    return [*_fail_artifact(artifact, REASON_ABORTED, "the experiment was aborted before its "
                            "artifacts were complete"),
            Update("exp", exp.id, ExpStatus.ABORTED, REASON_ABORTED,
                   f"aborted ({_summary(jobs) or 'no jobs'})")]


def _decide_failed_sibling(exp: ExpView, jobs: list[JobView], artifact: ArtifactView | None,
                           first: JobView) -> list[Update]:
    """Fail the experiment because one role failed, aborting the roles still active.

    Args:
        exp: a non-terminal experiment, not Aborting.
        jobs: all of its jobs.
        artifact: its artifact record, or None.
        first: the first Failed job of `jobs`; its reason becomes the experiment's.

    Returns:
        Aborting for every Pending or Running job, the artifact's failure (when open), then
        exp Failed with the job's reason (`JobFailed` when it has none).
    """
    message = f"role {first.role} failed: {first.message or first.reason or 'no detail'}"
    reason = first.reason or "JobFailed"
    return [*_abort_siblings(jobs, "SiblingFailed", f"role {first.role} failed"),
            *_fail_artifact(artifact, reason, message, first.id),
            Update("exp", exp.id, ExpStatus.FAILED, reason, message, first.id)]


def _decide_aborted_sibling(exp: ExpView, jobs: list[JobView], artifact: ArtifactView | None,
                            first: JobView) -> list[Update]:
    """Abort the experiment because one role was aborted (not by an abort of the experiment).

    Args:
        exp: a non-terminal experiment, not Aborting.
        jobs: all of its jobs, none Failed.
        artifact: its artifact record, or None.
        first: the first Aborted job of `jobs`.

    Returns:
        Aborting for every Pending or Running job, the artifact's failure (when open), exp
        Aborting with reason `JOB_ABORTED`, and exp Aborted too when every job is already
        terminal.
    """
    message = f"role {first.role} was aborted: {first.message or first.reason}"
    updates = [*_abort_siblings(jobs, "SiblingAborted", f"role {first.role} was aborted"),
               *_fail_artifact(artifact, JOB_ABORTED, message, first.id),
               Update("exp", exp.id, ExpStatus.ABORTING, JOB_ABORTED, message, first.id)]
    if _all_terminal(jobs):
        updates.append(Update("exp", exp.id, ExpStatus.ABORTED, JOB_ABORTED, message, first.id))
    return updates


def _decide_all_succeeded(exp: ExpView, jobs: list[JobView], artifact: ArtifactView | None,
                          has_files: Callable[[str], bool]) -> list[Update]:
    """Decide the artifact, then the experiment, once every job has succeeded.

    An artifact already Succeeded or Failed (a re-run after an interrupted tick) decides the
    experiment without asking the store again; an open one succeeds only when the store holds
    at least one file under its path.

    Args:
        exp: a non-terminal experiment, not Aborting.
        jobs: all of its jobs, every one Succeeded.
        artifact: its artifact record, or None (the experiment then fails: `ArtifactMissing`).
        has_files: `url -> bool`, whether the artifact store holds a file under `url`.

    Returns:
        The artifact's update when it was open, then the experiment's.

    Raises:
        Exception: whatever `has_files` raises (a store outage); nothing is decided then.
    """
    succeeded = f"all {len(jobs)} role(s) succeeded"
    if artifact is None:
        return [Update("exp", exp.id, ExpStatus.FAILED, "ArtifactMissing",
                       "the experiment has no artifact record")]
    if artifact.status == ArtifactStatus.SUCCEEDED:
        return [Update("exp", exp.id, ExpStatus.SUCCEEDED, REASON_SUCCEEDED, succeeded)]
    if artifact.status == ArtifactStatus.FAILED:
        return [Update("exp", exp.id, ExpStatus.FAILED, artifact.reason or "ArtifactFailed",
                       artifact.message)]
    if has_files(artifact.path):
        return [Update("artifact", artifact.id, ArtifactStatus.SUCCEEDED, REASON_SUCCEEDED,
                       f"files found under {artifact.path}"),
                Update("exp", exp.id, ExpStatus.SUCCEEDED, REASON_SUCCEEDED, succeeded)]
    message = (f"no file under {artifact.path}: the tasks succeeded but wrote nothing there; "
               "write results under $FALCON_ARTIFACT_PATH")
    return [Update("artifact", artifact.id, ArtifactStatus.FAILED, "ArtifactEmpty", message),
            Update("exp", exp.id, ExpStatus.FAILED, "ArtifactEmpty", message)]


def _decide_in_progress(exp: ExpView, jobs: list[JobView]) -> list[Update]:
    """Keep a running experiment's status and job summary current (Created or Running).

    Args:
        exp: a non-terminal experiment, not Aborting.
        jobs: all of its jobs, none Failed or Aborted, not all Succeeded.

    Returns:
        One exp update when the status (`job_status_to_exp_status`) or the summary message
        changed, else `[]`.
    """
    target = job_status_to_exp_status([j.status for j in jobs])
    if exp.status == ExpStatus.RUNNING:
        # Running never goes back to Created (a role restarting a replica is still running).
        target = ExpStatus.RUNNING
    message = _summary(jobs)
    if target != exp.status or message != exp.message:
        return [Update("exp", exp.id, target, None, message)]
    return []


def decide(exp: ExpView, jobs: list[JobView], artifact: ArtifactView | None,
           has_files: Callable[[str], bool]) -> list[Update]:
    """Return the updates that move one experiment toward the state its jobs imply.

    Pure apart from `has_files` (the artifact-store check), so every rule can be tested with
    scripted states. Updates are ordered jobs, artifact, experiment. The first rule that
    applies decides: no jobs, Aborting, a Failed job, an Aborted job, all Succeeded, else in
    progress.

    Args:
        exp: a non-terminal experiment.
        jobs: all of its jobs.
        artifact: its artifact record (None if it is missing: the experiment then fails).
        has_files: `url -> bool`, whether the artifact store holds a file under `url`.
    """
    if exp.status == ExpStatus.ABORTING:
        # Before the no-jobs rule: Aborting may only end Aborted, and with no job left there is
        # nothing to wait for.
        return _decide_aborting(exp, jobs, artifact)
    if not jobs:
        return _decide_no_jobs(exp, artifact)
    failed = [j for j in jobs if j.status == JobStatus.FAILED]
    if failed:
        return _decide_failed_sibling(exp, jobs, artifact, failed[0])
    aborted = [j for j in jobs if j.status == JobStatus.ABORTED]
    if aborted:
        return _decide_aborted_sibling(exp, jobs, artifact, aborted[0])
    if all(j.status == JobStatus.SUCCEEDED for j in jobs):
        return _decide_all_succeeded(exp, jobs, artifact, has_files)
    return _decide_in_progress(exp, jobs)


class ExpController:
    """The expController loop body; `tick()` is one level-triggered, idempotent pass.

    Args:
        api: the API server client (gRPC in production; see `controllers.contract.FalconAPI`).
        has_files: `url -> bool` from the artifact store (`artifacts.store.store_for`).
    """

    name = "exp"

    def __init__(self, api: FalconAPI, has_files: Callable[[str], bool]):
        self.api = api
        self.has_files = has_files

    def tick(self) -> TickStats:
        """Read the current state one page at a time (one ListExpStates call per 5,000
        experiments, or three list calls with a client without it) and apply each page's
        updates before reading the next, so that a tick holds one page whatever the number
        of open experiments."""
        stats = TickStats()
        batch = getattr(self.api, "update_exp_statuses", None)
        for exps, jobs_by_exp, artifact_by_exp, unreadable in self._read(stats):
            self._tick_page(exps, jobs_by_exp, artifact_by_exp, unreadable, batch, stats)
        return stats

    def _tick_page(self, exps: list[ExpView], jobs_by_exp: dict[int, list[JobView]],
                   artifact_by_exp: dict[int, ArtifactView], unreadable: dict[int, list[str]],
                   batch: Callable | None, stats: TickStats) -> None:
        """Decide and apply the updates of one page of experiments (see `_read`)."""
        stats.exps += len(exps)
        stats.jobs += sum(len(jobs) for jobs in jobs_by_exp.values())
        # The experiments' own transitions, applied together after every experiment's job and
        # artifact updates of the page (one UpdateExpStatuses call per 1,000 when the client
        # has it).
        exp_updates: list[tuple[ExpView, list[JobView], Update]] = []
        for exp in exps:
            with log_context(exp_id=exp.id):  # every line about it carries its id
                exp_jobs = jobs_by_exp.get(exp.id, [])
                if exp.id in unreadable:
                    stats.skipped += 1
                    log.error("exp %s (id %s): skipped this tick: %s of it could not be read (the "
                              "API server's log says why); it is not decided without them",
                              exp.name, exp.id, ", ".join(unreadable[exp.id]))
                    continue
                try:
                    updates = decide(exp, exp_jobs, artifact_by_exp.get(exp.id), self.has_files)
                except Exception as exc:  # a store outage or bad data: this experiment only
                    stats.failed += 1
                    stats.skipped += 1
                    log.error("exp %s (id %s): skipped this tick, cannot decide: %s: %s", exp.name,
                              exp.id, type(exc).__name__, exc)
                    continue
                try:
                    if batch is None:
                        self._apply(exp, exp_jobs, updates, stats)
                    elif self._apply(exp, exp_jobs, [u for u in updates if u.kind != "exp"],
                                     stats):
                        exp_updates.extend((exp, exp_jobs, u) for u in updates if u.kind == "exp")
                except Exception as exc:  # not a FalconError (those are handled per update)
                    stats.failed += 1
                    stats.skipped += 1
                    log.error("exp %s (id %s): skipped the rest of this tick's updates: %s: %s",
                              exp.name, exp.id, type(exc).__name__, exc)
        if exp_updates:
            try:
                self._apply_exp_batch(batch, exp_updates, stats)
            except Exception as exc:
                if getattr(exc, "retryable", False):
                    raise  # the API server is unreachable: the loop retries the tick
                # Refused or broken as a whole: nothing was written; logged, and the next
                # tick decides again (data never stops the loop).
                stats.failed += len(exp_updates)
                stats.errors.append(str(exc))
                log.error("the experiments' transitions of this page (%d, exp ids %s) were not "
                          "applied: %s: %s", len(exp_updates),
                          ",".join(str(e.id) for e, _j, _u in exp_updates[:20]),
                          type(exc).__name__, exc)

    def _read(self, stats: TickStats) -> Iterator[tuple[
            list[ExpView], dict[int, list[JobView]], dict[int, ArtifactView],
            dict[int, list[str]]]]:
        """Read the non-terminal experiments with all their jobs and their artifacts, a page
        at a time.

        With `list_exp_state_pages` (the gRPC client) one call per page returns each experiment
        with its jobs and artifact, read together, and the next page is read when the
        previous one is done; with `list_exp_states` alone, the whole listing is one page;
        otherwise `list_exps`, then `list_jobs` and `list_artifacts` of the non-terminal
        experiments make one page. Experiments the API could not send are counted in
        `stats.skipped` and logged here.

        Yields:
            `(experiments, jobs by exp id, artifact by exp id, unreadable)` per page with
            experiments, where `unreadable` names, per exp id, the rows of it the list calls
            could not read (such an experiment is not decided).

        Raises:
            FalconError: a list call failed (the tick ends after the pages already applied;
            the next one reads again).
        """
        state_pages = getattr(self.api, "list_exp_state_pages", None)
        list_states = getattr(self.api, "list_exp_states", None)
        if state_pages is not None or list_states is not None:
            pages = (state_pages(EXP_NON_TERMINAL) if state_pages is not None
                     else [list_states(EXP_NON_TERMINAL)])
            for states in pages:
                self._log_skipped(states, stats)
                if states:
                    yield ([state.exp for state in states],
                           {state.exp.id: list(state.jobs) for state in states},
                           {state.exp.id: state.artifact for state in states
                            if state.artifact is not None},
                           defaultdict(list))
            return
        exps = self.api.list_exps(ListFilter(statuses=EXP_NON_TERMINAL, extra=PAGE))
        self._log_skipped(exps, stats)
        if not exps:
            return
        unreadable: dict[int, list[str]] = defaultdict(list)
        jobs = self.api.list_jobs(ListFilter(exp_statuses=EXP_NON_TERMINAL, extra=PAGE))
        artifacts = self.api.list_artifacts(ListFilter(exp_statuses=EXP_NON_TERMINAL,
                                                       extra=PAGE))
        for kind, rows in (("job", jobs), ("artifact", artifacts)):
            for row in skipped_of(rows):
                unreadable[row.exp_id].append(f"{kind} {row.id}")
        jobs_by_exp: dict[int, list[JobView]] = defaultdict(list)
        for job in jobs:
            jobs_by_exp[job.exp_id].append(job)
        yield exps, jobs_by_exp, {a.exp_id: a for a in artifacts}, unreadable

    @staticmethod
    def _log_skipped(rows: list, stats: TickStats) -> None:
        """Count and log the experiments a list call met but could not send."""
        for row in skipped_of(rows):
            stats.skipped += 1
            log.error("exp %s: skipped this tick: the API could not send it (the API server's "
                      "log says why)", row.id, extra={"exp_id": row.id})

    def _apply_exp_batch(self, batch, items: list[tuple[ExpView, list[JobView], Update]],
                         stats: TickStats) -> None:
        """Send the experiments' transitions with `update_exp_statuses`; log each refusal.

        Each item is still a guarded transition on the server; a refused one is logged with
        the experiment's name, id and job ids, as a single call's failure is, and the next
        tick decides again.

        Raises:
            FalconError: the whole call failed (the API server unreachable): the tick ends.
        """
        results = batch([ExpStatusUpdate(exp_id=u.id, status=u.status, reason=u.reason,
                                         message=u.message) for _exp, _jobs, u in items])
        for (exp, jobs, update), result in zip(items, results):
            if result.error is None:
                stats.applied += 1
                continue
            stats.failed += 1
            text = getattr(result.error, "message", str(result.error))
            stats.errors.append(text)
            job_ids = (",".join(str(j.id) for j in jobs) or "-") if update.job_id is None \
                else update.job_id
            log.warning("exp %s (id %s, job %s): %s %s -> %s failed: %s", exp.name, exp.id,
                        job_ids, update.kind, update.id, update.status, text)

    def _apply(self, exp: ExpView, jobs: list[JobView], updates: list[Update],
               stats: TickStats) -> bool:
        """Apply `updates` one call each, in order; return False when an artifact or exp update
        was refused (the experiment's own status must then wait for the next tick)."""
        # An artifact or exp update is about every job of the experiment (all succeeded, all
        # terminal): the log line then names them all, so it always carries a job id.
        all_job_ids = ",".join(str(j.id) for j in jobs) or "-"
        for update in updates:
            try:
                if update.kind == "job":
                    self.api.update_job_status(job_id=update.id, status=update.status,
                                               reason=update.reason, message=update.message)
                elif update.kind == "artifact":
                    self.api.update_artifact_status(artifact_id=update.id, status=update.status,
                                                    reason=update.reason,
                                                    message=update.message)
                else:
                    self.api.update_exp_status(exp_id=update.id, status=update.status,
                                               reason=update.reason, message=update.message)
                stats.applied += 1
            except FalconError as exc:
                # Logged with exp name, exp id and job id; the next update and the
                # next tick go on: the state read next time decides again.
                stats.failed += 1
                stats.errors.append(exc.message)
                job_ids = all_job_ids if update.job_id is None else update.job_id
                log.warning("exp %s (id %s, job %s): %s %s -> %s failed: %s", exp.name, exp.id,
                            job_ids, update.kind, update.id, update.status, exc.message)
                if update.kind in ("artifact", "exp"):
                    return False  # the experiment's status must not run ahead of its artifact's
        return True
