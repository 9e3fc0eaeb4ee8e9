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

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import tenacity
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

T = TypeVar("T")

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
        retries: extra attempts after the first for a retryable failure (0 = none).
        backoff_initial: seconds before the first retry; doubles each time, with jitter.
        backoff_max: longest wait between two attempts, seconds.
    """

    kubeconfig: str = ""
    context: str = ""
    in_cluster: bool = False
    qps: float = 50.0
    burst: int = 100
    connect_timeout: float = 5.0
    request_timeout: float = 30.0
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
                    "backoff_max"):
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
        sleep: injectable for tests; used for backoff waits.

    Attributes:
        calls: HTTP requests sent so far (each attempt counts): the benchmark's "API calls".
    """

    def __init__(self, conn: KubeConnection, *, sleep: Callable[[float], None] = time.sleep):
        self.conn = conn
        self.bucket = TokenBucket(conn.qps, conn.burst, sleep=sleep)
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
            stop=tenacity.stop_after_attempt(self.conn.retries + 1),
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
        restarts = 0
        while True:
            items: list[Any] = []
            token: str | None = None
            try:
                while True:
                    page = self.call(fn, *args, limit=page_size, _continue=token, **kwargs)
                    items.extend(page.items or [])
                    token = page.metadata.var_continue if page.metadata else None
                    if not token:
                        return items
            except ApiException as exc:
                if exc.status != GONE or restarts >= self.conn.retries:
                    raise
                restarts += 1
                self._sleep(min(self.conn.backoff_max, self.conn.backoff_initial * restarts))


# Fields that are maps of strings in the API (models keep them as dicts, not objects).
_MAP_FIELDS = frozenset({"labels", "annotations", "node_selector", "match_labels", "limits",
                         "requests", "data", "capacity", "allocatable"})


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
        data: one object of an API answer, as `json.loads` made it.
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
        if value is None:
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
                 **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
    """Return every item of a LIST call as decoded JSON dicts, and the list's resourceVersion.

    Like `KubeCaller.list_all` (pages by `limit`/`continue`, a 410 Gone restarts from the
    first page at most `conn.retries` times), but the answer is read with
    `_preload_content=False` and `json.loads`: no client model object is built per item.

    Args:
        caller: the `KubeCaller` that sends each page (timeout, retries, QPS).
        fn: a `list_namespaced_*` method of the client.
        page_size: `limit` of each page.
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
                    page = json.loads(resp.data)
                finally:
                    resp.release_conn()
                items.extend(page.get("items") or [])
                meta = page.get("metadata") or {}
                token = meta.get("continue")
                if not token:
                    return items, str(meta.get("resourceVersion") or "")
        except ApiException as exc:
            if exc.status != GONE or restarts >= caller.conn.retries:
                raise
            restarts += 1
            caller._sleep(min(caller.conn.backoff_max, caller.conn.backoff_initial * restarts))
