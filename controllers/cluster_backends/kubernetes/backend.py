"""The Kubernetes backend: the `ClusterBackend` that talks to one namespace of one cluster.

Submits, observes and deletes the Jobs the manifests describe (`manifests.py`), maps what it
reads through `state.job_state`, and keeps the list-then-watch caches. What a Falcon Job
becomes and how state is read is told in the package's docstring.
"""
from __future__ import annotations

import json
import logging
import sys
import time
import weakref
from collections import defaultdict
from typing import Any

import urllib3
from kubernetes import client
# The API classes load lazily on first use, which takes a second on a busy machine: they load
# with this module (the resource manager's start-up), not inside its first tick.
from kubernetes.client import BatchV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from clusters.validation import kubernetes_task_spec_problems
from controllers.cluster_backends.base import (
    BackendError,
    ClusterBackend,
    ClusterJobState,
    PermanentBackendError,
    SubmitResult,
    cluster_job_name_for,
)
from controllers.cluster_backends.kubernetes import manifests
from controllers.cluster_backends.kubernetes.cache import (
    Known,
    ObservePass,
    int_rv,
    lean_job,
    lean_pod,
    status_message,
)
from controllers.cluster_backends.kubernetes.config import KubernetesClusterConfig
from controllers.cluster_backends.kubernetes.outcomes import OutcomesMixin
from controllers.cluster_backends.kubernetes.state import (
    all_ready,
    condition,
    int_label,
    job_state,
)
from controllers.cluster_backends.kubernetes.vocabulary import (
    CONDITION_COMPLETE,
    DIRECT_READ_GETS,
    EXPECTATION_TIMEOUT,
    K8S_JOB_NAME_MAX,
    LABEL_JOB_ID,
    POD_JOB_NAME_LABEL,
    POD_SELECTOR_NAMES,
    PROPAGATION_POLICIES,
    RETRYABLE_CLIENT_ERRORS,
    SELECTOR,
)
from controllers.contract import JobView
from controllers.kubeclient import Informer, KubeCaller, Raw, api_client, list_all_raw

log = logging.getLogger("falcon.controllers.kubernetes")


def _stop_all(caches) -> None:
    for cache in caches:
        if cache is not None:
            cache.stop()



