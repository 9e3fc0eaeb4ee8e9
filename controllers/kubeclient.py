"""One way to call a Kubernetes API server: timeouts, bounded retries with backoff, bounded QPS.

Used by the Kubernetes cluster backend and by leader election. The official `kubernetes` client
does the HTTP, authentication (kubeconfig or in-cluster service account) and (de)serialisation;
this module adds only what that client leaves to its caller:

- a client-side timeout on EVERY call (CB-16: a silently dropped connection must not
  block a controller forever), as the client's `_request_timeout=(connect, read)`;
- bounded retries with exponential backoff and jitter (`tenacity`) for answers that say "try
  again": timeouts and connection errors, 429, 500, 502, 503, 504; every other status is the
  caller's to handle (404, 409, 422, ...). urllib3's own retries are switched off so the retry
  policy is in one place and bounded;
- `list_all`: a paged LIST (`limit` + `continue`) that starts over when the server answers
  410 Gone for an expired continue token (CB-16: re-list and continue, never crash in a loop);
- a token bucket, because the Python client has no equivalent of client-go's QPS/Burst: a
  resource manager with 10,000 jobs must not flood the API server.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import tenacity
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

T = TypeVar("T")

log = logging.getLogger("falcon.controllers.kubernetes")

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
GONE = 410


@dataclass(frozen=True)
class KubeConnection:
    """How to reach one API server and how hard to push it.

    Attributes:
        kubeconfig: path of a kubeconfig file; "" means the client's default (`$KUBECONFIG`,
            then `~/.kube/config`). Ignored when `in_cluster`.
        context: kubeconfig context; "" means the file's current context.
        in_cluster: use the Pod's service account (`KUBERNETES_SERVICE_HOST` and the token
            mounted at /var/run/secrets/kubernetes.io/serviceaccount).
        qps: sustained requests per second this process sends (client-go's default is 5; a
            resource manager needs more during submit bursts).
        burst: requests that may go at once before `qps` applies.
        connect_timeout: seconds to open a connection.
        request_timeout: seconds to wait for an answer (the read timeout of each call).
        call_deadline: seconds after which no further attempt of one call starts (retries
            included), so one call ends within about `call_deadline + request_timeout`: well
            inside the Lease's renew deadline (10 s by default), so that a leader that loses
            its Lease stops writing to the cluster before another one starts.
        retries: extra attempts after the first for a retryable failure (0 = none).
        backoff_initial: seconds before the first retry; doubles each time, with jitter.
        backoff_max: longest wait between two attempts, seconds.
    """

    kubeconfig: str = ""
    context: str = ""
    in_cluster: bool = False
    qps: float = 50.0
    burst: int = 100
    connect_timeout: float = 3.0
    request_timeout: float = 3.0
    call_deadline: float = 3.0
    retries: int = 3
    backoff_initial: float = 0.5
    backoff_max: float = 8.0

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], *, where: str) -> KubeConnection:
        """Build a connection from a clusters-file entry (unknown keys are the caller's check).

        Raises:
            ValueError: a number is not positive or a path is not a string; names `where`.
        """
        values: dict[str, Any] = {}
        for key in ("kubeconfig", "context"):
            if raw.get(key) is not None:
                if not isinstance(raw[key], str):
                    raise ValueError(f"{where}.{key}: must be a string")
                values[key] = raw[key]
        if raw.get("in_cluster") is not None:
            values["in_cluster"] = bool(raw["in_cluster"])
        for key in ("qps", "connect_timeout", "request_timeout", "backoff_initial",
                    "backoff_max", "call_deadline"):
            if raw.get(key) is not None:
                if not isinstance(raw[key], (int, float)) or raw[key] <= 0:
                    raise ValueError(f"{where}.{key}: must be a positive number")
                values[key] = float(raw[key])
        for key in ("burst", "retries"):
            if raw.get(key) is not None:
                if not isinstance(raw[key], int) or raw[key] < (1 if key == "burst" else 0):
                    raise ValueError(f"{where}.{key}: must be an integer "
                                     f"{'>= 1' if key == 'burst' else '>= 0'}")
                values[key] = raw[key]
        return cls(**values)


def api_client(conn: KubeConnection) -> client.ApiClient:
    """Return an `ApiClient` for `conn` (its own Configuration; the global default is untouched).

    Raises:
        kubernetes.config.ConfigException: the kubeconfig or in-cluster environment is missing
            or invalid.
    """
    cfg = client.Configuration()
    if conn.in_cluster:
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(config_file=conn.kubeconfig or None,
                                context=conn.context or None, client_configuration=cfg,
                                persist_config=False)
    # Retries happen in `KubeCaller`, bounded and with backoff; urllib3 retrying underneath
    # would multiply the attempts and hide the time they take.
    cfg.retries = False
    # Enough pooled connections for the token bucket's burst without reconnecting each call.
    cfg.connection_pool_maxsize = max(4, min(conn.burst, 32))
    return client.ApiClient(cfg)


class TokenBucket:
    """Allow `rate` acquisitions per second on average and `burst` at once (thread-safe).

    Args:
        rate: tokens added per second (> 0).
        burst: bucket size: how many calls may go back to back.
        clock, sleep: injectable for tests (`time.monotonic`, `time.sleep`).
    """

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.rate = float(rate)
        self.burst = max(1, int(burst))
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; return the seconds slept."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.rate
        if wait:
            self._sleep(wait)
        return wait


def is_transient(exc: BaseException) -> bool:
    """Return True for failures worth retrying: timeouts, dropped connections, 429 and 5xx."""
    if isinstance(exc, ApiException):
        return exc.status in RETRY_STATUSES or exc.status == 0
    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


class KubeCaller:
    """Call `kubernetes` client methods with a timeout, bounded retries and a QPS limit.

    Args:
        conn: the connection's limits (timeouts, retries, qps, burst).
        sleep: injectable for tests; used for backoff waits and the QPS limit's.
        clock: injectable for tests; the QPS limit's monotonic clock.

    Attributes:
        calls: HTTP requests sent so far (each attempt counts): the benchmark's "API calls".
    """

    def __init__(self, conn: KubeConnection, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        self.conn = conn
        self.bucket = TokenBucket(conn.qps, conn.burst, clock=clock, sleep=sleep)
        self._sleep = sleep
        self.calls = 0
        self._calls_lock = threading.Lock()

    def _attempt(self, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
        self.bucket.acquire()
        with self._calls_lock:
            self.calls += 1
        return fn(*args, _request_timeout=(self.conn.connect_timeout, self.conn.request_timeout),
                  **kwargs)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Return `fn(*args, **kwargs)`, retrying transient failures up to `conn.retries` times.

        Raises:
            ApiException: a non-retryable status (e.g. 404, 409, 410, 422), or a retryable one
                after the last attempt.
            urllib3.exceptions.HTTPError: the last attempt timed out or lost its connection.
        """
        retrying = tenacity.Retrying(
            stop=(tenacity.stop_after_attempt(self.conn.retries + 1)
                  | tenacity.stop_before_delay(self.conn.call_deadline)),
            # backoff_initial x 2^n plus up to backoff_initial of jitter, capped at backoff_max:
            # replicas retrying after one API-server hiccup do not retry in lockstep.
            wait=tenacity.wait_exponential_jitter(multiplier=self.conn.backoff_initial,
                                                  jitter=self.conn.backoff_initial,
                                                  max=self.conn.backoff_max),
            retry=tenacity.retry_if_exception(is_transient),
            sleep=self._sleep, reraise=True)
        return retrying(self._attempt, fn, args, kwargs)

    def list_all(self, fn: Callable[..., Any], *args: Any, page_size: int = 500,
                 **kwargs: Any) -> list[Any]:
        """Return every item of a LIST call, following `continue` tokens page by page.

        A 410 Gone (the continue token expired, or the resourceVersion is too old) restarts the
        LIST from the first page, at most `conn.retries` times: items of a list that could not
        be finished are never mixed with a new one.

        Args:
            fn: a `list_namespaced_*` method of the client.
            page_size: `limit` of each page (the API server's recommended chunking).
            args, kwargs: the method's other arguments (namespace, label_selector, ...).

        Raises:
            ApiException: as `call`, or 410 after the restarts ran out.
        """
        return self.list_all_versioned(fn, *args, page_size=page_size, **kwargs)[0]

    def list_all_versioned(self, fn: Callable[..., Any], *args: Any, page_size: int = 500,
                           **kwargs: Any) -> tuple[list[Any], str]:
        """`list_all`, with the list's `metadata.resourceVersion` (its first page's: every
        page of one list is read at the same version), "" when the server sent none.

        A caller that must know whether a list is newer than a write it made compares the two
        versions (`compare_resource_versions`) instead of trusting the list's absences.
        """
        restarts = 0
        while True:
            items: list[Any] = []
            token: str | None = None
            version = ""
            try:
                while True:
                    page = self.call(fn, *args, limit=page_size, _continue=token, **kwargs)
                    items.extend(page.items or [])
                    if not version and page.metadata:
                        version = page.metadata.resource_version or ""
                    token = page.metadata.var_continue if page.metadata else None
                    if not token:
                        return items, version
            except ApiException as exc:
                if exc.status != GONE or restarts >= self.conn.retries:
                    raise
                restarts += 1
                self._sleep(min(self.conn.backoff_max, self.conn.backoff_initial * restarts))


def compare_resource_versions(a: str | None, b: str | None) -> int | None:
    """-1, 0 or 1 as resourceVersion `a` is older than, equal to or newer than `b`; None when
    they cannot be compared.

    Kubernetes 1.35 made resourceVersions of one resource comparable (KEP-5504, client-go's
    `k8s.io/apimachinery/pkg/util/resourceversion.CompareResourceVersion`): a positive integer
    written without leading zeros. Anything else (an older or a non-etcd server's opaque
    string, "0", "") is not comparable, and the caller must read the object itself instead.
    """
    def valid(rv: str | None) -> bool:
        return bool(rv) and rv.isdigit() and rv.isascii() and rv[0] != "0"

    if not (valid(a) and valid(b)):
        return None
    x, y = int(a), int(b)
    return (x > y) - (x < y)


# Fields that are maps of strings in the API (models keep them as dicts, not objects).
_MAP_FIELDS = frozenset({"labels", "annotations", "node_selector", "match_labels", "limits",
                         "requests", "data", "capacity", "allocatable"})


@functools.lru_cache(maxsize=1024)
def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class Raw:
    """Attribute access over a decoded JSON object, with the client models' snake_case names.

    `Raw(job).status.ready` reads `job["status"]["ready"]`, `pod.metadata.deletion_timestamp`
    reads `metadata.deletionTimestamp`; a missing field is None, a nested object is a `Raw`, a
    list a list of `Raw`. Code written against `kubernetes.client` models (V1Job, V1Pod) reads
    these unchanged, without the cost of building a model object per item of a LIST of
    thousands (the models validate and convert every field; the JSON is already there).

    Args:
        data: one object of an API answer, decoded from JSON.
    """

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]):
        self._data = data

    @property
    def raw(self) -> dict[str, Any]:
        """The wrapped dict (the API's camelCase field names)."""
        return self._data

    def __getattr__(self, name: str) -> Any:
        data = self._data
        value = data.get(name)
        if value is None and "_" in name:
            value = data.get(_camel(name.removeprefix("var_")))
        if name in _MAP_FIELDS:
            return value  # string maps stay dicts, as the models keep them
        return wrap(value)

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Raw({self._data!r})"


