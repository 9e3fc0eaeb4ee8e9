"""A small Kubernetes API server on loopback that the real `kubernetes` client talks to over HTTP.

`kmock` answers 404 to every PUT, sets no resourceVersion and ignores label selectors, so a
test could pass only because it is lax. This fake keeps the semantics Falcon depends on, from the
Kubernetes API conventions:

- every object gets `metadata.uid`, `creationTimestamp` and a `resourceVersion` from one
  counter that every write advances;
- POST of an existing name answers 409 `AlreadyExists`; POST of a Job whose Pod template has
  a container without an image answers 422 `Invalid` with the API server's message; a Lease
  whose `acquireTime` / `renewTime` is not a MicroTime with six fractional digits answers 400
  `BadRequest`; GET, PUT and DELETE of a missing
  object answer 404 `NotFound`; a PUT whose `metadata.resourceVersion` is not the stored one
  answers 409 `Conflict` (optimistic concurrency: how a Lease renewal loses a race);
- LIST filters by `labelSelector` (=, ==, !=, in, notin, exists, !exists), pages with
  `limit` / `continue`, and answers 410 `Expired` for a continue token older than the last
  `compact()`;
- DELETE of a Job follows `propagationPolicy`: `Orphan` (the default for batch/v1 Jobs deleted
  through the API, cluster-behaviours.md#cb-13) leaves its Pods, `Background` deletes the Job
  then its Pods and Services (owner references), `Foreground` keeps the Job with a
  deletionTimestamp until its Pods are gone. With `linger_pods`, deleted Pods stay Terminating
  until `reap()`;
- the Job controller is played by the test: `spawn_pods` creates a Job's Pods from its template
  with the labels and hostnames the real controller sets, and `set_job_status` / `put_pod`
  install the shapes of fixtures/k8s-job-status.yaml;
- finalizers: DELETE of an object with finalizers (other than the API server's own
  `foregroundDeletion`) only sets its deletionTimestamp; it is removed once a PATCH (JSON
  Patch, RFC 6902: add, remove, replace, test) leaves it without finalizers. `expire_finished`
  plays the TTL-after-finished controller (a Foreground delete of every finished Job);
- WATCH (`?watch=true`): every write is an event (ADDED, MODIFIED, DELETED with the object as
  stored) under its resourceVersion; a watch from resourceVersion N streams the matching events
  after N as JSON lines, sends a BOOKMARK every `bookmark_interval` seconds when asked
  (`allowWatchBookmarks`), ends after `timeoutSeconds`, and answers an ERROR event 410 Expired
  when N is older than the last `compact()`; `drop_watches()` ends every open stream, as an API
  server restart does; `stall_watches(resource)` makes the open and new streams of a resource
  send nothing at all (no event, no bookmark, no error) until the test releases them, as a
  loaded API server or a silently dropped connection does;
- `inject` makes matching requests (of one client, by its bearer token, if asked) answer an
  error status (410, 500, ...), stall longer than the client's timeout, or wait until the test
  releases them and only then take effect (a POST that lands after its client gave up); a
  fault's `where(name, query)` narrows it further (only the re-LIST of a watch cache, not the
  one-item probe); `bulk_put` stores thousands of objects at once (a load test's cluster);
  `requests` records every request (method, resource, name, query, token, when it arrived,
  the status answered);
- the kubelet and the Pod GC are played by the test: `run`, `succeed`, `fail` write a Pod's
  status in the kubelet's shapes; `gc_pod` / `gc_pods` remove terminated Pods as the Pod
  garbage collector does, with no controller asked; `end_faults` ends every injected fault.
"""
from __future__ import annotations

import base64
import bisect
import copy
import json
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

KINDS = {
    # resource: (group path, apiVersion, kind)
    "pods": ("/api/v1", "v1", "Pod"),
    "services": ("/api/v1", "v1", "Service"),
    "jobs": ("/apis/batch/v1", "batch/v1", "Job"),
    "leases": ("/apis/coordination.k8s.io/v1", "coordination.k8s.io/v1", "Lease"),
}
_PATH = re.compile(r"^(?P<group>/api/v1|/apis/batch/v1|/apis/coordination\.k8s\.io/v1)"
                   r"/namespaces/(?P<ns>[^/]+)/(?P<res>[a-z]+)(?:/(?P<name>[^/]+))?$")
