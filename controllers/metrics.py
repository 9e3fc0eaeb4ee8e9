"""Prometheus metrics of a controller, served on its own port (`FALCON_METRICS_PORT`).

Everything a controller exports is defined here, and attached from outside the reconcilers so
their code stays free of metrics:

- `observe_tick` (called by `controllers.runner.run_loop`): tick duration and errors, and the
  rows a tick skipped because they could not be mapped (its stats' `skipped`);
- `instrument(controller, elector)` (called by `runcontroller`): wraps the controller's API
  client (jobs and analyses by status, as last read: `ObservedAPI`) and its cluster backends
  (cluster API calls and errors by verb), and registers the leader status, the analyzer's
  queue depths and the slots in use, read at scrape time;
- `serve(port)`: `prometheus_client.start_http_server`.

Names follow Prometheus's conventions (`_total` counters, `_seconds` durations, base units).
Every label value comes from a closed set: the registry's controller names, the verbs of
`VERBS`, the statuses of `core.domain.statuses`, the configured queues.
"""
from __future__ import annotations

import functools
import logging
from collections import Counter as Tally
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from core.domain.statuses import AnalysisStatus, JobStatus

log = logging.getLogger("falcon.controllers")

TICK_SECONDS = Histogram(
    "falcon_controller_tick_duration_seconds", "Duration of one controller tick.",
    ["controller"], buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
TICK_ERRORS = Counter("falcon_controller_tick_errors_total",
                      "Ticks that raised (retried next tick when transient).", ["controller"])
ROWS_SKIPPED = Counter("falcon_controller_rows_skipped_total",
                       "Rows a tick skipped because they could not be mapped or decided.",
                       ["controller"])
CLUSTER_CALLS = Counter("falcon_cluster_api_calls_total",
                        "Calls to the cluster (Kubernetes API or local backend) by verb.",
                        ["controller", "verb"])
CLUSTER_ERRORS = Counter("falcon_cluster_api_errors_total",
                         "Cluster calls that raised, by verb.", ["controller", "verb"])
JOBS = Gauge("falcon_controller_jobs",
             "Jobs by status in the controller's last read of them (resources: the open jobs "
             "of its clusters; exp: every job of the open experiments).",
             ["controller", "status"])
ANALYSES = Gauge("falcon_controller_analyses",
                 "Analyses by status in the controller's last read of that status.",
                 ["controller", "status"])

# Backend methods -> the verb they are on the cluster (Kubernetes API verbs).
VERBS = {"submit": "create", "start": "create", "observe": "list", "list_runs": "list",
         "delete": "delete", "stop": "delete", "read_log": "get"}


def observe_tick(name: str, seconds: float, *, failed: bool, stats: Any = None) -> None:
    """Record one tick of controller `name`: its duration (seconds), failure, skipped rows.

    Args:
        stats: what `tick()` returned: an object or dict with `skipped` (rows skipped), if any.
    """
    TICK_SECONDS.labels(name).observe(seconds)
    # A tick that caught a cluster outage itself (the analyzer's `cluster_errors`) failed too.
    cluster_errors = (stats.get("cluster_errors") if isinstance(stats, dict)
                      else getattr(stats, "cluster_errors", None))
    if failed or (isinstance(cluster_errors, int) and cluster_errors > 0):
        TICK_ERRORS.labels(name).inc()
    skipped = (stats.get("skipped") if isinstance(stats, dict)
               else getattr(stats, "skipped", None))
    if isinstance(skipped, int) and skipped > 0:
        ROWS_SKIPPED.labels(name).inc(skipped)
    else:
        ROWS_SKIPPED.labels(name)  # the series exists (at 0) from the first tick


JOB_STATUSES = tuple(str(status) for status in JobStatus)
ANALYSIS_STATUSES = tuple(str(status) for status in AnalysisStatus)


def _count_by_status(gauge: Gauge, name: str, rows: Any,
                     covered: tuple[str, ...] | None) -> None:
    """Set `gauge{controller=name, status}` for every status in `covered` from `rows`.

    A list filtered to some statuses says how many rows are in those, and nothing of the
    others: only the `covered` statuses are set (0 when none of `rows` has it), every other
    series keeps its value. (The analyzer lists `pending` and `running` records in two calls;
    zeroing what one call did not return read `pending` 0 while analyses were pending.)

    Args:
        rows: the list call's result (views with `status`); anything but a list is left.
        covered: the statuses the call read completely (its status filter, or every status
            when it had none); None for a call about some rows only (ids, one experiment),
            which sets nothing.
    """
    if covered is None or not isinstance(rows, list):
        return
    tally = Tally(str(getattr(row, "status", "")) for row in rows)
    for status in covered:  # labels from the enum only: a closed set
        gauge.labels(name, status).set(tally.get(status, 0))


def _covered(statuses: Any, every: tuple[str, ...]) -> tuple[str, ...]:
    """The statuses of `every` a list call filtered to `statuses` read (all when no filter)."""
    asked = {str(s) for s in statuses or ()}
    return tuple(s for s in every if s in asked) if asked else every


def _jobs_covered(flt: Any) -> tuple[str, ...] | None:
    """The job statuses a ListJobs/ListJobStates call with filter `flt` reads completely,
    within the controller's scope (its clusters, the open experiments); None for a call about
    some jobs only (ids, experiments, experiment types, a time window)."""
    if flt is None:
        return JOB_STATUSES
    if (getattr(flt, "ids", ()) or getattr(flt, "exp_ids", ()) or getattr(flt, "exp_types", ())
            or getattr(flt, "updated_since", None) is not None):
        return None
    return _covered(getattr(flt, "statuses", ()), JOB_STATUSES)


class ObservedAPI:
    """The controller's API client, counting the jobs and analyses its lists return by status.

    Every attribute is the client's own; the list calls below pass their result through
    unchanged after counting it (`_count_by_status`: only the statuses each call read):

    - `list_jobs`, `list_job_states`, `list_job_state_pages` (the resource manager: the open
      jobs of its clusters; the pages counted as they pass, the gauge set after the last) and
      `list_exp_states` (the exp controller: every job of the open experiments) set
      `falcon_controller_jobs`;
    - `list_records` without `exp_id` or `analysis_type`, and `list_running` (the analyzer)
      set `falcon_controller_analyses`.
    """

    def __init__(self, api: Any, name: str):
        self._api, self._name = api, name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._api, attr)
        name = self._name
        if attr in ("list_jobs", "list_job_states"):
            def list_jobs(flt=None, *args, **kwargs):
                rows = value(flt, *args, **kwargs)
                _count_by_status(JOBS, name, rows, _jobs_covered(flt))
                return rows
            return list_jobs
        if attr == "list_job_state_pages":
            def list_job_state_pages(flt=None, *args, **kwargs):
                # As `list_exp_state_pages`: counted page by page, set after the last one.
                tally: Tally = Tally()
                for page in value(flt, *args, **kwargs):
                    tally.update(str(getattr(job, "status", "")) for job in page)
                    yield page
                for status in _jobs_covered(flt) or ():
                    JOBS.labels(name, status).set(tally.get(status, 0))
            return list_job_state_pages
        if attr == "list_exp_states":
            def list_exp_states(*args, **kwargs):
                states = value(*args, **kwargs)
                if isinstance(states, list):
                    jobs = [job for state in states for job in getattr(state, "jobs", ())]
                    _count_by_status(JOBS, name, jobs, JOB_STATUSES)
                return states
            return list_exp_states
        if attr == "list_exp_state_pages":
            def list_exp_state_pages(*args, **kwargs):
                # The pages pass through as they come; the gauge is set once the last page
                # was read (a tick cut short by a failed call reads no complete count).
                tally: Tally = Tally()
                for page in value(*args, **kwargs):
                    tally.update(str(job.status) for state in page
                                 for job in getattr(state, "jobs", ()))
                    yield page
                for status in JOB_STATUSES:
                    JOBS.labels(name, status).set(tally.get(status, 0))
            return list_exp_state_pages
        if attr == "list_records":
            def list_records(*, statuses=(), exp_id=0, analysis_type="", **kwargs):
                rows = value(statuses=statuses, exp_id=exp_id, analysis_type=analysis_type,
                             **kwargs)
                scoped = exp_id or analysis_type
                _count_by_status(ANALYSES, name, rows,
                                 None if scoped else _covered(statuses, ANALYSIS_STATUSES))
                return rows
            return list_records
        if attr == "list_running":
            def list_running(*args, **kwargs):
                rows = value(*args, **kwargs)
                _count_by_status(ANALYSES, name, rows, (str(AnalysisStatus.RUNNING),))
                return rows
            return list_running
        return value


