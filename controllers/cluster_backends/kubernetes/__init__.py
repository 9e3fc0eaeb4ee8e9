"""The Kubernetes cluster backend: one `batch/v1` Indexed Job per Falcon Job.

What a Falcon Job becomes (Kubernetes API reference, batch/v1 JobSpec; GKE TPU and GPU docs):

- a Job named `cluster_job_name(job)` (deterministic, a DNS-1123 label of at most
  `K8S_JOB_NAME_MAX` characters so that the Pod hostnames `<name>-<index>` an Indexed Job
  derives stay within 63), labelled `falcon.io/exp-id`, `falcon.io/job-id`, `falcon.io/role`
  and `app.kubernetes.io/managed-by: falcon` (the selector of every LIST), on the Job and its
  Pods;
- `completionMode: Indexed`, `parallelism = completions = replica x hosts` (CB-9: the
  Job succeeds only when every index completed), `restartPolicy: Never`, `backoffLimit`
  (default 0: a profiling run is not silently retried), `ttlSecondsAfterFinished` (default one
  day, at least 300 s: the failed Pods' exit codes stay readable; the finalizer keeps the Job
  itself until its outcome is recorded);
- one container `main` running the TaskSpec `command` through `/bin/sh -c`, with the TaskSpec
  `envs`, `CUSTOM_CONFIG_KEY` (the experiment config, verbatim) and the `FALCON_*` variables;
- accelerators from `devices.DeviceTable`: resource requests and limits, node selectors; a
  multi-host TPU slice runs one Pod per host, and a Job with more than one Pod gets a headless
  Service of the same name (owned by the Job, so it is garbage-collected with it) and
  `subdomain`, so Pods reach each other as `<name>-<index>.<name>`.

Reading state (`observe`): list-then-watch caches of the Jobs and Pods with the managed-by label
selector (`kubeclient.Informer`), caught up each tick to the resourceVersion of a one-item LIST;
a Job such a cache lacks is missing only when the cache is known to be as new as the Job, or a
direct read says so, and a Job this process created is known from the create's answer without
waiting for the watch (`_known_jobs`, docs/cluster-behaviours.md CB-24);
with `watch: false`, one paged LIST of Jobs per tick plus one LIST of the Pods of the Jobs that
need them (not yet running, failed, losing replicas: their waiting reasons, exit codes and
disruptions go into the message). Answers are decoded JSON read through `kubeclient.Raw`.
Status mapping is `job_state` below.

Outcomes and orphans: each Job carries Falcon's finalizer (`FINALIZER`), so Kubernetes cannot
remove it before its outcome is recorded; each tick the resource manager asks `held_outcomes`
which Jobs hold it and `release_outcomes` those whose Falcon job is terminal (CB-19), and
`sweep` releases the Jobs of unknown Falcon jobs and deletes what no open Falcon job owns
(docs/cluster-behaviours.md, CB-19 and CB-20).

The package: `vocabulary.py` (labels, finalizer, Kubernetes API names), `config.py` (the
clusters-file entry), `manifests.py` (the Job, Pod and Service built, pure), `state.py` (Job and
Pod state mapped to Falcon's, pure), `outcomes.py` (the finalizer and the sweep) and
`backend.py` (the `ClusterBackend` that talks to the cluster). Callers import from here.
"""
from __future__ import annotations

from controllers.cluster_backends.kubernetes.backend import KubernetesBackend
from controllers.cluster_backends.kubernetes.config import KubernetesClusterConfig
from controllers.cluster_backends.kubernetes.outcomes import ReleaseResult, SweepResult
from controllers.cluster_backends.kubernetes.state import (
    PodEnd,
    all_ready,
    failure_details,
    job_state,
    lost_replicas,
    pending_reasons,
    pod_end,
    running_pods,
    start_time,
)
from controllers.cluster_backends.kubernetes.vocabulary import *  # noqa: F403 (re-exported)