_POD_LOG = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")
# Resources whose PUT does not change `status` (they have a status subresource).
_STATUS_SUBRESOURCE = {"pods", "jobs", "services"}


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    """Return a `meta/v1 Status` as the API server sends with an error."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code}


def _split_terms(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur.strip())
    return terms


def label_matcher(selector: str):
    """Return a predicate on a labels dict for a label selector string.

    Raises:
        ValueError: the selector cannot be parsed (the fake answers 400, as the API does).
    """
    checks = []
    for term in _split_terms(selector or ""):
        m = re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", term)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                checks.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                checks.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
            continue
        m = re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)", term)
        if m:
            key, op, value = m.groups()
            if op == "!=":
                checks.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                checks.append(lambda labels, k=key, v=value: labels.get(k) == v)
            continue
        m = re.fullmatch(r"(!?)([\w./-]+)", term)
        if m:
            neg, key = m.groups()
            checks.append(lambda labels, k=key, n=bool(neg): (k in labels) != n)
            continue
        raise ValueError(f"unable to parse requirement: {term!r}")
    return lambda labels: all(check(labels or {}) for check in checks)


@dataclass
class Fault:
    """A planned misbehaviour for requests matching `method` and `resource` (None = any)."""

    method: str | None
    resource: str | None
    status: int | None = None
    reason: str = ""
    times: int = 1
    name: str | None = None
    action: Any = None  # called (under the store lock) before the request is handled
    token: str | None = None  # only requests sent with this bearer token (one client)
    # The request waits until this is set (or `hold_timeout` passed), then is handled as
    # usual: a request in flight that lands late, after its client gave up.
    hold: threading.Event | None = None
    hold_timeout: float = 60.0
    # Only requests for which `where(name, query)` is true (None: every matching request).
    where: Any = None


@dataclass
class Request:
    method: str
    resource: str
    namespace: str
    name: str | None
    query: dict[str, str] = field(default_factory=dict)
    token: str = ""  # the bearer token that sent it (which client)
    holders: dict[str, str] = field(default_factory=dict)  # Lease name -> holder, when sent
    at: float = field(default_factory=time.time)  # when it arrived (wall clock, as the DB's)
    code: int | None = None  # the status answered (None: not answered yet)


class _Encoded(bytes):
    """An answer body already encoded as JSON (a LIST page, encoded under the store lock)."""


class _Store(dict):
    """The fake's objects by (resource, namespace, name): every store and removal is an event."""

    def __init__(self, kube: FakeKube):
        super().__init__()
        self.kube = kube

    def __setitem__(self, key, obj):
        kind = "MODIFIED" if key in self else "ADDED"
        super().__setitem__(key, obj)
        self.kube._event(kind, key, obj)

    def __delitem__(self, key):
        obj = self[key]
        super().__delitem__(key)
        obj["metadata"]["resourceVersion"] = self.kube._next_rv()
        self.kube._event("DELETED", key, obj)