def _observed(method: Callable, name: str, verb: str) -> Callable:
    @functools.wraps(method)
    def call(*args, **kwargs):
        CLUSTER_CALLS.labels(name, verb).inc()
        try:
            return method(*args, **kwargs)
        except Exception:
            CLUSTER_ERRORS.labels(name, verb).inc()
            raise

    return call


def _observe_backend(backend: Any, name: str) -> None:
    """Count `backend`'s cluster calls by verb (its instance methods are wrapped in place)."""
    for method_name, verb in VERBS.items():
        method = getattr(backend, method_name, None)
        if callable(method) and not getattr(method, "_falcon_observed", False):
            wrapped = _observed(method, name, verb)
            wrapped._falcon_observed = True
            setattr(backend, method_name, wrapped)


class ControllerCollector(Collector):
    """Leader status, and the analyzer's queue depths and slots in use, read at scrape time."""

    def __init__(self, controller: Any, is_leader: Callable[[], bool]):
        self.controller, self.is_leader = controller, is_leader

    def collect(self):
        name = getattr(self.controller, "name", "controller")
        leader = GaugeMetricFamily("falcon_controller_leader",
                                   "1 while this replica leads (holds the Lease), else 0.",
                                   labels=["controller"])
        leader.add_metric([name], 1.0 if self.is_leader() else 0.0)
        yield leader
        queues = getattr(self.controller, "queues", None)
        if queues is None or not hasattr(queues, "limits"):
            return
        depth = GaugeMetricFamily("falcon_analyzer_queue_depth",
                                  "Analyses waiting in each queue.", labels=["queue"])
        used = GaugeMetricFamily("falcon_analyzer_slots_in_use",
                                 "Slots held by running analyses, per queue.", labels=["queue"])
        limit = GaugeMetricFamily("falcon_analyzer_slots", "Slots of each queue.",
                                  labels=["queue"])
        for queue, slots in queues.limits.items():
            depth.add_metric([queue], len(queues.pending(queue)))
            used.add_metric([queue], len(queues.held(queue)))
            limit.add_metric([queue], slots)
        yield from (depth, used, limit)


def instrument(controller: Any, *, is_leader: Callable[[], bool] | None = None,
               registry=REGISTRY) -> ControllerCollector:
    """Attach the metrics of `controller` (see the module docstring); returns its collector.

    Args:
        controller: a reconciler with `name`, `api`, and `backends` (a dict) or `backend`.
        is_leader: the elector's `is_leader`; None means it always acts (no election).
    """
    name = getattr(controller, "name", "controller")
    api = getattr(controller, "api", None)
    if api is not None and not isinstance(api, ObservedAPI):
        controller.api = ObservedAPI(api, name)
    for backend in (getattr(controller, "backends", None) or {}).values():
        _observe_backend(backend, name)
    if getattr(controller, "backend", None) is not None:
        _observe_backend(controller.backend, name)
    collector = ControllerCollector(controller, is_leader or (lambda: True))
    registry.register(collector)
    return collector


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Serve `/metrics` (Prometheus text format) on `addr:port` in a daemon thread."""
    start_http_server(port, addr=addr)
    log.info("metrics on http://%s:%s/metrics", addr, port)