class KubernetesBackend(OutcomesMixin, ClusterBackend):
    """Run Falcon Jobs as `batch/v1` Indexed Jobs in one namespace of one cluster.

    Args:
        cluster_name: the `cluster_name` experiments use (for `FALCON_CLUSTER` and messages).
        config: the cluster's settings (`KubernetesClusterConfig`).
        api: an `ApiClient` to use; None builds one from `config.connection` on first use
            (so that CreateExp validation in the API server never touches the cluster).

    Every call goes through `KubeCaller`: a timeout, bounded retries with backoff, a QPS cap.
    Failures the next tick may retry are raised as `BackendError`; a job the API server (or
    this backend) refuses for good as `PermanentBackendError`.
    """

    name = "kubernetes"

    def __init__(self, cluster_name: str, config: KubernetesClusterConfig, *,
                 api: client.ApiClient | None = None, clock=time.monotonic):
        if config.propagation_policy not in PROPAGATION_POLICIES:
            raise ValueError(f"propagation_policy must be one of {PROPAGATION_POLICIES}")
        self.cluster_name = cluster_name
        self.config = config
        self.caller = KubeCaller(config.connection)
        self._api = api
        self._clock = clock
        # Jobs by name that this process created, adopted or read directly and the Jobs cache
        # has not shown yet (kube-controller-manager's ControllerExpectations): present, as
        # the API server answered, until the cache has caught up with them (`_known_jobs`).
        self._known: dict[str, Known] = {}
        self._job_cache: Informer | None = None
        self._pod_cache: Informer | None = None
        # The state each Job of the last tick mapped to (see `observe`), keyed by (Job name,
        # resourceVersion, Falcon job id, image), plus the sorted (name, resourceVersion) of
        # its Pods for a Job whose Pods were read.
        self._states: dict[tuple, ClusterJobState] = {}
        # The Jobs (by the same key) whose Pods the last tick read, with their pod count.
        self._needs_pods: dict[tuple[str, str, int, str], int] = {}
        # Job name -> the resourceVersion of the copy whose finalizer this backend removed:
        # a cache still holding that copy must not make the next call patch it again. Only
        # saves calls; nothing is concluded from it (a restart forgets it harmlessly).
        self._released: dict[str, str | None] = {}
        # The observe pass under way (`begin_observe_pass`), None outside one.
        self._pass: ObservePass | None = None

    # -- clients -----------------------------------------------------------------------------

    @property
    def api(self) -> client.ApiClient:
        """The `ApiClient`, built from the connection settings on first use."""
        if self._api is None:
            try:
                self._api = api_client(self.config.connection)
            except Exception as exc:  # ConfigException, missing files: retry next tick
                raise BackendError(f"cluster {self.cluster_name}: cannot load the Kubernetes "
                                   f"client configuration: {exc}") from exc
        return self._api

    @property
    def batch(self) -> BatchV1Api:
        """The batch/v1 API (Jobs) on `api`."""
        return BatchV1Api(self.api)

    @property
    def core(self) -> CoreV1Api:
        """The core/v1 API (Pods, Services, logs) on `api`."""
        return CoreV1Api(self.api)

    def _fail(self, what: str, exc: BaseException) -> BackendError:
        """Return the error to raise for a failed call: permanent for a final 4xx.

        The message carries the API server's own `Status.message` (e.g. `Job.batch "x" is
        invalid: spec.template.spec.containers[0].image: Required value`), which says what to
        fix; the status code and reason alone do not.
        """
        if not isinstance(exc, ApiException):
            return BackendError(f"cluster {self.cluster_name}: {what}: {exc!r}")
        detail = f"{exc.status} {exc.reason}"
        message = status_message(exc)
        if message:
            detail += f": {message}"
        text = f"cluster {self.cluster_name}: {what}: {detail}"
        if 400 <= (exc.status or 0) < 500 and exc.status not in RETRYABLE_CLIENT_ERRORS:
            return PermanentBackendError(text)
        return BackendError(text)

    # -- naming and building ----------------------------------------------------------------

    def cluster_job_name(self, job: JobView) -> str:
        """Return the Job name: `falcon-<exp id>-<exp name>-<role>`, at most 52 characters."""
        return cluster_job_name_for(exp_id=job.exp_id, exp_name=job.exp_name, role=job.role,
                                    max_len=K8S_JOB_NAME_MAX)

    def labels(self, job: JobView) -> dict[str, str]:
        """Return the labels of the Job, its Pods and its Service."""
        return manifests.job_labels(job)

    def build_job(self, job: JobView, name: str | None = None) -> client.V1Job:
        """Return the `batch/v1` Job for `job` (pure: `manifests.build_job`).

        Raises:
            PermanentBackendError: the TaskSpec cannot be run here (see `manifests.shape`).
        """
        return manifests.build_job(self.config, self.cluster_name, job,
                                   name or self.cluster_job_name(job))

    def build_service(self, job: JobView, name: str, owner_uid: str) -> client.V1Service:
        """Return the headless Service of the Job (pure: `manifests.build_service`)."""
        return manifests.build_service(self.config, job, name, owner_uid)

    # -- ClusterBackend ---------------------------------------------------------------------

    def submit(self, job: JobView) -> SubmitResult:
        """Create the Job (and its headless Service), or adopt the Job of that name (CB-3).

        A create answering 409 AlreadyExists is an adoption when the existing Job carries this
        Falcon Job's `falcon.io/job-id`; a Job of that name belonging to something else is an
        error, never adopted. An adopted Job with more than one Pod gets its headless Service
        created when it is missing (a previous `submit` may have died between the two
        creates); a Service that exists answers 409 and is kept.

        Raises:
            PermanentBackendError: the API server refused the Job or its Service with a final
                4xx (422 Invalid, 400 Bad Request, ...; see `RETRYABLE_CLIENT_ERRORS`), or the
                TaskSpec cannot be built (`shape`).
            BackendError: the API failed in a way a retry may fix, or the name is taken by
                another Job.
        """
        name = self.cluster_job_name(job)
        made, created = self._create_or_adopt_job(job, name)
        self._ensure_service(job, name, made)
        verb = "created" if created else "adopted existing"
        return SubmitResult(cluster_job_name=name, created=created,
                            message=f"{verb} Job {self.config.namespace}/{name}")

    def _create_or_adopt_job(self, job: JobView, name: str) -> tuple[client.V1Job, bool]:
        """Create the Job of `job`, or read the one of that name when it exists and is its own.

        Args:
            job: the Falcon job.
            name: the Job's name (`cluster_job_name`).

        Returns:
            `(Job as the API returned it, created)`: created is False for an adoption.

        Raises:
            PermanentBackendError: the API server refused the Job for good, or the TaskSpec
                cannot be built (`shape`).
            BackendError: a call failed in a way a retry may fix, or a Job of that name
                belongs to another Falcon job.
        """
        ns = self.config.namespace
        body = self.build_job(job, name)
        try:
            made = self.caller.call(self.batch.create_namespaced_job, ns, body)
            self._learn(name, made)  # known now: the watch may show it much later
            return made, True
        except ApiException as exc:
            if exc.status != 409:
                raise self._fail(f"create Job {name}", exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise self._fail(f"create Job {name}", exc) from exc
        try:
            made = self.caller.call(self.batch.read_namespaced_job, name, ns)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise self._fail(f"read existing Job {name}", exc) from exc
        owner = int_label(made.metadata.labels, LABEL_JOB_ID)
        if owner != job.id:
            raise BackendError(f"cluster {self.cluster_name}: a Job named {name} exists "
                               f"but belongs to falcon job {owner}, not {job.id}")
        self._learn(name, made)
        return made, False

    def _learn(self, name: str, obj: client.V1Job | dict[str, Any]) -> None:
        """Remember Job `name` as the API server just answered it (`_known`)."""
        raw = obj if isinstance(obj, dict) else self.api.sanitize_for_serialization(obj)
        self._known[name] = Known(raw, int_rv(raw), self._clock())

    def _ensure_service(self, job: JobView, name: str, made: client.V1Job) -> None:
        """Create the headless Service of a Job with more than one Pod; keep one that exists.

        Args:
            job: the Falcon job.
            name: the Job's (and the Service's) name.
            made: the Job as the API returned it (its `uid` owns the Service).

        Raises:
            PermanentBackendError: the API server refused the Service for good.
            BackendError: the call failed in a way a retry may fix.
        """
        if (made.spec.completions or 1) <= 1:
            return
        service = self.build_service(job, name, made.metadata.uid)
        try:
            self.caller.call(self.core.create_namespaced_service, self.config.namespace, service)
        except ApiException as exc:
            if exc.status != 409:
                raise self._fail(f"create Service {name}", exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise self._fail(f"create Service {name}", exc) from exc

    def _list(self, fn, what: str) -> list:
        try:
            return self.caller.list_all(fn, self.config.namespace, label_selector=SELECTOR,
                                        page_size=self.config.list_page_size)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise self._fail(f"list {what}", exc) from exc

    def _list_raw(self, fn, what: str) -> list[Raw]:
        """Every Falcon-labelled object of one kind, decoded without client models."""
        try:
            items, _rv = list_all_raw(self.caller, fn, self.config.namespace,
                                      label_selector=SELECTOR,
                                      page_size=self.config.list_page_size)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise self._fail(f"list {what}", exc) from exc
        return [Raw(item) for item in items]

    # -- reading the cluster ------------------------------------------------------------------

    def _informers(self) -> tuple[Informer, Informer]:
        """The Jobs and Pods caches, started on first use (never by CreateExp validation)."""
        if self._job_cache is None:
            common = {"label_selector": SELECTOR, "page_size": self.config.list_page_size,
                      "watch_timeout": self.config.watch_timeout}
            self._job_cache = Informer(self.caller, self.batch.list_namespaced_job,
                                       self.config.namespace, what="Jobs",
                                       transform=lean_job, **common).start()
            self._pod_cache = Informer(self.caller, self.core.list_namespaced_pod,
                                       self.config.namespace, what="Pods",
                                       transform=lean_pod, **common).start()
            # A backend dropped without close() (tests, a reloaded clusters file) stops its
            # threads when it is garbage-collected.
            weakref.finalize(self, _stop_all, (self._job_cache, self._pod_cache))
        return self._job_cache, self._pod_cache

    def close(self) -> None:
        """Stop the Jobs and Pods caches' threads (a new call starts them again)."""
        caches = (self._job_cache, self._pod_cache)
        self._job_cache = self._pod_cache = None
        _stop_all(caches)

    def _synced_caches(self) -> tuple[Informer, Informer, bool]:
        """The caches, filled and caught up with the cluster as of now (see `cache_sync_wait`).

        One LIST with `limit=1` reads the current resourceVersion; the tick waits (at most
        `cache_sync_wait` seconds) until both caches reflect it, so what this manager wrote or
        saw written before the tick is in what it reads.

        Returns:
            `(jobs, pods, fresh)`: `fresh` is True only when the Jobs cache reached that
            resourceVersion, compared as integers (what etcd-backed API servers send); a
            cache that did not, or a resourceVersion that is not an integer, is not fresh,
            and a Job it lacks is read directly before it is called missing (`_known_jobs`).

        Raises:
            BackendError: the first LIST could not be made within the connection's deadline.
        """
        jobs, pods = self._filled_caches()
        try:
            probe = self.caller.call(self.batch.list_namespaced_job, self.config.namespace,
                                     label_selector=SELECTOR, limit=1,
                                     _preload_content=False)
            try:
                now = int(json.loads(probe.data)["metadata"]["resourceVersion"])
            finally:
                probe.release_conn()
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise self._fail("read the current resourceVersion", exc) from exc
        except (KeyError, TypeError, ValueError):
            return jobs, pods, False  # not an integer: nothing to wait for, nothing known
        deadline = time.monotonic() + self.config.cache_sync_wait
        fresh = jobs.wait_for(now, self.config.cache_sync_wait)
        pods.wait_for(now, max(0.0, deadline - time.monotonic()))
        return jobs, pods, fresh

    def _known_jobs(self, jobs: list[JobView], cached: dict[str, dict[str, Any]],
                    cache_rv: int, fresh: bool) -> dict[str, dict[str, Any]]:
        """Return `cached` plus the Jobs of `jobs` the Jobs cache lacks but that exist.

        A cache that trails the API server (a silent watch, a failing or slow re-LIST) lacks
        the Jobs created since; absent from it is not absent from the cluster. A Job is
        concluded missing only from a cache known to be at least as new as the Job, or from
        a direct read (client-go's rule: act on what is known):

        - a Job this process created, adopted or read directly (`_known`) is present, as the
          API server answered then, until the cache shows it or has passed its
          resourceVersion (integers only), or `EXPECTATION_TIMEOUT` passed;
        - any other Job the cache lacks, of a Falcon job that recorded a cluster job (the
          ones the resource manager would fail `ClusterJobMissing`), is read directly when
          the cache is not `fresh`: one GET each, one LIST past `DIRECT_READ_GETS`; a Job
          found is learnt (`_known`), a 404 is missing. A Falcon job with no recorded cluster
          job needs no read: its "missing" only leads to an idempotent create (CB-3).

        Args:
            jobs: the Falcon jobs observed this tick.
            cached: the Jobs cache's content by name (a copy; extended in place).
            cache_rv: the cache's resourceVersion.
            fresh: whether the cache reached the resourceVersion of this tick's probe.

        Raises:
            BackendError: a direct read failed: nothing is concluded this tick.
        """
        now = self._clock()
        self._known = {name: known for name, known in self._known.items()
                       if name not in cached and now - known.since <= EXPECTATION_TIMEOUT
                       and (known.rv is None or cache_rv < known.rv)}
        if fresh and not self._known:
            return cached  # the steady state: the cache is the truth, nothing to add
        unknown = []
        for job in jobs:
            name = self.name_of(job)
            if name in cached:
                continue
            if name in self._known:
                cached[name] = self._known[name].obj
            elif job.cluster_job_name and not fresh:
                unknown.append(name)
        if unknown:
            found = self._read_directly(unknown)
            for name, obj in found.items():
                self._learn(name, obj)
            cached.update(found)
            log.info("cluster %s: the Jobs cache lags (resourceVersion %s); read %d Job(s) "
                     "directly, %d exist", self.cluster_name, cache_rv, len(unknown),
                     len(found))
        return cached

    def _read_directly(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """Read the named Jobs from the API server, not the cache; return those that exist.

        One GET each (a 404 is a Job that does not exist), or one paged LIST of every Falcon
        Job past `DIRECT_READ_GETS` names.

        Raises:
            BackendError: a read failed after its retries.
        """
        ns = self.config.namespace
        if len(names) > DIRECT_READ_GETS:
            wanted = set(names)
            return {j.raw["metadata"]["name"]: j.raw
                    for j in self._list_raw(self.batch.list_namespaced_job, "Jobs")
                    if j.raw["metadata"]["name"] in wanted}
        found: dict[str, dict[str, Any]] = {}
        for name in names:
            try:
                resp = self.caller.call(self.batch.read_namespaced_job, name, ns,
                                        _preload_content=False)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise self._fail(f"read Job {name}", exc) from exc
            except urllib3.exceptions.HTTPError as exc:
                raise self._fail(f"read Job {name}", exc) from exc
            try:
                found[name] = json.loads(resp.data)
            finally:
                resp.release_conn()
        return found

    def _pods_of(self, names: set[str]) -> dict[str, list[Raw]]:
        """LIST the Pods of the named Jobs only, by label selector (no cache)."""
        by_job: dict[str, list[Raw]] = defaultdict(list)
        if not names:
            return by_job
        if len(names) > POD_SELECTOR_NAMES:
            pods = self._list_raw(self.core.list_namespaced_pod, "Pods")
        else:
            selector = f"{SELECTOR},{POD_JOB_NAME_LABEL} in ({','.join(sorted(names))})"
            try:
                items, _rv = list_all_raw(self.caller, self.core.list_namespaced_pod,
                                          self.config.namespace, label_selector=selector,
                                          page_size=self.config.list_page_size)
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                raise self._fail("list Pods", exc) from exc
            pods = [Raw(p) for p in items]
        for pod in pods:
            owner = (pod.metadata.labels or {}).get(POD_JOB_NAME_LABEL)
            if owner in names:
                by_job[owner].append(pod)
        return by_job

    def _filled_caches(self) -> tuple[Informer, Informer]:
        """The caches once filled, without waiting for the current resourceVersion (the sweep
        runs after `observe` caught them up in the same tick; a change it misses is seen by
        the next tick)."""
        jobs, pods = self._informers()
        wait = self.config.connection.request_timeout * (self.config.connection.retries + 1)
        for cache in (jobs, pods):
            if not cache.wait_synced(wait):
                raise BackendError(f"cluster {self.cluster_name}: the {cache.what} cache is not "
                                   f"filled yet ({cache.last_error or 'listing'})")
        return jobs, pods

    def cluster_jobs(self) -> dict[str, dict[str, Any]]:
        """Return the Falcon-labelled Jobs as decoded JSON by name (cache or one LIST)."""
        if self.config.watch:
            return self._filled_caches()[0].items()
        return {j.raw["metadata"]["name"]: j.raw
                for j in self._list_raw(self.batch.list_namespaced_job, "Jobs")}

    def observe(self, jobs: list[JobView]) -> dict[int, ClusterJobState]:
        """Return each job's state from the Jobs cache (with `watch`) or ONE paged LIST.

        Pods are read only for Jobs that need them (not yet running, failed, losing
        replicas): from the Pods cache, or without `watch` by a LIST whose label selector
        names those Jobs (every Falcon Pod when more than `POD_SELECTOR_NAMES` need them).
        Items are decoded JSON read through `Raw`, never client models. A Job found by name
        but labelled for another Falcon job counts as missing for this one. A Job the cache
        lacks is Missing only when the cache caught up with it or a direct read found none
        (`_known_jobs`): a lagging watch never reports a Job missing that exists.

        `job_state` is pure, so a Job whose object and Pods did not change since the last
        tick (the same resourceVersions, the same Pods) keeps the state mapped then: a tick
        maps only what changed, and 10,000 Jobs pending for minutes cost a lookup each. An
        object without a resourceVersion is always mapped again.

        Raises:
            BackendError: a LIST or a direct read failed after its retries; no partial answer
                is given.
        """
        if not jobs:
            return {}
        read = self._pass if self._pass is not None else ObservePass()
        if read.by_name is None:  # the cluster's Jobs, read once a pass
            if self.config.watch:
                job_cache, read.pod_cache, fresh = self._synced_caches()
                read.cache_rv = job_cache.resource_version  # before the items: never newer
                read.fresh = fresh
                read.by_name = job_cache.items()
            else:
                read.by_name = {j.raw["metadata"]["name"]: j.raw
                                for j in self._list_raw(self.batch.list_namespaced_job, "Jobs")}
        if self.config.watch:
            by_name = self._known_jobs(jobs, read.by_name, read.cache_rv, read.fresh)
        else:
            by_name = read.by_name
        pod_cache = read.pod_cache
        found: dict[int, tuple[str, Raw | None, int]] = {}
        need_pods: set[str] = set()
        states: dict[int, ClusterJobState] = {}
        memo, needs = read.memo, read.needs
        for job in jobs:
            # Interned, as the caches' names (`lean_job`): the states kept between ticks and
            # their keys share the cache's string, not one read from each tick's listing.
            name = sys.intern(self.name_of(job))
            raw = by_name.get(name)
            image = sys.intern(job.task_image)
            key = None
            if raw is not None and raw["metadata"].get("resourceVersion"):
                # A Job whose object did not change since the last tick, and that needed no
                # Pods then, maps to the same state: a steady tick reads 10,000 of them.
                key = (name, raw["metadata"]["resourceVersion"], job.id, image)
                known = self._states.get(key)
                if known is not None:
                    states[job.id] = memo[key] = known
                    continue
                total = self._needs_pods.get(key)
                if total is not None:  # unchanged, and it needed its Pods: only they may differ
                    found[job.id] = (name, Raw(raw), total, key)
                    need_pods.add(name)
                    needs[key] = total
                    continue
            k8s_job = Raw(raw) if raw is not None else None
            if k8s_job is not None and int_label(k8s_job.metadata.labels,
                                                  LABEL_JOB_ID) != job.id:
                k8s_job = None
            total = (k8s_job.spec.completions or 1) if k8s_job is not None else 0
            found[job.id] = (name, k8s_job, total, key if k8s_job is not None else None)
            if (k8s_job is not None and not condition(k8s_job, CONDITION_COMPLETE)
                    and not all_ready(k8s_job, total)):
                need_pods.add(name)  # Pending, failed or losing replicas: the Pods say why
                if key is not None:
                    needs[key] = total
            elif raw is not None and k8s_job is not None:
                states[job.id] = state = job_state(name, k8s_job, [], pods_total=total,
                                                   image=image)
                if key is not None:
                    memo[key] = state
        if pod_cache is not None and need_pods:
            if read.pods_by_owner is None:  # the Pods cache by owner, once a pass
                read.pods_by_owner = defaultdict(list)
                for pod in pod_cache.items().values():
                    owner = ((pod.get("metadata") or {}).get("labels") or {}).get(
                        POD_JOB_NAME_LABEL)
                    if owner is not None:
                        read.pods_by_owner[owner].append(pod)
            pods_by_job = {name: [Raw(pod) for pod in read.pods_by_owner[name]]
                           for name in need_pods if name in read.pods_by_owner}
        else:
            pods_by_job = self._pods_of(need_pods)
        for job in jobs:
            if job.id in states:
                continue
            name, k8s_job, total, key = found[job.id]
            pods = pods_by_job.get(name, [])
            if key is not None:
                # The Job's key with its Pods' names and resourceVersions: unchanged, the same
                # state (a Pod added, removed or changed is a new key).
                versions = tuple(sorted(((p.raw.get("metadata") or {}).get("name") or "",
                                         (p.raw.get("metadata") or {}).get("resourceVersion")
                                         or "") for p in pods))
                key = None if any(not rv for _n, rv in versions) else (*key, versions)
            known = self._states.get(key) if key is not None else None
            state = known or job_state(name, k8s_job, pods, pods_total=total,
                                       image=job.task_image)
            states[job.id] = state
            if key is not None:
                memo[key] = state
        if self._pass is None:
            # Only the states of this tick's Jobs are kept: the next tick may reuse them.
            self._states, self._needs_pods = memo, needs
        return states

    def begin_observe_pass(self) -> None:
        """Start a pass: the `observe` calls until `end_observe_pass` are the pages of one
        tick. The cluster is read once for them all (the caches caught up once, the Jobs and
        the Pods by owner indexed once) and the states they map are kept together, so a tick
        in pages costs what one `observe` of every job did."""
        self._pass = ObservePass()

    def end_observe_pass(self) -> None:
        """End the pass: the states mapped in it are what the next tick may reuse (a pass cut
        short by an error keeps those it mapped: a state is a pure function of its key)."""
        read, self._pass = self._pass, None
        if read is not None and read.by_name is not None:
            self._states, self._needs_pods = read.memo, read.needs

    def delete(self, job: JobView) -> bool:
        """Delete the Job with `propagationPolicy` Foreground/Background and report when gone.

        Returns True only when the Job no longer exists AND no Pod of it is left (CB-13); a Job
        already gone counts as deleted (CB-14). Pods left behind by an earlier orphaning delete
        (`kubectl delete --cascade=orphan`, or an API delete without a policy) are deleted
        here too.

        Raises:
            BackendError: an API call failed after its retries.
        """
        name = self.name_of(job)
        ns = self.config.namespace
        options = client.V1DeleteOptions(propagation_policy=self.config.propagation_policy)
        job_gone = False
        self._known.pop(name, None)  # deleted on purpose: no longer expected
        try:
            self.caller.call(self.batch.delete_namespaced_job, name, ns, body=options)
        except ApiException as exc:
            if exc.status != 404:
                raise self._fail(f"delete Job {name}", exc) from exc
            job_gone = True
        except urllib3.exceptions.HTTPError as exc:
            raise self._fail(f"delete Job {name}", exc) from exc
        if not job_gone:
            # Deleting on purpose (an abort, a timeout): no outcome is awaited, so Falcon's
            # finalizer goes too, or the Job would stay Terminating for ever.
            self._drop_finalizer(name)
        try:
            if not job_gone:
                # With Foreground the Job stays (deletionTimestamp set) until its Pods are gone.
                try:
                    self.caller.call(self.batch.read_namespaced_job, name, ns)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    job_gone = True
            pods = self.caller.call(self.core.list_namespaced_pod, ns,
                                    label_selector=f"{POD_JOB_NAME_LABEL}={name}").items or []
            for pod in pods:
                if pod.metadata.deletion_timestamp is None and job_gone:
                    try:
                        self.caller.call(self.core.delete_namespaced_pod, pod.metadata.name, ns)
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise self._fail(f"finish deleting Job {name}", exc) from exc
        if pods:
            log.info("Job %s/%s: %d pod(s) still terminating", ns, name, len(pods))
        return job_gone and not pods

    def validate(self, task_spec: dict[str, Any]) -> dict[str, list[str]]:
        """Return what this cluster cannot run in a TaskSpec, keyed by TaskSpec field.

        The same rules the API server applies at CreateExp
        (`clusters.validation.kubernetes_task_spec_problems`).
        """
        return kubernetes_task_spec_problems(self.cluster_name, self.config.devices, task_spec)