def wrap(value: Any) -> Any:
    """Return `value` with dicts as `Raw` (lists element by element); scalars as they are."""
    if isinstance(value, dict):
        return Raw(value)
    if isinstance(value, list):
        return [wrap(v) for v in value]
    return value


def list_all_raw(caller: KubeCaller, fn: Callable[..., Any], *args: Any, page_size: int = 500,
                 transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
    """Return every item of a LIST call as decoded JSON dicts, and the list's resourceVersion.

    Like `KubeCaller.list_all` (pages by `limit`/`continue`, a 410 Gone restarts from the
    first page at most `conn.retries` times), but the answer is read with
    `_preload_content=False` and decoded by orjson (several times faster than `json` on a
    page of thousands of objects): no client model object is built per item.

    Args:
        caller: the `KubeCaller` that sends each page (timeout, retries, QPS).
        fn: a `list_namespaced_*` method of the client.
        page_size: `limit` of each page.
        transform: applied to each item as its page is decoded (what is kept of it), so that
            a LIST never holds every item whole at once (`Informer`'s `transform`).
        args, kwargs: the method's other arguments (namespace, label_selector, ...).

    Returns:
        `(items, resource_version)`: the resourceVersion of the last page (the point a WATCH
        continues from; API conventions, "Efficient detection of changes").

    Raises:
        ApiException: as `KubeCaller.call`, or 410 after the restarts ran out.
    """
    restarts = 0
    while True:
        items: list[dict[str, Any]] = []
        token: str | None = None
        try:
            while True:
                resp = caller.call(fn, *args, limit=page_size, _continue=token,
                                   _preload_content=False, **kwargs)
                try:
                    page = orjson.loads(resp.data)
                finally:
                    resp.release_conn()
                if transform is None:
                    items.extend(page.get("items") or [])
                else:
                    items.extend(transform(item) for item in page.get("items") or [])
                meta = page.get("metadata") or {}
                del page
                token = meta.get("continue")
                if not token:
                    return items, str(meta.get("resourceVersion") or "")
        except ApiException as exc:
            if exc.status != GONE or restarts >= caller.conn.retries:
                raise
            restarts += 1
            caller._sleep(min(caller.conn.backoff_max, caller.conn.backoff_initial * restarts))


class _RawWatch(watch.Watch):
    """`kubernetes.watch.Watch` handing events over as decoded JSON, no client model per event
    (the stream's own JSON-lines parsing, bookmarks and ERROR events are kept)."""

    def get_return_type(self, func):
        return None


class Informer:
    """A list-then-watch cache of one kind of object in one namespace (client-go's reflector).

    One paged LIST (`list_all_raw`) fills the cache and gives a resourceVersion; a WATCH from
    there (`kubernetes.watch`, `allowWatchBookmarks`, `timeoutSeconds`) applies every ADDED,
    MODIFIED and DELETED event and follows BOOKMARKs, and is re-opened from the last
    resourceVersion when it ends. A 410 Gone (the resourceVersion was compacted away) starts
    over with a new LIST (API conventions, "Efficient detection of changes"). Every call has a
    client-side timeout: the LIST pages through `caller`, the WATCH reads with `watch_timeout`
    plus the connection's request timeout, so a silently dropped stream is noticed. Failures
    are logged and retried after `conn.backoff_initial` .. `conn.backoff_max` seconds; the
    cache keeps its last content meanwhile.

    Args:
        caller: the `KubeCaller` (timeouts, retries, QPS; its `calls` counts the requests).
        list_fn: a `list_namespaced_*` method of the client.
        namespace: the namespace watched.
        label_selector: the objects cached (e.g. `app.kubernetes.io/managed-by=falcon`).
        page_size: `limit` of each LIST page.
        watch_timeout: `timeoutSeconds` of each WATCH request, seconds.
        what: a name for log lines ("Jobs").
        transform: applied to every object before it is cached (client-go's SetTransform):
            returns what the readers need of it, so the cache does not hold the rest; it
            keeps `metadata.name` (the cache's key) and `metadata.resourceVersion`.

    The thread starts with `start()` and is a daemon; `stop()` ends it.
    """

    def __init__(self, caller: KubeCaller, list_fn: Callable[..., Any], namespace: str, *,
                 label_selector: str, page_size: int = 500, watch_timeout: float = 60.0,
                 what: str = "objects",
                 transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None):
        self.transform = transform or (lambda obj: obj)
        self.caller = caller
        self.list_fn = list_fn
        self.namespace = namespace
        self.label_selector = label_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.what = what
        self.relists = 0
        self.last_error: str = ""
        self._items: dict[str, dict[str, Any]] = {}
        self._rv = 0
        self._cond = threading.Condition()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread: threading.Thread | None = None

    # -- reading --------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Whether the first LIST has filled the cache."""
        return self._synced.is_set()

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion the cache reflects (0 before the first LIST)."""
        with self._cond:
            return self._rv

    def items(self) -> dict[str, dict[str, Any]]:
        """Return `{name: object}` as decoded JSON: a shallow copy, safe to iterate."""
        with self._cond:
            return dict(self._items)

    def wait_synced(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the first LIST; return whether it is done."""
        return self._synced.wait(timeout)

    def wait_for(self, resource_version: int, timeout: float) -> bool:
        """Wait up to `timeout` seconds until the cache reflects `resource_version`.

        resourceVersions are opaque in the API; this reads them as the integers every API
        server backed by etcd sends (a value that is not one is never waited for).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._rv < resource_version:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._cond.wait(left)
            return True

    # -- running --------------------------------------------------------------------------------

    def start(self) -> Informer:
        """Start the list-and-watch thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"informer-{self.what}-{self.namespace}")
            self._thread.start()
        return self

    def stop(self) -> None:
        """End the thread (the open WATCH is closed at its next event or bookmark)."""
        self._stop.set()
        w = self._watch
        if w is not None:
            w.stop()
        with self._cond:
            self._cond.notify_all()

    def _set_rv(self, value: Any) -> None:
        try:
            rv = int(value)
        except (TypeError, ValueError):
            return
        if rv > self._rv:
            self._rv = rv
            self._cond.notify_all()

    def _relist(self) -> None:
        items, rv = list_all_raw(self.caller, self.list_fn, self.namespace,
                                 label_selector=self.label_selector, page_size=self.page_size,
                                 transform=self.transform)
        with self._cond:
            self._items = {o["metadata"]["name"]: o for o in items}
            self._rv = 0
            self._set_rv(rv)
            self._cond.notify_all()
        self.relists += 1
        self._synced.set()

    def _apply(self, event: dict[str, Any]) -> None:
        obj = event.get("raw_object") or event.get("object") or {}
        meta = obj.get("metadata") or {}
        kind = event.get("type")
        if kind in ("ADDED", "MODIFIED"):
            obj = self.transform(obj)
            meta = obj["metadata"]  # the kept object's: its name is the key (one string)
        with self._cond:
            if kind in ("ADDED", "MODIFIED"):
                self._items[meta["name"]] = obj
            elif kind == "DELETED":
                self._items.pop(meta.get("name"), None)
            self._set_rv(meta.get("resourceVersion"))

    def _watch_once(self) -> None:
        """One WATCH request from the cache's resourceVersion until it ends."""
        self._watch = w = _RawWatch()
        with self.caller._calls_lock:
            self.caller.calls += 1
        self.caller.bucket.acquire()
        for event in w.stream(self.list_fn, self.namespace, label_selector=self.label_selector,
                              resource_version=str(self.resource_version),
                              allow_watch_bookmarks=True,
                              timeout_seconds=max(1, int(self.watch_timeout)),
                              _request_timeout=(self.caller.conn.connect_timeout,
                                                self.watch_timeout
                                                + self.caller.conn.request_timeout)):
            if self._stop.is_set():
                w.stop()
                break
            self._apply(event)

    def _run(self) -> None:
        need_list = True
        failures = 0
        while not self._stop.is_set():
            try:
                if need_list:
                    self._relist()
                    need_list = False
                self._watch_once()
                failures = 0
            except ApiException as exc:
                if exc.status == GONE:
                    log.info("%s/%s: watch expired (410 Gone): listing again", self.namespace,
                             self.what)
                    need_list = True
                    continue
                failures += 1
                self.last_error = f"{exc.status} {exc.reason}"
            except Exception as exc:  # a dropped stream, a timeout: resume from the last rv
                failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            if failures and not self._stop.is_set():
                log.warning("%s/%s: list/watch failed (%s); retrying", self.namespace,
                            self.what, self.last_error)
                conn = self.caller.conn
                self._stop.wait(min(conn.backoff_max,
                                    conn.backoff_initial * 2 ** min(failures - 1, 10)))
