"""The exp controller: FalconController.expController of seed 000, section 3.2.3.

Each tick reads the experiments that are not terminal, ALL jobs of those experiments and their
artifacts (three list calls, paged, whatever the number of jobs), decides per experiment, and
writes through UpdateArtifactStatus then UpdateExpStatus (the seed's order). The seed lists only
the non-terminal jobs; we list the jobs of non-terminal *experiments* instead, so that a tick
killed between a job's last update and its experiment's update is finished by the next tick
(the seed's "整个过程必须是可以重入的": the loop is re-entrant).

Rules per experiment (seed 3.2.3, made complete for several roles, architecture page):
- Aborting: once every job is terminal, Artifact Failed (reason + message), Exp Aborted.
- any job Failed: the other roles are aborted, Artifact Failed, Exp Failed with the job's reason.
- any job Aborted (without an abort of the experiment): Artifact Failed, Exp Aborting -> Aborted.
- all jobs Succeeded: the artifact path must hold at least one file in the artifact store:
  then Artifact Succeeded and Exp Succeeded; else Artifact Failed and Exp Failed saying so.
- otherwise `job_status_to_exp_status` (seed: jobStatus2expStatus): Running once any role runs.
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
from collections.abc import Callable
from dataclasses import dataclass, field

from core.errors import FalconError

from .contract import ArtifactView, ExpView, FalconAPI, JobView, ListFilter, skipped_of

log = logging.getLogger("falcon.controllers.exp")

EXP_NON_TERMINAL = ("Created", "Running", "Aborting")
# The largest page the API serves: a tick's call count is ceil(rows / PAGE) per list.
PAGE = {"page_size": 1000}
JOB_NON_TERMINAL = frozenset({"Pending", "Running", "Aborting"})
# The reason this controller gives an experiment it aborts because one of its jobs was aborted.
JOB_ABORTED = "JobAborted"


def job_status_to_exp_status(job_statuses: list[str]) -> str:
    """jobStatus2expStatus (seed 3.2.1): the experiment status while its jobs are not finished.

    Args:
        job_statuses: the statuses of all jobs of one experiment, none Failed or Aborted.

    Returns:
        "Running" once any job is Running or Succeeded (its work has started), else "Created".
    """
    return "Running" if any(s in ("Running", "Succeeded") for s in job_statuses) else "Created"


@dataclass(frozen=True)
class Update:
    """One write the controller wants: `kind` is "job", "artifact" or "exp"."""

    kind: str
    id: int
    status: str
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
    return [Update("job", j.id, "Aborting", reason, f"aborted because {cause}", j.id)
            for j in jobs if j.status in ("Pending", "Running")]


def decide(exp: ExpView, jobs: list[JobView], artifact: ArtifactView | None,
           has_files: Callable[[str], bool]) -> list[Update]:
    """Return the updates that move one experiment toward the state its jobs imply.

    Pure apart from `has_files` (the artifact-store check), so every row of seed 3.2.3 can be
    tested with scripted states. Updates are ordered jobs, artifact, experiment.

    Args:
        exp: a non-terminal experiment.
        jobs: all of its jobs.
        artifact: its artifact record (None if it is missing: the experiment then fails).
        has_files: `url -> bool`, whether the artifact store holds a file under `url`.
    """
    updates: list[Update] = []
    art_open = artifact is not None and artifact.status == "Created"

    def fail_artifact(reason: str, message: str, job_id: int | None = None) -> None:
        if art_open:
            updates.append(Update("artifact", artifact.id, "Failed", reason, message, job_id))

    if not jobs:
        fail_artifact("NoJobs", "the experiment has no jobs")
        updates.append(Update("exp", exp.id, "Failed", "NoJobs", "the experiment has no jobs"))
        return updates

    if exp.status == "Aborting":
        if all(j.status not in JOB_NON_TERMINAL for j in jobs):
            if exp.reason == JOB_ABORTED:
                # This controller set Aborting because a role was aborted (below) and stopped
                # before Aborted: finish with that reason and message, so a re-run ends where
                # an uninterrupted tick does (re-entrant, seed 3.2.3).
                fail_artifact(JOB_ABORTED, exp.message)
                updates.append(Update("exp", exp.id, "Aborted", JOB_ABORTED, exp.message))
                return updates
            message = f"aborted ({_summary(jobs)})"
            fail_artifact("Aborted", "the experiment was aborted before its artifacts were "
                          "complete")
            updates.append(Update("exp", exp.id, "Aborted", "Aborted", message))
        return updates

    failed = [j for j in jobs if j.status == "Failed"]
    aborted = [j for j in jobs if j.status == "Aborted"]
    if failed:
        first = failed[0]
        message = f"role {first.role} failed: {first.message or first.reason or 'no detail'}"
        updates += _abort_siblings(jobs, "SiblingFailed", f"role {first.role} failed")
        fail_artifact(first.reason or "JobFailed", message, first.id)
        updates.append(Update("exp", exp.id, "Failed", first.reason or "JobFailed", message,
                              first.id))
        return updates
    if aborted:
        first = aborted[0]
        message = f"role {first.role} was aborted: {first.message or first.reason}"
        updates += _abort_siblings(jobs, "SiblingAborted", f"role {first.role} was aborted")
        fail_artifact(JOB_ABORTED, message, first.id)
        updates.append(Update("exp", exp.id, "Aborting", JOB_ABORTED, message, first.id))
        if all(j.status not in JOB_NON_TERMINAL for j in jobs):
            updates.append(Update("exp", exp.id, "Aborted", JOB_ABORTED, message, first.id))
        return updates

    if all(j.status == "Succeeded" for j in jobs):
        if artifact is None:
            updates.append(Update("exp", exp.id, "Failed", "ArtifactMissing",
                                  "the experiment has no artifact record"))
        elif artifact.status == "Succeeded":
            updates.append(Update("exp", exp.id, "Succeeded", "Succeeded",
                                  f"all {len(jobs)} role(s) succeeded"))
        elif artifact.status == "Failed":
            updates.append(Update("exp", exp.id, "Failed", artifact.reason or "ArtifactFailed",
                                  artifact.message))
        elif has_files(artifact.path):
            updates.append(Update("artifact", artifact.id, "Succeeded", "Succeeded",
                                  f"files found under {artifact.path}"))
            updates.append(Update("exp", exp.id, "Succeeded", "Succeeded",
                                  f"all {len(jobs)} role(s) succeeded"))
        else:
            message = (f"no file under {artifact.path}: the tasks succeeded but wrote nothing "
                       "there; write results under $FALCON_ARTIFACT_PATH")
            updates.append(Update("artifact", artifact.id, "Failed", "ArtifactEmpty", message))
            updates.append(Update("exp", exp.id, "Failed", "ArtifactEmpty", message))
        return updates

    target = job_status_to_exp_status([j.status for j in jobs])
    message = _summary(jobs)
    if target != exp.status or message != exp.message:
        updates.append(Update("exp", exp.id, target, None, message))
    return updates


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
        """Read the current state (3 list calls) and apply every experiment's updates."""
        stats = TickStats()
        exps = self.api.list_exps(ListFilter(statuses=EXP_NON_TERMINAL, extra=PAGE))
        for row in skipped_of(exps):
            stats.skipped += 1
            log.error("exp %s: skipped this tick: the API could not send it (the API server's "
                      "log says why)", row.id)
        if not exps:
            return stats
        jobs = self.api.list_jobs(ListFilter(exp_statuses=EXP_NON_TERMINAL, extra=PAGE))
        artifacts = self.api.list_artifacts(ListFilter(exp_statuses=EXP_NON_TERMINAL,
                                                       extra=PAGE))
        unreadable: dict[int, list[str]] = defaultdict(list)
        for kind, rows in (("job", jobs), ("artifact", artifacts)):
            for row in skipped_of(rows):
                unreadable[row.exp_id].append(f"{kind} {row.id}")
        jobs_by_exp: dict[int, list[JobView]] = defaultdict(list)
        for job in jobs:
            jobs_by_exp[job.exp_id].append(job)
        artifact_by_exp = {a.exp_id: a for a in artifacts}
        stats.exps, stats.jobs = len(exps), len(jobs)
        for exp in exps:
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
                self._apply(exp, exp_jobs, updates, stats)
            except Exception as exc:  # not a FalconError (those are handled per update)
                stats.failed += 1
                stats.skipped += 1
                log.error("exp %s (id %s): skipped the rest of this tick's updates: %s: %s",
                          exp.name, exp.id, type(exc).__name__, exc)
        return stats

    def _apply(self, exp: ExpView, jobs: list[JobView], updates: list[Update],
               stats: TickStats) -> None:
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
                # Logged with exp name, exp id and job id (seed 3.2.3); the next update and the
                # next tick go on: the state read next time decides again.
                stats.failed += 1
                stats.errors.append(exc.message)
                job_ids = all_job_ids if update.job_id is None else update.job_id
                log.warning("exp %s (id %s, job %s): %s %s -> %s failed: %s", exp.name, exp.id,
                            job_ids, update.kind, update.id, update.status, exc.message)
                if update.kind in ("artifact", "exp"):
                    return  # the experiment's status must not run ahead of its artifact's