class FakeKube:
    """The store and behaviour of the fake API server; `serve()` starts it on 127.0.0.1."""

    def __init__(self, *, linger_pods: bool = False):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        # (resourceVersion, type, resource, namespace, object snapshot), in resourceVersion order.
        self.events: list[tuple[int, str, str, str, dict[str, Any]]] = []
        self.event_rvs: list[int] = []
        self.bookmark_interval = 0.05
        self.watch_generation = 0
        # resource -> an Event: its WATCH streams send nothing until the Event is set.
        self.watch_stalls: dict[str, threading.Event] = {}
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = _Store(self)
        self.rv = 1000
        self.compacted_rv = 0
        self.linger_pods = linger_pods
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        # A Pod's log by Pod name (`GET .../pods/{name}/log`); a Pod without one has an empty log.
        self.pod_logs: dict[str, bytes] = {}
        # With `timestamps=true` each line is prefixed as the kubelet does: by this Pod's list
        # of RFC 3339 times, one per line (default: 2026-01-01T00:00:00Z for every line).
        self.pod_log_times: dict[str, list[str]] = {}
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    # -- server -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def serve(self) -> FakeKube:
        fake = self

        class Handler(_Handler):
            kube = fake

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                # A client killed mid-request (the chaos script's SIGKILL) is not a fault of
                # the fake; anything else is printed as usual.
                if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="fake-k8s")
        self.thread.start()
        return self

    def close(self) -> None:
        with self.lock:
            self.closing = True
            self.changed.notify_all()
            held = [f.hold for f in self.faults if f.hold is not None]
        for event in held:
            event.set()  # every held request ends now
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def kubeconfig(self, path: Path, context: str = "fake", token: str = "fake-token") -> Path:
        """Write a kubeconfig pointing at this server (plain HTTP, a dummy `token`: requests
        record it, so that a test tells its clients apart)."""
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "falcon", "user": {"token": token}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "falcon"}}],
        }))
        return path

    # -- test controls ------------------------------------------------------------------------

    def inject(self, method: str | None, resource: str | None, *, status: int | None = None,
               reason: str = "", times: int = 1,
               name: str | None = None, action=None, token: str | None = None,
               hold: threading.Event | None = None, hold_timeout: float = 60.0,
               where=None) -> Fault:
        """Make the next `times` matching requests fail with `status`, stall until `hold` is
        set, or run `action()` first (e.g. another writer changing the object: a lost race).

        Returns the `Fault`: setting its `times` to 0 ends it (a failure "for a while").

        Args:
            token: match only the requests of the client with this bearer token
                (`kubeconfig(token=...)`), e.g. one of two replicas.
            hold: hold each matching request until the event is set (at most
                `hold_timeout` s; `close` sets it), then handle it as usual: it lands after
                its client has timed out, as a POST in flight during a network partition
                does, or a stalled API server's answer. A test waits on the event, never a
                fixed time.
            where: a predicate `where(name, query)` on the request's object name (None for
                a LIST or WATCH) and query parameters; only requests it accepts match.
        """
        fault = Fault(method, resource, status, reason, times, name, action, token,
                      hold, hold_timeout, where)
        with self.lock:
            self.faults.append(fault)
        return fault

    def stall_watches(self, resource: str) -> threading.Event:
        """Make every WATCH of `resource`, open or opened later, send nothing until the
        returned Event is set: no event, no BOOKMARK, no ERROR, the connection kept open (a
        stream an overloaded API server or a dropped connection leaves silent). Writes made
        meanwhile are sent once it is set, from where each stream stopped."""
        release = threading.Event()
        with self.lock:  # under the lock: no write made after this returns slips through
            self.watch_stalls[resource] = release
        return release

    def bulk_put(self, resource: str, ns: str, objs: list[dict[str, Any]]) -> None:
        """Store many new objects at once, stamped like created ones, WITHOUT watch events
        (copying each into the event log costs seconds at 10,000): for a cluster's content
        before any watch is opened. Every object gets its own resourceVersion."""
        with self.lock:
            for obj in objs:
                obj = self._stamp_new(resource, ns, obj)
                dict.__setitem__(self.objects, (resource, ns, obj["metadata"]["name"]), obj)

    def bump(self, resource: str, ns: str, name: str) -> None:
        """Advance an object's resourceVersion, as a write by another client would."""
        with self.lock:
            self._touch((resource, ns, name))

    def count(self, method: str | None = None, resource: str | None = None) -> int:
        """Return how many requests matched `method` and `resource` (None = any)."""
        with self.lock:
            return sum(1 for r in self.requests if (method is None or r.method == method)
                       and (resource is None or r.resource == resource))

    def reset_requests(self) -> None:
        with self.lock:
            self.requests.clear()

    def compact(self) -> None:
        """Expire every continue token issued so far (as etcd compaction does)."""
        with self.lock:
            self.rv += 1
            self.compacted_rv = self.rv

    def get(self, resource: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((resource, ns, name))
            return copy.deepcopy(obj) if obj else None

    def list(self, resource: str, ns: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(o) for (res, n, _), o in sorted(self.objects.items())
                    if res == resource and (ns is None or n == ns)]

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _event(self, kind: str, key: tuple[str, str, str], obj: dict[str, Any]) -> None:
        """Record a write for watchers (under the lock) and wake them."""
        rv = int(obj["metadata"].get("resourceVersion") or self.rv)
        self.events.append((rv, kind, key[0], key[1], copy.deepcopy(obj)))
        self.event_rvs.append(rv)
        self.changed.notify_all()

    def _touch(self, key: tuple[str, str, str]) -> None:
        """An object changed in place: advance its resourceVersion and tell watchers."""
        obj = self.objects[key]
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._event("MODIFIED", key, obj)

    def drop_watches(self) -> None:
        """End every open WATCH stream (clients reconnect from their last resourceVersion)."""
        with self.lock:
            self.watch_generation += 1
            self.changed.notify_all()

    def expire_watches(self) -> None:
        """Compact (`compact`) and end every open WATCH at once: watchers reconnect from a
        resourceVersion that is gone and get 410 Expired, as after an API server restart
        that lost the watch cache."""
        with self.lock:
            self.compact()
            self.drop_watches()

    def set_finalizers(self, resource: str, ns: str, name: str, finalizers: list[str]) -> None:
        """Set an object's finalizers as another controller would; an object being deleted
        whose last finalizer goes is removed."""
        with self.lock:
            key = (resource, ns, name)
            self.objects[key]["metadata"]["finalizers"] = list(finalizers)
            self._touch(key)
            self._finish_if_released(key)

    def expire_finished(self, ns: str) -> list[str]:
        """Play the TTL-after-finished controller with a TTL of 0: Foreground-delete every Job
        with a Complete or Failed condition; return their names."""
        with self.lock:
            names = [key[2] for key, obj in list(self.objects.items())
                     if key[0] == "jobs" and key[1] == ns
                     and not obj["metadata"].get("deletionTimestamp")
                     and any(c.get("type") in ("Complete", "Failed")
                             and c.get("status") == "True"
                             for c in (obj.get("status") or {}).get("conditions") or [])]
            for name in names:
                self.delete("jobs", ns, name, "Foreground")
            return names

    def _held(self, obj: dict[str, Any]) -> bool:
        """Whether finalizers other than the API server's foregroundDeletion hold `obj`."""
        return any(f != "foregroundDeletion" for f in obj["metadata"].get("finalizers") or [])

    def _finish_if_released(self, key: tuple[str, str, str]) -> None:
        """Remove an object being deleted once nothing holds it any more."""
        obj = self.objects.get(key)
        if obj is None or not obj["metadata"].get("deletionTimestamp"):
            return
        finalizers = obj["metadata"].get("finalizers") or []
        if key[0] == "jobs" and "foregroundDeletion" in finalizers:
            self._finish_foreground()
            return
        if not finalizers:
            uid = obj["metadata"]["uid"]
            del self.objects[key]
            if key[0] == "jobs":
                self._collect(uid)
            else:
                self._finish_foreground()  # an owner waiting for this Pod may go now

    def _mark_deleting(self, key: tuple[str, str, str]) -> None:
        meta = self.objects[key]["metadata"]
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = now_rfc3339()
            self._touch(key)

    def _stamp_new(self, resource: str, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        _group, api_version, kind = KINDS[resource]
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", kind)
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = ns
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["resourceVersion"] = self._next_rv()
        meta.setdefault("generation", 1)
        return obj

    def put_object(self, resource: str, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` as a new object (bypassing the API), stamped like a created one."""
        with self.lock:
            obj = self._stamp_new(resource, ns, copy.deepcopy(obj))
            self.objects[(resource, ns, obj["metadata"]["name"])] = obj
            return copy.deepcopy(obj)

    def set_job_status(self, ns: str, name: str, status: dict[str, Any]) -> None:
        """Replace a Job's status, as the Job controller does (advances resourceVersion)."""
        with self.lock:
            obj = self.objects[("jobs", ns, name)]
            obj["status"] = copy.deepcopy(status)
            self._touch(("jobs", ns, name))

    def set_pod_status(self, ns: str, name: str, status: dict[str, Any]) -> None:
        with self.lock:
            obj = self.objects[("pods", ns, name)]
            obj["status"] = copy.deepcopy(status)
            self._touch(("pods", ns, name))

    def spawn_pods(self, ns: str, job_name: str, *, status: dict[str, Any] | None = None,
                   statuses: list[dict[str, Any]] | None = None) -> list[str]:
        """Create the Pods of an Indexed Job as the Job controller does; return their names.

        Each Pod gets the template's labels plus `batch.kubernetes.io/job-name`,
        `batch.kubernetes.io/controller-uid`, `batch.kubernetes.io/job-completion-index`, an
        owner reference to the Job, hostname `<job>-<index>` and the template's subdomain.
        """
        with self.lock:
            job = self.objects[("jobs", ns, job_name)]
            count = job["spec"].get("parallelism") or 1
            template = job["spec"]["template"]
            names = []
            for index in range(count):
                pod = copy.deepcopy(template)
                meta = pod.setdefault("metadata", {})
                meta["name"] = f"{job_name}-{index}-{uuid.uuid4().hex[:5]}"
                labels = meta.setdefault("labels", {})
                labels.update({"batch.kubernetes.io/job-name": job_name, "job-name": job_name,
                               "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
                               "batch.kubernetes.io/job-completion-index": str(index)})
                meta.setdefault("annotations", {})[
                    "batch.kubernetes.io/job-completion-index"] = str(index)
                meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                            "name": job_name, "uid": job["metadata"]["uid"],
                                            "controller": True, "blockOwnerDeletion": True}]
                pod["spec"]["hostname"] = f"{job_name}-{index}"
                pod["status"] = copy.deepcopy(
                    (statuses[index] if statuses else status) or {"phase": "Pending"})
                stamped = self._stamp_new("pods", ns, pod)
                self.objects[("pods", ns, meta["name"])] = stamped
                names.append(meta["name"])
            return names

    def put_pod(self, ns: str, job_name: str, index: int, status: dict[str, Any]) -> str:
        """Store one Pod of `job_name` (which may not exist) with the given status."""
        job = self.get("jobs", ns, job_name)
        labels = dict(((job or {}).get("spec", {}).get("template", {}).get("metadata", {})
                       .get("labels") or {}))
        labels.update({"batch.kubernetes.io/job-name": job_name, "job-name": job_name,
                       "batch.kubernetes.io/job-completion-index": str(index)})
        name = f"{job_name}-{index}-{uuid.uuid4().hex[:5]}"
        meta: dict[str, Any] = {"name": name, "labels": labels}
        if job:
            meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                        "name": job_name, "uid": job["metadata"]["uid"],
                                        "controller": True}]
        self.put_object("pods", ns, {"metadata": meta,
                                     "spec": {"containers": [{"name": "main",
                                                              "image": "busybox"}]},
                                     "status": status})
        return name

    # -- the kubelet and the Pod garbage collector, played by the test ----------------------

    def _container(self, state: dict, **extra) -> dict:
        return {"phase": extra.pop("phase"), **extra,
                "containerStatuses": [{"name": "analysis", "image": "img", "imageID": "",
                                       "ready": False, "restartCount": 0, "state": state}]}

    def run(self, ns: str, name: str) -> None:
        """The kubelet started the Pod's container (phase Running)."""
        self.set_pod_status(ns, name, self._container(
            {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, phase="Running"))

    def succeed(self, ns: str, name: str) -> None:
        """The Pod's container exited 0 (phase Succeeded, terminated Completed)."""
        self.set_pod_status(ns, name, self._container(
            {"terminated": {"exitCode": 0, "reason": "Completed"}}, phase="Succeeded"))

    def fail(self, ns: str, name: str, code: int, *, reason: str = "Error",
             message: str = "") -> None:
        """The Pod's container exited `code` with termination message `message`."""
        self.set_pod_status(ns, name, self._container(
            {"terminated": {"exitCode": code, "reason": reason, "message": message}},
            phase="Failed"))

    def gc_pod(self, ns: str, name: str) -> bool:
        """Remove one Pod if it is Succeeded or Failed, as the Pod GC does (no controller is
        asked, no finalizer of Falcon's holds a Pod); True if it was removed."""
        with self.lock:
            obj = self.objects.get(("pods", ns, name))
            if obj is None or (obj.get("status") or {}).get("phase") not in ("Succeeded",
                                                                              "Failed"):
                return False
            del self.objects[("pods", ns, name)]
            return True

    def gc_pods(self, ns: str) -> list[str]:
        """Remove every Succeeded or Failed Pod of `ns` (the Pod GC); return their names."""
        with self.lock:
            names = [key[2] for key, obj in list(self.objects.items())
                     if key[0] == "pods" and key[1] == ns
                     and (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
            for name in names:
                del self.objects[("pods", ns, name)]
            return names

    def end_faults(self) -> None:
        """Drop every fault still planned (`inject`): the outage is over."""
        with self.lock:
            self.faults.clear()

    def reap(self) -> None:
        """Finish terminating Pods and the foreground deletions waiting on them."""
        with self.lock:
            for key, obj in list(self.objects.items()):
                if key[0] == "pods" and obj["metadata"].get("deletionTimestamp") \
                        and not self._held(obj):
                    del self.objects[key]
            self._finish_foreground()

    # -- semantics ----------------------------------------------------------------------------

    def _dependents(self, uid: str) -> list[tuple[str, str, str]]:
        return [key for key, obj in self.objects.items()
                if any(ref.get("uid") == uid
                       for ref in obj["metadata"].get("ownerReferences") or [])]

    def _delete_pod(self, key: tuple[str, str, str]) -> None:
        obj = self.objects[key]
        if self.linger_pods or self._held(obj):
            self._mark_deleting(key)
        else:
            del self.objects[key]

    def _collect(self, uid: str) -> None:
        for key in self._dependents(uid):
            if key[0] == "pods":
                self._delete_pod(key)
            else:
                del self.objects[key]

    def _finish_foreground(self) -> None:
        for key, obj in list(self.objects.items()):
            meta = obj["metadata"]
            if "foregroundDeletion" in (meta.get("finalizers") or []) and \
                    not any(k[0] == "pods" for k in self._dependents(meta["uid"])):
                rest = [f for f in meta["finalizers"] if f != "foregroundDeletion"]
                if rest:  # another finalizer still holds the Job: it stays, deleting
                    meta["finalizers"] = rest
                    self._touch(key)
                else:
                    del self.objects[key]

    def delete(self, resource: str, ns: str, name: str, policy: str | None) -> dict[str, Any]:
        key = (resource, ns, name)
        obj = self.objects[key]
        if resource == "pods":
            self._delete_pod(key)
            return copy.deepcopy(self.objects.get(key)) or _success(resource, name, obj)
        if resource != "jobs":
            if self._held(obj):
                self._mark_deleting(key)
                return copy.deepcopy(self.objects[key])
            del self.objects[key]
            return _success(resource, name, obj)
        uid = obj["metadata"]["uid"]
        # batch/v1 Jobs default to orphaning their Pods when deleted through the API.
        policy = policy or "Orphan"
        if policy != "Foreground" and self._held(obj):
            # A finalizer holds it: deleting only marks it; removed when released.
            self._mark_deleting(key)
            return copy.deepcopy(self.objects[key])
        if policy == "Orphan":
            del self.objects[key]
            for dep in self._dependents(uid):
                refs = self.objects[dep]["metadata"]["ownerReferences"]
                self.objects[dep]["metadata"]["ownerReferences"] = [
                    r for r in refs if r.get("uid") != uid]
                self._touch(dep)
            return _success(resource, name, obj)
        if policy == "Background":
            del self.objects[key]
            self._collect(uid)
            return _success(resource, name, obj)
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = now_rfc3339()
            meta["finalizers"] = sorted(set(meta.get("finalizers") or []) |
                                        {"foregroundDeletion"})
            self._touch(key)
        self._collect(uid)
        self._finish_foreground()
        return copy.deepcopy(self.objects.get(key)) or _success(resource, name, obj)


# How the API server names a kind in an Invalid message: `Job.batch "x" is invalid: ...`.
_GROUP_SUFFIX = {"jobs": ".batch", "leases": ".coordination.k8s.io"}


def _invalid(resource: str, body: dict[str, Any]) -> str:
    """Return the first validation error the API server reports for a created object, or "".

    Only the rules Falcon can break are checked: a container without an image (core/v1
    Container `image` is required in a Pod template: `Required value`).
    """
    if resource != "jobs":
        return ""
    pod = (((body.get("spec") or {}).get("template") or {}).get("spec") or {})
    for i, container in enumerate(pod.get("containers") or []):
        if not (container.get("image") or "").strip():
            return f"spec.template.spec.containers[{i}].image: Required value"
    return ""


# metav1.MicroTime's wire form (k8s.io/apimachinery RFC3339Micro, Go layout
# `2006-01-02T15:04:05.000000Z07:00`): exactly six fractional digits, then Z or an offset.
_MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")


def _undecodable(resource: str, body: dict[str, Any]) -> str:
    """Return why the API server could not decode `body` ("" when it can).

    A Lease's `acquireTime` / `renewTime` are MicroTime: the real server answers 400 when one
    is not in the RFC3339Micro layout (e.g. `2026-01-01T10:00:00+00:00`, no fraction).
    """
    if resource != "leases":
        return ""
    spec = body.get("spec") or {}
    for key in ("acquireTime", "renewTime"):
        value = spec.get(key)
        if value is not None and not (isinstance(value, str) and _MICRO_TIME.fullmatch(value)):
            return (f'Lease in version "v1" cannot be handled as a Lease: parsing time '
                    f'"{value}" as "2006-01-02T15:04:05.000000Z07:00": cannot parse '
                    f'spec.{key}')
    return ""


def _success(resource: str, name: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Return the body of a DELETE that removed `obj`: the object as it was last stored
    (the API server answers a delete with the deleted object, not a Status)."""
    return copy.deepcopy(obj)


def _encode_token(rv: int, after: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "after": after}).encode()).decode()


class _Handler(BaseHTTPRequestHandler):
    kube: FakeKube
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # keep test output clean
        pass

    def _send(self, code: int, body: dict[str, Any] | bytes) -> None:
        data = body if isinstance(body, _Encoded) else json.dumps(body).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout injection)

    def _pod_log(self, ns: str, name: str, query: dict[str, str]) -> None:
        """The `log` subresource of a Pod: its text as `text/plain` (404 when no such Pod)."""
        kube = self.kube
        with kube.lock:
            kube.requests.append(Request("GET", "pods/log", ns, name, query))
            pod = kube.objects.get(("pods", ns, name))
            data = kube.pod_logs.get(name, b"")
            times = kube.pod_log_times.get(name, [])
        if query.get("timestamps") == "true" and data:
            lines = data.splitlines(keepends=True)
            data = b"".join(
                f"{times[i] if i < len(times) else '2026-01-01T00:00:00Z'} ".encode() + line
                for i, line in enumerate(lines))
        if pod is None:
            return self._send(404, status_body(404, "NotFound", f'pods "{name}" not found',
                                               name=name, kind="pods"))
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return {}
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def _dispatch(self, method: str) -> None:
        kube = self.kube
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        log_match = _POD_LOG.match(url.path)
        if log_match and method == "GET":
            return self._pod_log(log_match.group("ns"), log_match.group("name"), query)
        m = _PATH.match(url.path)
        body = self._body() if method in ("POST", "PUT", "DELETE", "PATCH") else {}
        if not m or m.group("res") not in KINDS or KINDS[m.group("res")][0] != m.group("group"):
            return self._send(404, status_body(404, "NotFound", f"no route {url.path}"))
        res, ns, name = m.group("res"), m.group("ns"), m.group("name")
        with kube.lock:
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            holders = {key[2]: (obj.get("spec") or {}).get("holderIdentity") or ""
                       for key, obj in kube.objects.items() if key[0] == "leases"}
            req = Request(method, res, ns, name, query, token, holders)
            kube.requests.append(req)
            fault = next((f for f in kube.faults if f.times > 0
                          and f.method in (None, method) and f.resource in (None, res)
                          and f.name in (None, name) and f.token in (None, token)
                          and (f.where is None or f.where(name, query))), None)
            if fault is not None:
                fault.times -= 1
        if fault is not None:
            if fault.action is not None:
                with kube.lock:
                    fault.action()
            if fault.hold is not None:
                fault.hold.wait(fault.hold_timeout)
            if fault.status:
                req.code = fault.status
                return self._send(fault.status, status_body(
                    fault.status, fault.reason or "InternalError",
                    f"injected {fault.status}"))
        if method == "GET" and name is None and query.get("watch") in ("true", "1"):
            req.code = 200
            return self._watch(res, ns, query)
        try:
            code, out = self._handle(method, res, ns, name, query, body)
        except ValueError as exc:
            code, out = 400, status_body(400, "BadRequest", str(exc))
        req.code = code
        self._send(code, out)

    def _handle(self, method, res, ns, name, query, body):
        kube = self.kube
        _group, api_version, kind = KINDS[res]
        with kube.lock:
            key = (res, ns, name)
            if method in ("POST", "PUT"):
                undecodable = _undecodable(res, body)
                if undecodable:
                    return 400, status_body(400, "BadRequest", undecodable)
            if method == "GET" and name is None:
                return self._list(res, ns, query)
            if method == "POST" and name is None:
                obj_name = (body.get("metadata") or {}).get("name")
                if not obj_name:
                    return 422, status_body(422, "Invalid", "metadata.name: Required value")
                if body.get("kind") not in (None, kind):
                    return 400, status_body(400, "BadRequest", f"kind {body.get('kind')}")
                if (res, ns, obj_name) in kube.objects:
                    return 409, status_body(409, "AlreadyExists",
                                            f'{res} "{obj_name}" already exists',
                                            name=obj_name, kind=res)
                invalid = _invalid(res, body)
                if invalid:
                    return 422, status_body(
                        422, "Invalid", f'{kind}{_GROUP_SUFFIX.get(res, "")} "{obj_name}" is '
                        f'invalid: {invalid}', name=obj_name, kind=kind,
                        causes=[{"reason": "FieldValueRequired", "message": "Required value",
                                 "field": invalid.split(":")[0]}])
                obj = kube._stamp_new(res, ns, copy.deepcopy(body))
                if res == "jobs":
                    self._default_job(obj)
                kube.objects[(res, ns, obj_name)] = obj
                return 201, copy.deepcopy(obj)
            if name is None:
                return 405, status_body(405, "MethodNotAllowed", method)
            if key not in kube.objects:
                return 404, status_body(404, "NotFound", f'{res} "{name}" not found',
                                        name=name, kind=res)
            stored = kube.objects[key]
            if method == "GET":
                return 200, copy.deepcopy(stored)
            if method == "PUT":
                meta = body.get("metadata") or {}
                if meta.get("name") != name:
                    return 400, status_body(400, "BadRequest", "name does not match the URL")
                sent_rv = meta.get("resourceVersion")
                if sent_rv and sent_rv != stored["metadata"]["resourceVersion"]:
                    return 409, status_body(
                        409, "Conflict", f'Operation cannot be fulfilled on {res} "{name}": '
                        "the object has been modified; please apply your changes to the "
                        "latest version and try again", name=name, kind=res)
                new = copy.deepcopy(body)
                new.setdefault("apiVersion", api_version)
                new.setdefault("kind", kind)
                for field_name in ("uid", "creationTimestamp", "namespace",
                                   "deletionTimestamp", "finalizers", "ownerReferences"):
                    if field_name in stored["metadata"]:
                        new["metadata"][field_name] = stored["metadata"][field_name]
                if res in _STATUS_SUBRESOURCE:
                    new["status"] = stored.get("status")
                new["metadata"]["resourceVersion"] = kube._next_rv()
                kube.objects[key] = new
                return 200, copy.deepcopy(new)
            if method == "PATCH":
                return self._patch(key, stored, body)
            if method == "DELETE":
                pre = (body.get("preconditions") or {})
                if pre.get("resourceVersion") and \
                        pre["resourceVersion"] != stored["metadata"]["resourceVersion"]:
                    return 409, status_body(409, "Conflict", "precondition failed")
                policy = query.get("propagationPolicy") or body.get("propagationPolicy")
                if body.get("orphanDependents") is True:
                    policy = "Orphan"
                return 200, kube.delete(res, ns, name, policy)
            return 405, status_body(405, "MethodNotAllowed", f"{method} is not served here")

    def _patch(self, key, stored, ops):
        """Apply a JSON Patch (RFC 6902: add, remove, replace, test) to `stored`.

        A failed `test` or a path that does not exist answers 422, as the API server does;
        a patch that leaves an object being deleted without finalizers removes it.
        """
        kube = self.kube
        if self.headers.get("Content-Type", "").split(";")[0] != "application/json-patch+json" \
                or not isinstance(ops, list):
            return 415, status_body(415, "UnsupportedMediaType",
                                    "this fake serves JSON Patch only")
        new = copy.deepcopy(stored)
        for op in ops:
            parts = [p.replace("~1", "/").replace("~0", "~")
                     for p in op.get("path", "").split("/")[1:]]
            if not parts:
                return 422, status_body(422, "Invalid", "empty path")
            parent: Any = new
            try:
                for part in parts[:-1]:
                    parent = parent[int(part)] if isinstance(parent, list) else parent[part]
                last = parts[-1]
                index = (len(parent) if last == "-" else int(last)) \
                    if isinstance(parent, list) else last
                kind = op.get("op")
                if kind == "test":
                    if parent[index] != op.get("value"):
                        return 422, status_body(422, "Invalid", f"the test of {op['path']} "
                                                "failed: the value changed")
                elif kind == "remove":
                    del parent[index]
                elif kind == "replace":
                    parent[index]  # noqa: B018  (must exist)
                    parent[index] = op.get("value")
                elif kind == "add":
                    if isinstance(parent, list):
                        parent.insert(index, op.get("value"))
                    else:
                        parent[index] = op.get("value")
                else:
                    return 422, status_body(422, "Invalid", f"unsupported op {kind!r}")
            except (KeyError, IndexError, ValueError, TypeError):
                return 422, status_body(422, "Invalid", f"path {op.get('path')} does not "
                                        "exist")
        for field_name in ("uid", "creationTimestamp", "namespace", "deletionTimestamp"):
            if field_name in stored["metadata"]:
                new["metadata"][field_name] = stored["metadata"][field_name]
        new["metadata"]["resourceVersion"] = kube._next_rv()
        kube.objects[key] = new
        kube._finish_if_released(key)
        return 200, copy.deepcopy(new)

    def _chunk(self, data: bytes) -> bool:
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            return False

    def _watch(self, res: str, ns: str, query: dict[str, str]) -> None:
        """Stream the events of `res` in `ns` after `resourceVersion` (see the module doc)."""
        kube = self.kube
        match = label_matcher(query.get("labelSelector", ""))
        since = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        _group, api_version, kind = KINDS[res]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + timeout
        with kube.lock:
            generation = kube.watch_generation
            if since and since < kube.compacted_rv:
                gone = status_body(410, "Expired", f"too old resource version: {since} "
                                   f"({kube.compacted_rv})")
                self._chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                self._chunk(b"")
                return
            if not since:
                since = kube.rv
        last_bookmark = time.monotonic()
        while time.monotonic() < deadline:
            stall = kube.watch_stalls.get(res)
            if stall is not None and not stall.is_set():
                # Silent: nothing is sent, not even the end of the stream at its timeout (a
                # dropped connection does not say so); it ends only with `drop_watches`.
                if kube.watch_generation != generation or getattr(kube, "closing", False):
                    break
                stall.wait(0.05)
                deadline = max(deadline, time.monotonic() + 0.05)
                continue
            with kube.lock:
                if not kube.events[bisect.bisect_right(kube.event_rvs, since):]:
                    kube.changed.wait(min(kube.bookmark_interval,
                                          max(0.0, deadline - time.monotonic())))
                if kube.watch_generation != generation or getattr(kube, "closing", False):
                    break
                stall = kube.watch_stalls.get(res)
                if stall is not None and not stall.is_set():
                    continue  # stalled while it waited: what was written since is held back
                batch = kube.events[bisect.bisect_right(kube.event_rvs, since):]
                current = kube.rv
            lines = []
            for rv, kind_, r, n, obj in batch:
                since = rv
                if r == res and n == ns and match(obj["metadata"].get("labels")):
                    lines.append(json.dumps({"type": kind_, "object": obj}))
            if bookmarks and not lines and time.monotonic() - last_bookmark >= \
                    kube.bookmark_interval:
                since = max(since, current)
                lines.append(json.dumps({"type": "BOOKMARK", "object": {
                    "kind": kind, "apiVersion": api_version,
                    "metadata": {"resourceVersion": str(since)}}}))
                last_bookmark = time.monotonic()
            if lines and not self._chunk(("\n".join(lines) + "\n").encode()):
                return
        self._chunk(b"")

    @staticmethod
    def _default_job(obj: dict[str, Any]) -> None:
        """Apply the defaults and labels the API server adds to a created Job."""
        spec = obj.setdefault("spec", {})
        uid = obj["metadata"]["uid"]
        name = obj["metadata"]["name"]
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault(
            "labels", {})
        labels.update({"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                       "batch.kubernetes.io/job-name": name, "job-name": name})
        obj.setdefault("status", {})

    def _list(self, res: str, ns: str, query: dict[str, str]):
        kube = self.kube
        match = label_matcher(query.get("labelSelector", ""))
        limit = int(query.get("limit") or 0)
        token = query.get("continue")
        after = ""
        list_rv = kube.rv
        if token:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            if data["rv"] < kube.compacted_rv:
                return 410, status_body(410, "Expired", "The provided continue parameter is "
                                        "too old to display a consistent list result.")
            after, list_rv = data["after"], data["rv"]
        items = [o for (r, n, obj_name), o in sorted(kube.objects.items())
                 if r == res and n == ns and obj_name > after
                 and match(o["metadata"].get("labels"))]
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit and len(items) > limit:
            items = items[:limit]
            meta["continue"] = _encode_token(list_rv, items[-1]["metadata"]["name"])
        _group, api_version, kind = KINDS[res]
        # Encoded here, under the store lock, instead of deep-copied for `_send`: a page of
        # thousands of objects cost the fake seconds to copy (benchmarks list 20,000).
        return 200, _Encoded(json.dumps({"kind": f"{kind}List", "apiVersion": api_version,
                                         "metadata": meta, "items": items}).encode())


# -- pytest fixtures: import them into a test module to use them --------------------------------

import pytest  # noqa: E402


@pytest.fixture
def fake_kube():
    """A started `FakeKube` (Pods deleted at once); closed after the test."""
    kube = FakeKube().serve()
    yield kube
    kube.close()


@pytest.fixture
def kubeconfig(fake_kube, tmp_path) -> Path:
    """A kubeconfig file pointing at `fake_kube`."""
    return fake_kube.kubeconfig(tmp_path / "kubeconfig")
