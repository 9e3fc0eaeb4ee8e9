"""The contract between the resource manager and a cluster (docs/cluster-behaviours.md).

The resource manager hands a backend frozen `JobView`s and gets plain states back; it never sees
Kubernetes objects or process ids. Two implementations fit this contract: `LocalBackend`
(subprocesses, the embedded default) and a Kubernetes backend (one `batch/v1` Indexed Job per
Falcon Job with `completions = parallelism = replica`). The rules every backend follows are in
docs/cluster-behaviours.md (CB-n below):

- a job is Running only when every replica runs (CB-5), Succeeded only when every replica exited 0
  (CB-9), Failed as soon as any replica failed, with that replica's exit code and stderr tail;
- a cluster job that vanished is reported as Missing, never silently re-created (CB-12);
- `submit` adopts an existing cluster job with the same deterministic name (CB-3);
- `delete` counts an already-gone job as done (CB-14) and reports done only once nothing of the job
  is left (CB-13).
"""
from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from controllers.contract import JobView
from core.domain.statuses import JobStatus
from core.domain.taskspec import TaskSpec

# Kubernetes object names used as label values (`job-name`, `batch.kubernetes.io/job-name`) must
# be DNS-1123 labels of at most 63 characters, so the Job name is held to the same limit.
NAME_MAX = 63
NAME_PREFIX = "falcon"
HASH_LEN = 8
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_DASHES = re.compile(r"-{2,}")
# What `dns_part` leaves as it is: lower-case letters and digits, single '-' inside.
_DNS_PART = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")

# How much of a failed replica's stderr goes into the message: enough to read the traceback,
# small enough for a status column and a gRPC message.
STDERR_TAIL_LINES = 20
STDERR_TAIL_BYTES = 2048


class ClusterJobStatus(StrEnum):
    """What a backend observed of one cluster job (mapped by the resource manager to JobStatus).

    Every member but `MISSING` has the value of the `JobStatus` it maps to, so the resource
    manager writes an observed status as the job's status. `MISSING` is not a Falcon job status:
    the resource manager turns it into Failed with a reason saying the cluster job disappeared.
    """

    PENDING = JobStatus.PENDING.value
    RUNNING = JobStatus.RUNNING.value
    SUCCEEDED = JobStatus.SUCCEEDED.value
    FAILED = JobStatus.FAILED.value
    MISSING = "Missing"


@dataclass(frozen=True, slots=True)  # slots: a manager keeps one per job between ticks
class ClusterJobState:
    """The observed state of one Falcon job's cluster job.

    Attributes:
        name: the cluster job's name (see `ClusterBackend.cluster_job_name`).
        status: one of `ClusterJobStatus`.
        reason: a short CamelCase word for machines and filters, e.g. `ReplicaFailed`,
            `ReplicasStarting`, `ClusterJobMissing` (Kubernetes condition `reason` style).
        message: a sentence for humans; for Failed it names the replica and holds the tail of
            its stderr (at most `STDERR_TAIL_LINES` lines / `STDERR_TAIL_BYTES` bytes).
        exit_code: the failing replica's exit code for Failed (128 + N when killed by signal N,
            as container runtimes report it), 0 for Succeeded, None otherwise or when unknown.
        suspended: the cluster holds the job back on purpose (Kubernetes `spec.suspend: true`,
            set by a queue such as Kueue until quota is free): reported as Pending, and the
            resource manager's pending timeout does not run while it is set, because the job
            is waiting its turn, not failing to start.
        replica_lost: with Pending, a replica was ended by the cluster (evicted, preempted,
            its node lost) or is being deleted before it finished: the job cannot run as it
            is, whether it ran before or not, so the resource manager's progress deadline
            (CB-21) runs for it, not only the optional pending timeout.
        started_at: when the cluster started the job (aware UTC), None before it did or when
            unknown: Kubernetes Job `status.startTime`, the local backend's first replica
            start. The resource manager sends it with the job's move to Running, Succeeded or
            Failed, so a run that ended between two ticks still has its real start (CB-25).
    """

    name: str
    status: ClusterJobStatus
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    suspended: bool = False
    replica_lost: bool = False
    started_at: datetime | None = None

    @property
    def terminal(self) -> bool:
        """Return True for Succeeded and Failed: states that never change afterwards (CB-10)."""
        return self.status in (ClusterJobStatus.SUCCEEDED, ClusterJobStatus.FAILED)


