"""The status vocabulary of every Falcon entity, defined once, with no Django.

The models' choices and transition tables, the services, the gRPC and HTTP APIs, the controllers
and the CLI all use these names; no other module spells a status as a bare string. The state
machines themselves (which status may follow which) are in docs/architecture.md and on the models
(`Experiment.machine`, `Job.machine`, `Artifact.machine`).

Each status is a `StrEnum`, so a member equals its string value ("Running") and can be sent over
HTTP, gRPC or written to the database as it is.
"""
from __future__ import annotations

from enum import StrEnum


class ExpStatus(StrEnum):
    """Experiment states: Created -> Running -> Succeeded | Failed; non-terminal -> Aborting ->
    Aborted."""

    CREATED = "Created"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ABORTING = "Aborting"
    ABORTED = "Aborted"


class JobStatus(StrEnum):
    """Job states: Pending -> Running -> Succeeded | Failed; non-terminal -> Aborting -> Aborted."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ABORTING = "Aborting"
    ABORTED = "Aborted"


class ArtifactStatus(StrEnum):
    """Artifact states: Created -> Succeeded | Failed."""

    CREATED = "Created"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class AnalysisStatus(StrEnum):
    """Analysis states, lower case as the analyzer's design names them: pending -> running ->
    succeeded | failed; any non-terminal state -> cancelled; pending -> skipped (offline
    discovery found none of the plugin's inputs in the artifact: nothing ran, nothing failed).
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


class AnalysisType(StrEnum):
    """How an analysis was started: offline (found by the controller's poller over Succeeded
    experiments) or online (asked for by a user). Both run the same way."""

    OFFLINE = "offline"
    ONLINE = "online"


# Terminal states never change once reached.
EXP_TERMINAL = frozenset({ExpStatus.SUCCEEDED, ExpStatus.FAILED, ExpStatus.ABORTED})
JOB_TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.ABORTED})
ARTIFACT_TERMINAL = frozenset({ArtifactStatus.SUCCEEDED, ArtifactStatus.FAILED})
ANALYSIS_TERMINAL = frozenset({AnalysisStatus.SUCCEEDED, AnalysisStatus.FAILED,
                               AnalysisStatus.CANCELLED, AnalysisStatus.SKIPPED})

# Open states: not terminal, so a controller still has work to do on the row.
EXP_OPEN = frozenset(ExpStatus) - EXP_TERMINAL
JOB_OPEN = frozenset(JobStatus) - JOB_TERMINAL
ANALYSIS_OPEN = frozenset(AnalysisStatus) - ANALYSIS_TERMINAL

# Active states: open and not being aborted. Only an active experiment may be aborted, or get a
# new job or artifact (an Aborting one has already moved its jobs to Aborting, and a job added
# then would be launched after the abort). Only an active job is aborted with its experiment.
EXP_ACTIVE = frozenset({ExpStatus.CREATED, ExpStatus.RUNNING})
JOB_ACTIVE = frozenset({JobStatus.PENDING, JobStatus.RUNNING})

# The environment variable that carries the experiment's config, verbatim, into every task.
CONFIG_ENV = "CUSTOM_CONFIG_KEY"


def choices(statuses: type[StrEnum]) -> list[tuple[str, str]]:
    """Return Django field choices `[(value, label)]` for a status enum (label = value)."""
    return [(member.value, member.value) for member in statuses]
