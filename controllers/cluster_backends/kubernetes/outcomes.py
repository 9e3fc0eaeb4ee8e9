"""Falcon's finalizer on its Jobs: which Jobs hold an outcome, releasing them, the orphan sweep.

Each Job Falcon creates carries `FINALIZER`, so Kubernetes cannot remove it before the resource
manager recorded its outcome (docs/cluster-behaviours.md, CB-19 and CB-20). `OutcomesMixin` is
the part of `KubernetesBackend` that reads and removes that finalizer.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controllers.cluster_backends.base import BackendError
from controllers.cluster_backends.kubernetes.state import (
    condition,
    int_label,
    label_ids,
)
from controllers.cluster_backends.kubernetes.vocabulary import (
    CONDITION_COMPLETE,
    CONDITION_FAILED,
    FINALIZER,
    LABEL_JOB_ID,
    POD_JOB_NAME_LABEL,
)
from controllers.kubeclient import Raw

log = logging.getLogger("falcon.controllers.kubernetes")


@dataclass
class ReleaseResult:
    """What one `KubernetesBackend.release_outcomes` did: the Jobs whose finalizer was
    removed, and the error of each Job it could not release (retried next tick)."""

    released: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass
class SweepResult:
    """What one `KubernetesBackend.sweep` did: names of Jobs whose finalizer was removed, of
    Jobs and Pods deleted, and of those still terminating (tracked until they are gone)."""

    released: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    terminating: list[str] = field(default_factory=list)


def _age(meta: Mapping[str, Any], now: datetime) -> float:
    """Seconds since `metadata.creationTimestamp` (RFC 3339); infinite when it is absent."""
    stamp = meta.get("creationTimestamp")
    if not stamp:
        return float("inf")
    try:
        created = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    return (now - created).total_seconds()


class OutcomesMixin:
    """The finalizer and sweep half of `KubernetesBackend` (it supplies `caller`, `batch`,
    `core`, `config`, `cluster_name`, `_fail`, `_known`, `_released` and the cache reads)."""

    def _read_job_raw(self, name: str) -> dict[str, Any]:
        """GET Job `name` as decoded JSON (raises the client's errors as they come)."""
        resp = self.caller.call(self.batch.read_namespaced_job, name, self.config.namespace,
                                _preload_content=False)
        try:
            return json.loads(resp.data)
        finally:
            resp.release_conn()

    def _drop_finalizer(self, name: str, obj: Mapping[str, Any] | None = None) -> bool:
        """Remove Falcon's finalizer from Job `name`. Return True when done.

        A JSON Patch whose `test` checks the list entry first: a list changed since `obj`
        was read (a cache behind the server, another controller's finalizer) answers 422,
        and the Job is read again and patched once more from what the server holds. A Job
        whose cached copy is the one this backend already released is not patched again
        (the cache has not seen the patch yet).

        Args:
            name: the Job's name.
            obj: the Job as last read (decoded JSON); read again when None.

        Raises:
            BackendError: the call failed (a 404 counts as done).
        """
        what = f"remove finalizer {FINALIZER} of Job {name}"
        try:
            seen = (obj.get("metadata") or {}).get("resourceVersion") if obj is not None else None
            if seen and name in self._released and self._released[name] == seen:
                return True
            if obj is None:
                obj = self._read_job_raw(name)
            try:
                self._patch_out_finalizer(name, obj)
            except ApiException as exc:
                if exc.status != 422:
                    raise
                self._patch_out_finalizer(name, self._read_job_raw(name))
            return True
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise self._fail(what, exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise self._fail(what, exc) from exc

    def _patch_out_finalizer(self, name: str, obj: Mapping[str, Any]) -> None:
        """One guarded JSON Patch removing `FINALIZER` from `obj`'s list (none when absent)."""
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        path = f"/metadata/finalizers/{finalizers.index(FINALIZER)}"
        self.caller.call(self.batch.patch_namespaced_job, name, self.config.namespace,
                         [{"op": "test", "path": path, "value": FINALIZER},
                          {"op": "remove", "path": path}],
                         _content_type="application/json-patch+json")
        # Only the copy read before the patch is skipped later: any newer one is read as is.
        self._released[name] = meta.get("resourceVersion")

    def held_outcomes(self) -> dict[str, int | None]:
        """Return `{Job name: falcon.io/job-id}` of every Falcon Job holding `FINALIZER`.

        Read from the Jobs cache (with `watch`; filled by a LIST after a start or a 410, so a
        Job seen only through a relist is in it) or one paged LIST; a Job being deleted is
        included (the finalizer is what keeps it). The id is None when the label is not an
        integer.

        Raises:
            BackendError: the LIST failed, or the cache is not filled yet.
        """
        held = {}
        for name, obj in self.cluster_jobs().items():
            meta = obj.get("metadata") or {}
            if FINALIZER in (meta.get("finalizers") or []):
                held[name] = int_label(meta.get("labels"), LABEL_JOB_ID)
        # Names no longer listed cannot be met again with the same resourceVersion.
        self._released = {n: rv for n, rv in self._released.items() if n in held}
        return held

    def release_outcomes(self, names: list[str]) -> ReleaseResult:
        """Remove Falcon's finalizer from the named Jobs: their outcomes are recorded.

        Each Job is patched on its own (`_drop_finalizer`); one that fails is reported and
        the others go on (the next tick retries it). A Job being deleted is removed by
        Kubernetes once released (CB-19).

        Args:
            names: Job names, as `held_outcomes` returned them.

        Returns:
            The names released and, by name, why the others were not.
        """
        result = ReleaseResult()
        jobs = self.cluster_jobs()
        for name in names:
            try:
                self._drop_finalizer(name, jobs.get(name))
            except BackendError as exc:
                result.failed[name] = str(exc)
                continue
            result.released.append(name)
        return result

    def sweep(self, open_job_ids: set[int], *, grace: float) -> SweepResult:
        """Release the outcome of finished Falcon jobs and remove what no open job owns.

        For every Falcon-labelled Job whose `falcon.io/job-id` is not in `open_job_ids` (its
        Falcon job is terminal, or unknown: deleted, or made by a Lease holder that lost its
        Lease while its create was in flight), created more than `grace` seconds ago:
        Falcon's finalizer is removed (the outcome is recorded, or nobody will record one),
        and a Job that has not finished is deleted with its Pods. A finished Job is left to
        its `ttlSecondsAfterFinished`, with its Pods' exit codes and output. Pods of Falcon
        whose Job is gone and whose Falcon job is not open are deleted too (left by an
        orphaning delete); a Job the Jobs cache lacks is read directly first, so a cache that
        trails the Pods cache never deletes the Pods of a Job that exists. Every removal is
        logged. The grace is measured from each object's `creationTimestamp` (the API
        server's stamp), not from when this process first saw it: a Job seen late through a
        lagging watch is as old as the server says.

        Args:
            open_job_ids: ids of the Falcon jobs of this cluster that are not terminal
                (Pending, Running, Aborting), including rows the list call could not read.
            grace: seconds; objects younger than this are spared (a create racing the list
                of open jobs).

        Returns:
            What was released, deleted and is still terminating.

        Raises:
            BackendError: a call failed; the next tick continues where this one stopped.
        """
        result = SweepResult()
        now = datetime.now(timezone.utc)
        jobs = self.cluster_jobs()
        ns = self.config.namespace
        options = client.V1DeleteOptions(propagation_policy=self.config.propagation_policy)
        # The Jobs of no open job, in name order: only they are sorted, not every Job of the
        # cluster each tick.
        swept = sorted(name for name, obj in jobs.items()
                       if int_label((obj.get("metadata") or {}).get("labels"), LABEL_JOB_ID)
                       not in open_job_ids)
        for name in swept:
            obj = jobs[name]
            meta = obj.get("metadata") or {}
            job_id = int_label(meta.get("labels"), LABEL_JOB_ID)
            if _age(meta, now) < grace:
                continue
            if FINALIZER in (meta.get("finalizers") or []):
                self._drop_finalizer(name, obj)
                result.released.append(name)
            raw = Raw(obj)
            finished = condition(raw, CONDITION_COMPLETE) or condition(raw, CONDITION_FAILED)
            if meta.get("deletionTimestamp"):
                result.terminating.append(name)
            elif not finished:
                try:
                    self.caller.call(self.batch.delete_namespaced_job, name, ns, body=options)
                except ApiException as exc:
                    if exc.status != 404:
                        raise self._fail(f"delete orphan Job {name}", exc) from exc
                except urllib3.exceptions.HTTPError as exc:
                    raise self._fail(f"delete orphan Job {name}", exc) from exc
                result.deleted.append(name)
                log.warning("cluster %s: deleted Job %s/%s: its falcon job %s is terminal or "
                            "unknown", self.cluster_name, ns, name, job_id,
                            extra=label_ids(meta.get("labels")))
        pods = (self._filled_caches()[1].items() if self.config.watch else
                {p.raw["metadata"]["name"]: p.raw
                 for p in self._list_raw(self.core.list_namespaced_pod, "Pods")})
        # "Its Job is gone" is read from the Jobs cache, which may trail the Pods cache: a Job
        # it lacks is read directly before its Pods are deleted (a finished Job keeps its
        # Pods, and their exit codes, until its TTL).
        candidates = {name: obj for name, obj in pods.items()
                      if not (((obj.get("metadata") or {}).get("labels") or {}).get(
                          POD_JOB_NAME_LABEL) in jobs
                          or int_label((obj.get("metadata") or {}).get("labels"),
                                        LABEL_JOB_ID) in open_job_ids
                          or _age(obj.get("metadata") or {}, now) < grace)}
        owners = {((obj.get("metadata") or {}).get("labels") or {}).get(POD_JOB_NAME_LABEL)
                  for obj in candidates.values()} - {None}
        existing = set(self._known) & owners
        if self.config.watch and owners - existing:
            existing |= set(self._read_directly(sorted(owners - existing)))
        for name, obj in sorted(candidates.items()):
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            if labels.get(POD_JOB_NAME_LABEL) in existing:
                continue
            if meta.get("deletionTimestamp"):
                result.terminating.append(name)
                continue
            try:
                self.caller.call(self.core.delete_namespaced_pod, name, ns)
            except ApiException as exc:
                if exc.status != 404:
                    raise self._fail(f"delete orphan Pod {name}", exc) from exc
            except urllib3.exceptions.HTTPError as exc:
                raise self._fail(f"delete orphan Pod {name}", exc) from exc
            result.deleted.append(name)
            log.warning("cluster %s: deleted Pod %s/%s: its Job is gone and its falcon job %s "
                        "is terminal or unknown", self.cluster_name, ns, name,
                        labels.get(LABEL_JOB_ID), extra=label_ids(labels))
        return result