@dataclass(frozen=True)
class SubmitResult:
    """What `submit` did.

    Attributes:
        cluster_job_name: the name to record on the Falcon job (`UpdateJobStatus`).
        created: True when this call created the cluster job, False when it adopted one that
            already existed under the same name (CB-3).
        message: notes for the job's message, e.g. fields the backend ignores.
    """

    cluster_job_name: str
    created: bool
    message: str = ""


class BackendError(Exception):
    """A cluster call failed in a way the next resource-manager tick may retry.

    Backends raise it for transient or unexpected failures (API unreachable, a process that
    could not be started). Rules the user must fix are reported by `validate`, not raised.
    """


class WaitingForCapacity(BackendError):
    """The cluster has no room for the job now; it is admitted later, in its turn.

    Raised by `submit` of a backend that admits jobs under a capacity limit (the local
    cluster, CB-23) before anything is created. The resource manager keeps the job Pending with
    reason `WaitingForCapacity` and this message (the limit and what runs), and its pending
    timeout does not run meanwhile: the job waits its turn, it is not failing to start (CB-8).
    """


class PermanentBackendError(BackendError):
    """The cluster refused the job for good: calling again with the same input cannot succeed.

    Raised by `submit` when the cluster's API rejects what the backend sent in a way no retry
    fixes (Kubernetes: a 4xx answer other than 409 Conflict/AlreadyExists, 429 Too Many
    Requests, 408 Request Timeout and 401 Unauthorized, e.g. 422 Invalid or 403 Forbidden; API
    conventions, "HTTP Status codes"). The resource manager fails the Falcon job with reason
    `ClusterRejected` and this message instead of retrying every tick (the kopf
    `PermanentError` idea).
    """


def dns_part(text: str) -> str:
    """Lower-case `text` and squeeze every run of non-DNS characters into one '-'."""
    if _DNS_PART.fullmatch(text):
        return text  # already one (a role, most names): what the rest would return
    return _DASHES.sub("-", _NOT_DNS.sub("-", text.lower())).strip("-")


def cluster_job_name_for(*, exp_id: int, exp_name: str, role: str, max_len: int = NAME_MAX) -> str:
    """Return the deterministic cluster job name of one role of one experiment.

    The name is `falcon-<exp_id>-<exp name>-<role>` reduced to a DNS-1123 label (RFC 1123:
    lowercase letters, digits and '-', starting and ending alphanumeric, at most 63 characters).
    `exp_id` is unique and a role is unique within its experiment, so the full form is unique;
    when it is too long, the name and role are cut and `-<8 hex of sha256(exp_id, exp_name,
    role)>` is appended, so two long roles of one experiment still differ. The experiment id is
    never cut (it comes first), which keeps names of different experiments apart.

    Args:
        exp_id: the experiment's primary key.
        exp_name: the experiment's name (any characters; they are sanitised).
        role: the role name (already a DNS-1123 label by CreateExp validation).
        max_len: the longest name allowed; a backend whose objects derive longer names from
            this one asks for less (the Kubernetes backend keeps room for the `-<index>` that
            an Indexed Job appends to make Pod hostnames).

    Returns:
        A string of at most `max_len` characters matching `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
    """
    head = f"{NAME_PREFIX}-{int(exp_id)}"
    tail = "-".join(p for p in (dns_part(exp_name), dns_part(role)) if p)
    full = f"{head}-{tail}" if tail else head
    if len(full) <= max_len:
        return full
    digest = hashlib.sha256(f"{exp_id}\0{exp_name}\0{role}".encode()).hexdigest()[:HASH_LEN]
    room = max_len - len(head) - len(digest) - 2  # two '-' separators
    cut = tail[:room].strip("-") if room > 0 else ""
    return "-".join(p for p in (head, cut, digest) if p)


