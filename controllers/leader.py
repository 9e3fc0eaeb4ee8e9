"""Leader election for controller loops on a `coordination.k8s.io/v1` Lease.

Several replicas of a controller may run; the one holding the Lease acts, the others wait.
This is client-go's `leaderelection` algorithm on `CoordinationV1Api`, written here because the
`kubernetes` package's own elector builds its API client from the global default configuration,
calls `sys.exit()` on bad arguments, and never releases the Lease (decisions.md#dec-lease):

- acquire: read the Lease; create it if missing (409: someone else created it first); take it
  over when its holder did not renew it for `leaseDurationSeconds` as observed on THIS
  replica's monotonic clock (clock skew between nodes cannot make a live leader look expired);
  a follower tries every `retry_period` (no jitter), and once more exactly when the Lease it
  watches expires, so a killed leader is replaced within lease duration + retry period (plus
  the API calls) of its last renewal: it is seen at most one retry period late, then expires
  `leaseDurationSeconds` later (docs/analyzer.md#takeover);
- renew: every `retry_period`, a PUT carrying the `resourceVersion` that was read; a 409
  Conflict means somebody else wrote the Lease, so leadership is lost at once;
- a leader that cannot renew for `renew_deadline` (< lease duration) stops acting before any
  other replica can take over; `is_leader()` is false from then on, and every write of the
  controller goes through `fence()`, which raises `LeadershipLost` instead of writing;
- a leader whose work loop dies stops renewing, releases the Lease (so another replica takes
  over within one retry period, or within lease duration + retry period if the release fails)
  and re-raises, so the process exits non-zero (cluster-behaviours.md#cb-18).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .kubeclient import KubeCaller
from .runner import beat

log = logging.getLogger("falcon.controllers.leader")

# Seconds: the shortest wait between a follower's attempts (see `LeaseElector.follower_wait`).
MIN_FOLLOWER_WAIT = 0.01


class LeadershipLost(BaseException):
    """This replica no longer holds the Lease: stop the current work at once.

    A `BaseException`, like `KeyboardInterrupt`: the per-item `except Exception` handlers of a
    controller tick must not swallow it and go on writing.
    """


@dataclass(frozen=True)
class ElectionConfig:
    """Where the Lease is and how leadership is timed (client-go `LeaderElectionConfig`).

    Attributes:
        lease_name: the Lease object's name (a DNS-1123 subdomain).
        namespace: the Lease's namespace.
        identity: this replica's `holderIdentity` (Pod name, or host_pid_random).
        lease_duration: seconds a non-leader waits after the last observed renewal before
            taking over (`leaseDurationSeconds`).
        renew_deadline: seconds a leader keeps trying to renew before it stops acting.
        retry_period: seconds between two acquire or renew attempts.

    Raises:
        ValueError: the durations do not satisfy lease_duration > renew_deadline >
            retry_period > 0, or a name is empty.
    """

    lease_name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self):
        if not (self.lease_name and self.namespace and self.identity):
            raise ValueError("lease name, namespace and identity are required")
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError("leader election needs lease_duration > renew_deadline > "
                             f"retry_period > 0; got {self.lease_duration}, "
                             f"{self.renew_deadline}, {self.retry_period}")


class MicroTime(datetime):
    """A `datetime` that always serialises with six fractional digits (Kubernetes MicroTime).

    The API server parses a Lease's `acquireTime` / `renewTime` with the Go layout
    `2006-01-02T15:04:05.000000Z07:00` (k8s.io/apimachinery `metav1.RFC3339Micro`), so the
    six digits are required. The `kubernetes` client serialises a `datetime` with
    `isoformat()`, which drops the fraction when the microseconds are 0 (one write in a
    million) and that write is refused. The client's models coerce a string back into a
    plain `datetime` but keep a subclass, so the fix travels as this subclass.
    """

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        """Return ISO 8601 with microseconds always present and UTC as `Z`, as Go's layout
        formats it (`timespec` is ignored)."""
        text = super().isoformat(sep, "microseconds")
        return text[:-6] + "Z" if text.endswith("+00:00") else text


def micro_time(moment: datetime) -> MicroTime:
    """Return `moment` in UTC as a `MicroTime`.

    Raises:
        ValueError: `moment` is naive (a MicroTime carries its offset).
    """
    if moment.tzinfo is None:
        raise ValueError("a MicroTime needs a timezone-aware datetime")
    utc = moment.astimezone(timezone.utc)
    return MicroTime(utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second,
                     utc.microsecond, tzinfo=timezone.utc)


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def default_identity() -> str:
    """Return `POD_NAME` (downward API) or `<hostname>_<pid>_<random>`: unique per process."""
    return os.environ.get("POD_NAME") or \
        f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


class LeaseElector:
    """Acquire, renew and release one Lease for one identity.

    Args:
        coordination: a `CoordinationV1Api` on the API server that holds the Lease.
        config: the election's names and durations.
        caller: runs each API call with a timeout (its retries should be 0: the election
            loop itself retries every `retry_period`).
        clock: monotonic seconds; injectable for tests.
        wall_clock: the current UTC time written as `acquireTime` / `renewTime` (only for
            humans and other tools: expiry is judged on `clock`); injectable for tests.
    """

    def __init__(self, coordination: client.CoordinationV1Api, config: ElectionConfig, *,
                 caller: KubeCaller, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], datetime] = _utc_now):
        self.api = coordination
        self.config = config
        self.caller = caller
        self.clock = clock
        self.wall_clock = wall_clock
        self._lock = threading.Lock()
        self._leading = False
        self._last_renew: float | None = None
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._observed_duration = 0.0

    # -- state --------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """Return True while this replica holds the Lease and renewed it within renew_deadline."""
        with self._lock:
            return (self._leading and self._last_renew is not None
                    and self.clock() - self._last_renew < self.config.renew_deadline)

    def fence(self) -> None:
        """Raise `LeadershipLost` unless `is_leader()`: call it before every write."""
        if not self.is_leader():
            raise LeadershipLost(f"{self.config.identity} does not hold Lease "
                                 f"{self.config.namespace}/{self.config.lease_name}")

    @property
    def leading(self) -> bool:
        """Whether the last attempt left this replica holding the Lease (no deadline check)."""
        with self._lock:
            return self._leading

    def lose(self, why: str) -> None:
        """Mark leadership as lost (`is_leader()` false from now on) and log why."""
        with self._lock:
            was = self._leading
            self._leading = False
        if was:
            log.warning("%s lost Lease %s/%s: %s", self.config.identity, self.config.namespace,
                        self.config.lease_name, why)

    def follower_wait(self) -> float:
        """Return the seconds a follower waits before its next attempt.

        `retry_period`, or less when the other holder's Lease expires sooner (as observed
        here): the next attempt then lands on the expiry instead of up to one retry period
        after it, which is what makes the takeover bound `lease_duration + retry_period`
        (docs/analyzer.md#takeover). Never below `MIN_FOLLOWER_WAIT`, so an attempt that
        failed at expiry (an API error) cannot spin.
        """
        period = self.config.retry_period
        holder = self._observed[0] if self._observed else ""
        if not holder or holder == self.config.identity:
            return period
        left = self._observed_at + self._observed_duration - self.clock()
        return min(period, max(left, MIN_FOLLOWER_WAIT)) if left > 0 else period

    # -- API ----------------------------------------------------------------------------------

    def _spec(self, *, acquire_time: datetime | None, transitions: int) -> client.V1LeaseSpec:
        now = self.wall_clock()
        # MicroTime, not plain datetimes: the API server wants six fractional digits.
        return client.V1LeaseSpec(
            holder_identity=self.config.identity,
            lease_duration_seconds=max(1, round(self.config.lease_duration)),
            acquire_time=micro_time(acquire_time or now), renew_time=micro_time(now),
            lease_transitions=transitions)

    def try_acquire_or_renew(self) -> bool:
        """Make one attempt to acquire (follower) or renew (leader) the Lease.

        Returns:
            True when this replica holds the Lease after the attempt. A 409 on create or
            replace, or a Lease held by another live replica, returns False (and a leader that
            sees either has lost leadership). Transport failures return False too, and leave
            `is_leader()` to expire by `renew_deadline`.
        """
        started = self.clock()
        name, ns = self.config.lease_name, self.config.namespace
        try:
            lease = self.caller.call(self.api.read_namespaced_lease, name, ns)
        except ApiException as exc:
            if exc.status != 404:
                log.info("reading Lease %s/%s failed: %s %s", ns, name, exc.status, exc.reason)
                return False
            return self._create_lease(started)
        except urllib3.exceptions.HTTPError as exc:
            log.info("reading Lease %s/%s failed: %s", ns, name, exc)
            return False
        spec = lease.spec or client.V1LeaseSpec()
        if self._held_by_another(lease, started):
            return False
        mine = (spec.holder_identity or "") == self.config.identity
        lease.spec = self._spec(acquire_time=spec.acquire_time if mine else None,
                                transitions=(spec.lease_transitions or 0) + (0 if mine else 1))
        return self._replace_lease(lease, started)

    def _create_lease(self, started: float) -> bool:
        """Create the Lease, held by this replica (none exists yet).

        Args:
            started: `clock()` when this attempt started, in seconds.

        Returns:
            True when the create succeeded; False on any failure (409: another replica
            created it first), logged.
        """
        name, ns = self.config.lease_name, self.config.namespace
        body = client.V1Lease(api_version="coordination.k8s.io/v1", kind="Lease",
                              metadata=client.V1ObjectMeta(name=name, namespace=ns),
                              spec=self._spec(acquire_time=None, transitions=0))
        try:
            self.caller.call(self.api.create_namespaced_lease, ns, body)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            log.info("creating Lease %s/%s failed: %s", ns, name, exc)
            return False
        return self._won(started)

    def _held_by_another(self, lease: client.V1Lease, started: float) -> bool:
        """Return True when another replica holds `lease` and has renewed it recently enough.

        Expiry is judged on this replica's clock: the holder's record (holder, renewTime,
        resourceVersion) is stamped with `started` when it is first seen changed, and the Lease
        has expired once it stayed the same for `leaseDurationSeconds`. A leader that finds the
        Lease held by another loses leadership.

        Args:
            lease: the Lease as read.
            started: `clock()` when this attempt started, in seconds.
        """
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        record = (holder, spec.renew_time, lease.metadata.resource_version)
        if record != self._observed:
            self._observed = record
            self._observed_at = started
        if not holder or holder == self.config.identity:
            return False
        duration = spec.lease_duration_seconds or self.config.lease_duration
        self._observed_duration = duration
        if self._observed_at + duration > started:
            self.lose(f"held by {holder}")
            return True
        log.info("Lease %s/%s of %s expired; taking it over", self.config.namespace,
                 self.config.lease_name, holder)
        return False

    def _replace_lease(self, lease: client.V1Lease, started: float) -> bool:
        """Write `lease` (its spec already this replica's) back, guarded by resourceVersion.

        Args:
            lease: the Lease as read, with the new spec.
            started: `clock()` when this attempt started, in seconds.

        Returns:
            True when the replace succeeded; False on any failure, and a 409 (a concurrent
            writer) loses leadership.
        """
        name, ns = self.config.lease_name, self.config.namespace
        try:
            # The read resourceVersion travels in metadata: a concurrent writer makes this 409.
            self.caller.call(self.api.replace_namespaced_lease, name, ns, lease)
        except ApiException as exc:
            if exc.status == 409:
                self.lose("the Lease changed since it was read (409 Conflict)")
            else:
                log.info("updating Lease %s/%s failed: %s %s", ns, name, exc.status, exc.reason)
            return False
        except urllib3.exceptions.HTTPError as exc:
            log.info("updating Lease %s/%s failed: %s", ns, name, exc)
            return False
        return self._won(started)

    def _won(self, started: float) -> bool:
        with self._lock:
            if not self._leading:
                log.info("%s acquired Lease %s/%s", self.config.identity, self.config.namespace,
                         self.config.lease_name)
            self._leading = True
            # The renewal counts from when the attempt started: conservative against a slow PUT.
            self._last_renew = started
        return True

    def release(self) -> None:
        """Give the Lease up if this replica holds it (holder cleared, 1 s duration).

        Best effort: a failure is logged, and the Lease then expires by itself.
        """
        with self._lock:
            leading, self._leading = self._leading, False
        if not leading:
            return
        name, ns = self.config.lease_name, self.config.namespace
        try:
            lease = self.caller.call(self.api.read_namespaced_lease, name, ns)
            if (lease.spec.holder_identity if lease.spec else None) != self.config.identity:
                return
            now = micro_time(self.wall_clock())
            lease.spec = client.V1LeaseSpec(holder_identity=None, lease_duration_seconds=1,
                                            acquire_time=now, renew_time=now,
                                            lease_transitions=lease.spec.lease_transitions)
            self.caller.call(self.api.replace_namespaced_lease, name, ns, lease)
            log.info("%s released Lease %s/%s", self.config.identity, ns, name)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            log.warning("releasing Lease %s/%s failed (it will expire): %s", ns, name, exc)


class Fenced:
    """Forward attribute access to `target`; call `fence()` before each named write method.

    Wraps the controllers' API client (`update_*_status`) and cluster backends (`submit`,
    `delete`), so that a replica that lost its Lease cannot write, whatever the loop does.
    """

    def __init__(self, target: Any, fence: Callable[[], None], writes: Iterable[str]):
        self._target = target
        self._fence = fence
        self._writes = frozenset(writes)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name in self._writes and callable(value):
            def guarded(*args, **kwargs):
                self._fence()
                return value(*args, **kwargs)
            return guarded
        return value


def _renew_loop(elector: LeaseElector, stop: threading.Event, halt: threading.Event,
                work_done: threading.Event) -> None:
    """Renew every retry_period until the work ends or the Lease is lost (then set `halt`)."""
    cfg = elector.config
    while not work_done.is_set():
        if stop.wait(cfg.retry_period):
            halt.set()
            return
        if work_done.is_set():
            return
        renewed = False
        deadline = elector.clock() + cfg.renew_deadline
        while not work_done.is_set() and elector.clock() < deadline:
            if elector.try_acquire_or_renew():
                renewed = True
                break
            if not elector.leading:  # 409 or another holder: lost now, no retrying
                break
            if stop.wait(min(cfg.retry_period, max(0.0, deadline - elector.clock()))):
                break
        if not renewed and not work_done.is_set():
            elector.lose("could not renew within renew_deadline")
            halt.set()
            return


def run_elected(work: Callable[[threading.Event], Any], elector: LeaseElector, *,
                stop: threading.Event,
                wait: Callable[[float], bool] | None = None) -> None:
    """Run `work(halt)` while this replica leads; wait as a follower otherwise.

    `work` is a controller loop (`runner.run_loop` bound to its controller) that returns when
    `halt` is set. `halt` is set when `stop` is set or the Lease is lost; a lost Lease (or a
    `LeadershipLost` raised by a fenced write) sends this replica back to waiting as a
    follower that keeps trying to acquire (client-go's `LeaderElector.Run` stops at the first
    loss; a controller process here would then sit idle or exit, so the loop goes on). When
    `work` raises anything else, renewing stops, the Lease is released and the exception
    propagates (cluster-behaviours.md#cb-18). Only when `stop` is set, or `work` returns by
    itself (`--once`, with `halt` unset), is the Lease released and this returns.

    Args:
        wait: how a follower waits between two attempts: `wait(seconds)`, True when `stop`
            is set; `stop.wait` unless a test drives a virtual clock.
    """
    cfg = elector.config
    wait = wait or stop.wait
    while not stop.is_set():
        # A follower is alive too: without this beat the liveness probe would restart every
        # replica that waits for the Lease.
        beat()
        if not elector.try_acquire_or_renew():
            wait(elector.follower_wait())
            continue
        halt = threading.Event()
        work_done = threading.Event()
        renewer = threading.Thread(target=_renew_loop, args=(elector, stop, halt, work_done),
                                   name="lease-renewer", daemon=True)
        renewer.start()
        fenced_out = False
        try:
            work(halt)
        except LeadershipLost as exc:
            # A fenced write found the Lease unrenewed for renew_deadline (an API-server
            # outage, a slow PUT) before the renewer gave up and set `halt`: leadership is
            # lost exactly as if `halt` were set, so this replica follows again below.
            fenced_out = True
            log.warning("stopped acting: %s", exc)
        except BaseException:
            work_done.set()
            renewer.join(cfg.renew_deadline)
            elector.release()
            raise
        finally:
            work_done.set()
        renewer.join(cfg.renew_deadline)
        if stop.is_set() or not (halt.is_set() or fenced_out):
            # Asked to stop, or the loop returned on its own (`--once`, max ticks).
            elector.release()
            return
        # Lost the Lease: wait as a follower again, and keep trying to acquire it. Nothing is
        # released: a Lease this replica no longer holds is not its to clear, and one it still
        # holds (the outage ended) is simply renewed by the next attempt.
        elector.lose("stopped acting")
