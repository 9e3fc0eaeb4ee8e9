"""The local cluster backend: each replica a subprocess in its own process group (embedded default).

Layout of `state_dir` (one folder per cluster job, named by `cluster_job_name`)::

    state_dir/
      .lock                         flock held by submit/delete, so two managers never race
      falcon-12-demo-main/
        manifest.json               job ids, artifact path, replica count, runner pid + start
                                    time per replica
        replica-0.log               the replica's stdout and stderr, interleaved as written
        replica-0.times             when each line of the log was read (core.processes.logtimes)
        replica-0.copied            written once the log was copied to the artifact store
        replica-0.started           written by the runner once the command runs (its pid); its
                                    mtime is the replica's start (CB-25)
        replica-0.exit              written by the runner when the command ended (exit code)

Every file is written atomically, so a resource manager that restarts (a new `LocalBackend` on
the same `state_dir`) finds running replicas again by pid and process start time, adopts them
instead of starting them twice (CB-3), and reads the exit codes of replicas that ended
while no manager ran. The runner (`local_runner.py`) is what makes that possible: it is the
command's parent, so it can wait for it and record the exit code whoever started the runner.

When a replica has ended its log is copied to the artifact store
(`artifacts.store.job_log_url`: `<experiment path>.logs/<role>/replica-<i>.log`), by `observe`
and at the latest by `delete`, so logs outlive the folder, aborts included (`artifacts.run_files`).

Admission (CB-23): at most `max_replicas` replicas run at once on this local cluster, and at
most `max_replicas_per_user` of one user's jobs (`FALCON_LOCAL_MAX_REPLICAS`,
`FALCON_LOCAL_MAX_REPLICAS_PER_USER`). `observe` decides, from the jobs the resource manager
reads each tick, which waiting jobs start now (`core.domain.fairshare.fair_admissions`: the user with
the fewest replicas running first, FIFO by job id within a user); `submit` creates only those,
and answers the others `WaitingForCapacity` before anything is created, so the job stays
Pending with the reason and nothing of it runs. A job asking for more replicas than either
limit can never run and is refused for good (`PermanentBackendError`: Failed at once).

Linux only: liveness and process groups are read from `/proc/<pid>/stat`.
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
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from artifacts.run_files import copy_ended_logs, replica_log, replica_times
from artifacts.store import local_path
from controllers.contract import JobView
from controllers.cluster_backends.base import (
    BackendError,
    ClusterBackend,
    ClusterJobState,
    ClusterJobStatus,
    PermanentBackendError,
    SubmitResult,
    WaitingForCapacity,
    ignored_fields_note,
)
from controllers.cluster_backends.local_state import (
    Proc,
    failed_state,
    group_alive,
    process_table,
    progress_state,
    read_stat,
    scan_replicas,
)
from core.processes.atomicfiles import locked, write_atomic
from core.domain.fairshare import Queued, default_per_user, fair_admissions
from core.observability.logs import log_context
from core.domain.statuses import CONFIG_ENV

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
RUNNER = Path(__file__).with_name("local_runner.py")
# TaskSpec fields with no meaning for a local process (image, devices).
IGNORED_FIELDS = ("image", "device_count", "device_type", "device_topo")
# Variables of the manager's environment a task may see. A subset, not all of os.environ: the
# manager may hold database URLs and tokens that tasks have no business reading.
DEFAULT_PASSTHROUGH_ENV = (
    "PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME",
    "SHELL", "TERM", "PYTHONPATH", "VIRTUAL_ENV", "STORAGE_EMULATOR_HOST",
    "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT",
)
POLL_SECONDS = 0.02
log = logging.getLogger(__name__)


class LocalBackend(ClusterBackend):
    """Run each Falcon job as `replica` local processes (`sh -c <command>`).

    Each replica is `local_runner.py` (the group leader of a new session, so one signal to the
    group stops the command and everything it started) running `sh -c <command>`. The replica's
    environment is a subset of this process's environment (`passthrough_env`), the directory of
    the current Python interpreter prepended to PATH (tasks run `python` from the same venv),
    the task's `envs`, `CUSTOM_CONFIG_KEY` (the experiment config, verbatim) and `FALCON_EXP_ID`,
    `FALCON_JOB_ID`, `FALCON_ROLE`, `FALCON_REPLICA_INDEX`, `FALCON_REPLICA_COUNT`,
    `FALCON_ARTIFACT_PATH` (a `file://` artifact path becomes a local directory, created here;
    `gs://` and other URLs are passed unchanged).

    Args:
        state_dir: folder holding one sub-folder per cluster job; created if missing.
        grace_seconds: seconds between SIGTERM and SIGKILL when deleting (Kubernetes
            `terminationGracePeriodSeconds` plays this role for Pods).
        stop_wait_seconds: how long one `delete` call waits for processes to end before it
            returns False and leaves the rest to the next call.
        workdir: working directory of the replicas; None means this process's cwd.
        passthrough_env: names of this process's environment variables that replicas inherit.
        runner: argv prefix that starts the runner script; tests may wrap it to delay a
            replica's start. Default: this interpreter running `local_runner.py`.
        max_replicas: replicas running at once on this cluster (`FALCON_LOCAL_MAX_REPLICAS`);
            None: the CPU count, at least 8.
        max_replicas_per_user: replicas of one user's jobs running at once
            (`FALCON_LOCAL_MAX_REPLICAS_PER_USER`); None: half of `max_replicas`, at least 1.

    Raises:
        RuntimeError: not on Linux (no /proc).
        ValueError: a replica limit below 1, or the per-user one above the machine-wide one.
    """

    name = "local"

    # Admission (`_plan_admission`) weighs every open job of the cluster: observed at once.
    observes_whole_cluster = True

    def __init__(self, state_dir: Path, *, grace_seconds: float = 10.0,
                 stop_wait_seconds: float = 0.5, workdir: Path | None = None,
                 passthrough_env: Iterable[str] = DEFAULT_PASSTHROUGH_ENV,
                 runner: Sequence[str] | None = None, max_replicas: int | None = None,
                 max_replicas_per_user: int | None = None):
        if not os.path.exists("/proc/self/stat"):
            raise RuntimeError("LocalBackend needs Linux /proc to track processes.")
        self.max_replicas = int(max_replicas or max(8, os.cpu_count() or 1))
        self.max_replicas_per_user = int(max_replicas_per_user
                                         or default_per_user(self.max_replicas))
        if not 1 <= self.max_replicas_per_user <= self.max_replicas:
            raise ValueError(
                f"max_replicas_per_user must be 1 to max_replicas ({self.max_replicas}); got "
                f"{self.max_replicas_per_user} (FALCON_LOCAL_MAX_REPLICAS_PER_USER)")
        # The last observe's admission: the ids of the jobs to create now (None before the
        # first observe: then submit admits), and why each other waiting job waits.
        self._admitted: set[int] | None = None
        self._waiting: dict[int, str] = {}
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.grace_seconds = float(grace_seconds)
        self.stop_wait_seconds = float(stop_wait_seconds)
        self.workdir = Path(workdir) if workdir is not None else None
        self.passthrough_env = tuple(passthrough_env)
        self.runner = tuple(runner) if runner else (sys.executable, str(RUNNER))
        # Runners this object started, by pid: polled so that none stays a zombie, and used to
        # stop processes whose state folder was removed by hand.
        self._children: dict[int, tuple[str, subprocess.Popen]] = {}

    # -- files ------------------------------------------------------------------------------

    @staticmethod
    def _read_manifest(folder: Path) -> dict[str, Any] | None:
        try:
            return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise BackendError(f"cannot read {folder / MANIFEST}: {exc}") from exc

    @staticmethod
    def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
        write_atomic(str(folder / MANIFEST), json.dumps(manifest, indent=1, sort_keys=True))

    def _reap(self) -> None:
        """Collect the exit status of runners we started that have ended (no zombies)."""
        for pid, (_name, proc) in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[pid]

    # -- submit -----------------------------------------------------------------------------

    def _environment(self, job: JobView, replicas: int) -> dict[str, str]:
        """Build the environment shared by all replicas of `job` (see the class docstring)."""
        env = {k: os.environ[k] for k in self.passthrough_env if k in os.environ}
        bindir = str(Path(sys.executable).parent)
        path = env.get("PATH", os.defpath)
        if bindir not in path.split(os.pathsep):
            env["PATH"] = bindir + os.pathsep + path
        env.update(job.task_spec.envs)
        artifact = job.artifact_path
        if artifact.startswith("file:"):
            try:
                directory = local_path(artifact)
                directory.mkdir(parents=True, exist_ok=True)
            except (ValueError, OSError) as exc:
                raise BackendError(f"cannot prepare artifact path {artifact!r} of job "
                                   f"{job.id}: {exc}") from exc
            artifact = str(directory)
        # Falcon's own variables come last: CreateExp validation rejects these names in `envs`,
        # and they must win even if an old row slipped through.
        env.update({
            CONFIG_ENV: job.config,
            "FALCON_EXP_ID": str(job.exp_id),
            "FALCON_JOB_ID": str(job.id),
            "FALCON_ROLE": job.role,
            "FALCON_REPLICA_COUNT": str(replicas),
            "FALCON_ARTIFACT_PATH": artifact,
        })
        return env

    def _spawn(self, folder: Path, name: str, command: str, index: int,
               env: dict[str, str]) -> dict[str, Any]:
        """Start the runner of replica `index`; return its manifest record (pid, start time)."""
        argv = [*self.runner, str(folder / f"replica-{index}.started"),
                str(folder / f"replica-{index}.exit"), str(replica_times(folder, index)),
                "--", "sh", "-c", command]
        # One file for both streams, opened for appending: writes of either land in order.
        with os.fdopen(os.open(replica_log(folder, index), os.O_WRONLY | os.O_APPEND
                               | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666),
                       "ab") as out:
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    env={**env, "FALCON_REPLICA_INDEX": str(index)},
                    cwd=self.workdir, start_new_session=True, close_fds=True)
            except (OSError, ValueError) as exc:  # ValueError: a NUL byte in an env value
                raise BackendError(f"cannot start replica {index} of {name}: {exc}") from exc
        self._children[proc.pid] = (name, proc)
        # Not yet waited for, so the entry exists even if the runner already ended (zombie).
        stat = read_stat(proc.pid)
        return {"pid": proc.pid, "start_time": stat.start_time if stat else -1,
                "started_at": time.time()}

    def submit(self, job: JobView) -> SubmitResult:
        """Start `replica` processes for `job`, or adopt the ones a previous call started.

        The manifest is written before the first process starts and after each one, so a
        manager that crashed mid-way completes only the replicas never started when `submit`
        is called again. (A crash in the microseconds between fork and the manifest write
        could still start that one replica twice; Kubernetes' atomic create has no such gap.)

        A job with no cluster job yet is created only when the last `observe` admitted it
        (CB-23); a cluster job that exists is adopted whatever the limits say.

        Raises:
            PermanentBackendError: the job asks for more replicas than this cluster, or one
                user, may ever run at once.
            WaitingForCapacity: it does not fit now; it waits its turn.
            BackendError: the task spec has no command, the artifact directory cannot be
                made, a process cannot be started, or the job is being deleted.
        """
        name = self.name_of(job)
        folder = self.state_dir / name
        spec = job.task_spec
        command = spec.command
        if not command.strip():
            raise BackendError(f"job {job.id} has no command in its task spec.")
        note = ignored_fields_note(spec, IGNORED_FIELDS, self.name)
        with locked(self.state_dir / ".lock"):  # one submit or delete at a time
            self._reap()
            manifest = self._read_manifest(folder)
            created = manifest is None
            if manifest is None:
                self._check_admitted(job)  # before anything of it exists
                folder.mkdir(parents=True, exist_ok=True)
                manifest = {
                    "version": MANIFEST_VERSION, "name": name, "job_id": job.id,
                    "exp_id": job.exp_id, "role": job.role, "command": command,
                    "artifact_path": job.artifact_path,
                    "replica": spec.replica or 1, "note": note,
                    "created_at": time.time(), "deleting_since": None, "replicas": {},
                }
                self._write_manifest(folder, manifest)
            elif manifest.get("deleting_since") is not None:
                raise BackendError(f"cluster job {name} is being deleted; submit it again "
                                   "after delete() returned True.")
            count = manifest["replica"]
            missing = [i for i in range(count) if str(i) not in manifest["replicas"]]
            if missing:
                env = self._environment(job, count)
                for index in missing:
                    manifest["replicas"][str(index)] = self._spawn(
                        folder, name, manifest["command"], index, env)
                    self._write_manifest(folder, manifest)
        message = note if created else " ".join(
            p for p in (f"Adopted the existing local cluster job {name}.", note) if p)
        return SubmitResult(cluster_job_name=name, created=created, message=message)

    # -- observe ----------------------------------------------------------------------------

    def observe(self, jobs: list[JobView]) -> dict[int, ClusterJobState]:
        """Return the state of each job's processes, keyed by job id (one scan of /proc).

        Replica states: exited (exit file present), running (runner alive and the command
        started), starting (runner alive, command not yet started, or never spawned), lost
        (runner gone without an exit file: killed, or the machine restarted). Job mapping as
        in `ClusterBackend.observe`; a lost replica makes the job Failed with reason
        `ReplicaLost` and no exit code.

        Also decides which of `jobs` with no cluster job yet the next `submit`s create (CB-23).
        """
        self._reap()
        table = process_table()
        try:
            present = {e.name for e in os.scandir(self.state_dir) if e.is_dir()}
        except FileNotFoundError:
            present = set()
        out: dict[int, ClusterJobState] = {}
        held: dict[int, int] = {}  # job id -> replicas, for the jobs whose cluster job exists
        for job in jobs:
            name = self.name_of(job)
            manifest = self._read_manifest(self.state_dir / name) if name in present else None
            if manifest is None:
                out[job.id] = ClusterJobState(
                    name=name, status=ClusterJobStatus.MISSING, reason="ClusterJobMissing",
                    message=f"The local cluster job {name} does not exist in {self.state_dir}.")
            else:
                with log_context(exp_id=job.exp_id, job_id=job.id):  # lines about it: its ids
                    out[job.id] = self._state(self.state_dir / name, manifest, table)
                    held[job.id] = manifest["replica"]
        self._plan_admission(jobs, out, held)
        return out

    # -- admission (CB-23) ------------------------------------------------------------------

    @staticmethod
    def _replicas_of(job: JobView) -> int:
        return max(1, job.task_spec.replica)

    def _never_fits(self, job: JobView) -> str | None:
        """Why `job` can never run on this cluster (too many replicas), else None."""
        replicas = self._replicas_of(job)
        for limit, setting, whose in (
                (self.max_replicas, "FALCON_LOCAL_MAX_REPLICAS", "this local cluster"),
                (self.max_replicas_per_user, "FALCON_LOCAL_MAX_REPLICAS_PER_USER",
                 "one user's jobs on this local cluster")):
            if replicas > limit:
                return (f"the job asks for {replicas} replicas; {whose} may run at most "
                        f"{limit} at once ({setting}), so it can never start. Lower `replica` "
                        "in the task spec, or run it on a larger cluster.")
        return None

    def _plan_admission(self, jobs: list[JobView], states: dict[int, ClusterJobState],
                        held: dict[int, int]) -> None:
        """Decide which of `jobs` still to create start now (`fair_admissions`).

        Args:
            jobs: the cluster's Pending and Running jobs (the resource manager's tick).
            states: their observed states; MISSING for a job with no cluster job.
            held: job id -> replicas of each job whose cluster job exists.

        A cluster job holds all its replicas until it is Succeeded or Failed (a replica that
        ended early keeps its share: simpler, and never over the limit).
        """
        running: dict[str, int] = {}
        for job in jobs:
            if job.id in held and not states[job.id].terminal:
                running[job.creator] = running.get(job.creator, 0) + held[job.id]
        waiting = [Queued(key=job.id, user=job.creator, order=job.id,
                          size=self._replicas_of(job))
                   for job in jobs
                   if states[job.id].status == ClusterJobStatus.MISSING
                   and not job.cluster_job_name and self._never_fits(job) is None]
        admitted = fair_admissions(waiting, running=running, limit=self.max_replicas,
                                   per_user=self.max_replicas_per_user)
        self._admitted = {item.key for item in admitted}
        for item in admitted:  # the waiting jobs' messages count what runs once these start
            running[item.user] = running.get(item.user, 0) + item.size
        total = sum(running.values())
        self._waiting = {
            item.key: (f"waiting for capacity: the job asks for {item.size} replica(s); "
                       f"{total} of at most {self.max_replicas} replicas run on this local "
                       f"cluster (FALCON_LOCAL_MAX_REPLICAS), {running.get(item.user, 0)} of "
                       f"at most {self.max_replicas_per_user} for this user "
                       "(FALCON_LOCAL_MAX_REPLICAS_PER_USER). It starts in its turn: users "
                       "with fewer replicas running first, oldest job first.")
            for item in waiting if item.key not in self._admitted}

    def _check_admitted(self, job: JobView) -> None:
        """Refuse to create `job` unless the last `observe` admitted it (CB-23).

        Raises:
            PermanentBackendError: it can never fit (`_never_fits`).
            WaitingForCapacity: it was not admitted; the message says what runs.
        """
        if (never := self._never_fits(job)) is not None:
            raise PermanentBackendError(never)
        if self._admitted is None:
            return  # no observe yet (a direct submit): nothing is known to run
        if job.id not in self._admitted:
            raise WaitingForCapacity(self._waiting.get(job.id) or (
                f"waiting for capacity: not admitted by the last look at this local cluster "
                f"(at most {self.max_replicas} replicas, FALCON_LOCAL_MAX_REPLICAS); it is "
                "considered again next tick."))
        self._admitted.discard(job.id)

    def _state(self, folder: Path, manifest: dict[str, Any],
               table: dict[int, Proc]) -> ClusterJobState:
        """Return the state of one local cluster job; stop its other replicas once one failed.

        Args:
            folder: the job's state folder.
            manifest: the job's manifest (`name`, `replica`, `replicas`, `note`).
            table: the process table read before the exit files (`process_table`).
        """
        name, count = manifest["name"], manifest["replica"]
        scan = scan_replicas(folder, manifest, table)
        if scan.exited or scan.lost:
            try:
                copy_ended_logs(folder, manifest)
            except Exception as exc:  # noqa: BLE001 - a store outage must not hide the state
                log.warning("copying the logs of %s to the artifact store failed (retried on "
                            "the next observe): %s", name, exc)
        failed = failed_state(folder, name, count, scan)
        if failed is not None and (scan.running or scan.waiting):
            # As the Kubernetes Job controller terminates the active pods of a Job that failed
            # (backoffLimit 0), a failed job's other replicas are stopped at once; the state
            # folder and logs stay for the user (only delete() removes them).
            self._signal_groups((manifest["replicas"][str(i)] for i in scan.running + scan.waiting
                                 if str(i) in manifest["replicas"]), signal.SIGKILL)
        return replace(failed or progress_state(name, count, scan, manifest.get("note") or ""),
                       started_at=scan.first_start())

    # -- delete -----------------------------------------------------------------------------

    @staticmethod
    def _signal_groups(recs: Iterable[dict[str, Any]], sig: int) -> None:
        for rec in recs:
            try:
                os.killpg(rec["pid"], sig)
            except ProcessLookupError:
                pass  # ended between our check and the signal: what we wanted

    def _remove(self, folder: Path) -> None:
        """Remove a job folder; rename first so `observe` never sees a half-deleted folder."""
        trash = self.state_dir / f".trash-{folder.name}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(folder, trash)
        except FileNotFoundError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def _stop_orphans(self, name: str) -> None:
        """Kill the groups of runners this object started for `name` whose folder vanished.

        Without the manifest there is no record of a grace period in progress, so the groups
        get SIGKILL at once; only processes this object started can be found this way.
        """
        procs = [p for _pid, (n, p) in self._children.items() if n == name]
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.stop_wait_seconds
        while procs and time.monotonic() < deadline:
            procs = [p for p in procs if p.poll() is None]
            if procs:
                time.sleep(POLL_SECONDS)
        self._reap()

    def delete(self, job: JobView) -> bool:
        """Stop every process of `job` and remove its folder (CB-13, CB-14).

        The first call sends SIGTERM to each replica's process group and records when; once
        `grace_seconds` have passed (in this call or a later one, even from a restarted
        manager) the remaining groups get SIGKILL. Each call waits up to `stop_wait_seconds`
        for them to end. Returns True only when no process of any replica group is alive and
        the folder is gone; a job with no folder counts as done.

        Raises:
            BackendError: the manifest exists but cannot be read.
        """
        name = self.name_of(job)
        folder = self.state_dir / name
        with locked(self.state_dir / ".lock"):  # one submit or delete at a time
            self._reap()
            manifest = self._read_manifest(folder)
            if manifest is None:
                self._stop_orphans(name)
                if any(n == name for n, _p in self._children.values()):
                    return False
                # A folder without a manifest never started a process (the manifest is
                # written first), so removing it is all there is to do.
                if folder.exists():
                    self._remove(folder)
                return True

            recs = list(manifest["replicas"].values())
            alive = [r for r in recs if group_alive(process_table(), r)]
            if alive and manifest.get("deleting_since") is None:
                manifest["deleting_since"] = time.time()
                self._write_manifest(folder, manifest)
                self._signal_groups(alive, signal.SIGTERM)
            killed = False
            deadline = time.monotonic() + self.stop_wait_seconds
            while alive:
                if not killed and time.time() - manifest["deleting_since"] >= self.grace_seconds:
                    self._signal_groups(alive, signal.SIGKILL)
                    killed = True
                if time.monotonic() >= deadline:
                    break
                time.sleep(POLL_SECONDS)
                self._reap()
                table = process_table()
                alive = [r for r in alive if group_alive(table, r)]
            if alive:
                return False
            self._reap()  # runners seen dead above are zombies until collected here
            try:
                # Every replica has ended: keep their output before the folder goes.
                copy_ended_logs(folder, manifest)
            except Exception as exc:  # noqa: BLE001 - any store error: retried by the next call
                raise BackendError(f"cannot copy the logs of {name} to the artifact store: "
                                   f"{exc}; the run folder is kept until they are copied"
                                   ) from exc
            self._remove(folder)
            return True

    # -- validate ---------------------------------------------------------------------------

    def validate(self, task_spec: dict[str, Any]) -> dict[str, list[str]]:
        """Return {}: any TaskSpec that passed `jobs.specs` runs locally.

        `image` and the device fields cannot be honoured by a local process; that is reported
        as a note on submit and in observed messages rather than refused, so the same
        tasks.yaml runs locally and on a cluster.
        """
        return {}