def ignored_fields_note(task_spec: TaskSpec, fields: tuple[str, ...], backend: str) -> str:
    """Return a note naming the TaskSpec fields a backend cannot honour, or "" when none are set.

    Args:
        task_spec: the job's TaskSpec (a role of the user's `tasks.yaml`, `jobs.specs`).
        fields: the field names the backend ignores.
        backend: the backend's name for the message, e.g. "local".
    """
    used = [f for f in fields if getattr(task_spec, f)]
    if not used:
        return ""
    return (f"image and device fields are ignored by the {backend} backend "
            f"(set here: {', '.join(used)}).")


class ClusterBackend(ABC):
    """Run Falcon jobs on one kind of cluster; the resource manager's only view of a cluster.

    Every method is idempotent and safe to call again on the next tick with the same input:
    the resource manager is level-triggered and may restart at any time.
    Implementations are not required to be thread-safe; one resource manager calls them.
    """

    name: str = "abstract"
    # The resource manager observes a cluster page by page (`observe` once per page of open
    # jobs, the pages of one tick between `begin_observe_pass` and `end_observe_pass` when
    # the backend has them). A backend whose `observe` must see every open job of the cluster
    # at once (an admission that weighs them all) sets this: it gets them together.
    observes_whole_cluster: bool = False

    def cluster_job_name(self, job: JobView) -> str:
        """Return the deterministic cluster job name of `job` (see `cluster_job_name_for`)."""
        return cluster_job_name_for(exp_id=job.exp_id, exp_name=job.exp_name, role=job.role)

    def name_of(self, job: JobView) -> str:
        """Return the name to look `job` up by: the recorded one if any, else the derived one.

        The resource manager records `SubmitResult.cluster_job_name` on the job; preferring the
        recorded name means a later change of the naming rule cannot orphan running jobs.
        """
        return job.cluster_job_name or self.cluster_job_name(job)

    @abstractmethod
    def submit(self, job: JobView) -> SubmitResult:
        """Create the cluster job of `job`, or adopt the one that already exists.

        A cluster job found under the job's name is adopted, never started a second time
        (CB-3: on Kubernetes a create answering 409 AlreadyExists means adopt).

        Args:
            job: a Pending Falcon job; `task_spec` is the validated TaskSpec.

        Raises:
            PermanentBackendError: the cluster refused the job; retrying cannot help.
            BackendError: the cluster could not be reached or the job could not be started;
                calling again later is safe.
        """

    @abstractmethod
    def observe(self, jobs: list[JobView]) -> dict[int, ClusterJobState]:
        """Return the state of each job's cluster job, keyed by Falcon job id.

        Implementations read the cluster ONCE for the whole list (one list call by label on
        Kubernetes, one scan of the state directory locally), never once per job.

        Mapping (CB-5, CB-9, CB-10, CB-12): Running only when every replica runs;
        Succeeded only when every replica exited 0; Failed as soon as any replica failed, with
        its exit code and stderr tail (other replicas may still run: `delete` stops them);
        Missing when no cluster job of that name exists; Pending otherwise, with the reason in
        the message.

        Raises:
            BackendError: the cluster could not be read; no partial answer is given.
        """

    @abstractmethod
    def delete(self, job: JobView) -> bool:
        """Stop and remove everything of `job`'s cluster job.

        Returns:
            True only once nothing of it is left (CB-13: Aborted only when no pod or
            process remains); a job that is already gone counts as done (CB-14). False means
            "still stopping, call again".

        Raises:
            BackendError: the cluster could not be reached; calling again later is safe.
        """

    @abstractmethod
    def validate(self, task_spec: dict[str, Any]) -> dict[str, list[str]]:
        """Return backend-specific problems of a TaskSpec, keyed by TaskSpec field name.

        The common shape rules live in `jobs.specs`; this adds what only this kind of
        cluster cares about (for Kubernetes: a missing image, an unknown device type). The
        caller prefixes the keys with `role_to_task_spec.<role>.`. An empty dict means valid.
        """
