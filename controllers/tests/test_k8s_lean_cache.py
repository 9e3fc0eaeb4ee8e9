"""What the Kubernetes watch caches keep of a Job and a Pod maps to the same state as the whole.

The caches keep only the fields something reads (`cache.lean_job`, `cache.lean_pod`): a
controller concludes only what it observed, so every state-mapping case of the project
(fixtures/k8s-job-status.yaml, the Pod ends, the lost replicas, suspension, deletion, start
times, init containers, crash loops) is mapped twice here, from the whole objects as a real API
server sends them (the manifests' Job and Pod, `managedFields`, the kubelet's full status) and
from what the caches keep of them, and both must give the same `ClusterJobState`; so must
every other read of a cached object (`observe`'s, the release's and the sweep's). Pure: no API
server, no database.
"""
from __future__ import annotations

import copy
import sys

import pytest
from kubernetes import client

from controllers.cluster_backends.kubernetes import (
    FINALIZER,
    LABEL_JOB_ID,
    POD_COMPLETION_INDEX,
    POD_JOB_NAME_LABEL,
    KubernetesClusterConfig,
    all_ready,
    job_state,
)
from controllers.cluster_backends.kubernetes import manifests
from controllers.cluster_backends.kubernetes.cache import lean_job, lean_pod
from controllers.cluster_backends.kubernetes.state import condition, int_label, label_ids
from controllers.cluster_backends.kubernetes.vocabulary import CONDITION_COMPLETE, CONDITION_FAILED
from controllers.kubeclient import Raw
from controllers.tests.test_k8s_backend import job_view
from controllers.tests.test_k8s_cases import CASES, IMAGE, real_pod_status
from controllers.tests.test_k8s_known_outcomes import (
    KUBELET_EVICTION,
    LOST_BEFORE_RUNNING,
    POD_ENDS,
    READY,
    disruption_target,
)

NS = "falcon-jobs"
BACKOFF_FAILED = {"failed": 1, "startTime": "2026-11-01T10:00:00Z", "conditions": [
    {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
     "message": "Job has reached the specified backoff limit"},
    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
     "message": "Job has reached the specified backoff limit",
     "lastProbeTime": "2026-11-01T10:05:00Z", "lastTransitionTime": "2026-11-01T10:05:00Z"}]}
STAMP = "2026-11-01T10:00:00Z"


def whole_job(replica: int, status: dict, *, name: str = "falcon-3-demo-main",
              deleting: bool = False, suspend: bool = False) -> dict:
    """A Job as the API server returns it: the manifests' Job, stamped (uid, times,
    resourceVersion, managedFields), Falcon's finalizer and `status`."""
    config = KubernetesClusterConfig(namespace=NS)
    built = manifests.build_job(config, "k8s-a", job_view(replica=replica, image=IMAGE), name)
    obj = client.ApiClient().sanitize_for_serialization(built)
    obj["metadata"].update(
        namespace=NS, uid="6b7afb11-127c-4070-a8fd-d52c1b5a79fc", resourceVersion="1001",
        creationTimestamp=STAMP, generation=1, managedFields=[{
            "manager": "falcon", "operation": "Update", "apiVersion": "batch/v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:completions": {}}}}])
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-11-01T11:00:00Z"
        obj["metadata"]["deletionGracePeriodSeconds"] = 0
    if suspend:
        obj["spec"]["suspend"] = True
    obj["status"] = copy.deepcopy(status)
    return obj


def kubelet_status(status: dict) -> dict:
    """`status` with what a kubelet reports beside it and no state reads: addresses, QoS,
    the conditions of the other types, times on every condition, container ids."""
    out = real_pod_status(status)
    out.update(hostIP="10.0.0.7", podIP="10.4.1.9", podIPs=[{"ip": "10.4.1.9"}],
               qosClass="Burstable", startTime=STAMP)
    conditions = out.setdefault("conditions", [])
    for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady"):
        conditions.append({"type": kind, "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": STAMP})
    for cond in conditions:
        cond.setdefault("lastTransitionTime", STAMP)
    for cs in out.get("containerStatuses") or []:
        cs.setdefault("containerID", "containerd://8c1f")
        cs.setdefault("started", False)
    out.setdefault("containerStatuses", [{
        "name": "main", "image": IMAGE, "imageID": "", "ready": True, "restartCount": 0,
        "started": True, "containerID": "containerd://8c1f",
        "state": {"running": {"startedAt": STAMP}}}])
    return out


def whole_pods(job: dict, statuses: list[dict], *, deleting: tuple[int, ...] = ()) -> list[dict]:
    """The Job's Pods as the Job controller makes them from its template (labels, the
    completion index label and annotation, owner reference, spec), with a kubelet's status."""
    pods = []
    for index, status in enumerate(statuses):
        pod = copy.deepcopy(job["spec"]["template"])
        meta = pod["metadata"]
        name = f"{job['metadata']['name']}-{index}-abcde"
        meta.update(name=name, namespace=NS, uid=f"uid-{index}", resourceVersion=str(2000 + index),
                    creationTimestamp=STAMP, generateName=f"{job['metadata']['name']}-{index}-",
                    ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job",
                                      "name": job["metadata"]["name"],
                                      "uid": job["metadata"]["uid"], "controller": True,
                                      "blockOwnerDeletion": True}])
        meta["labels"].update({POD_JOB_NAME_LABEL: job["metadata"]["name"],
                               "job-name": job["metadata"]["name"],
                               "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
                               POD_COMPLETION_INDEX: str(index)})
        meta.setdefault("annotations", {})[POD_COMPLETION_INDEX] = str(index)
        if index in deleting:
            meta["deletionTimestamp"] = "2026-11-01T11:00:00Z"
            meta["finalizers"] = ["example.com/hold"]
        pod["spec"]["nodeName"] = "node-1"
        pod["status"] = kubelet_status(status)
        pods.append(pod)
    return pods


def state_of(job: dict | None, pods: list[dict], replica: int):
    return job_state("falcon-3-demo-main", Raw(job) if job is not None else None,
                     [Raw(p) for p in pods], pods_total=replica, image=IMAGE)


def job_reads(obj: dict, total: int) -> tuple:
    """Every other read of a cached Job: `observe`'s, `held_outcomes`', the release's and the
    sweep's."""
    raw, meta = Raw(obj), obj.get("metadata") or {}
    return (meta["name"], meta.get("resourceVersion"), int_label(raw.metadata.labels, LABEL_JOB_ID),
            raw.spec.completions, bool(condition(raw, CONDITION_COMPLETE)),
            bool(condition(raw, CONDITION_FAILED)), all_ready(raw, total),
            FINALIZER in (meta.get("finalizers") or []), list(meta.get("finalizers") or []),
            label_ids(meta.get("labels")), meta.get("creationTimestamp"),
            meta.get("deletionTimestamp"))


def pod_reads(obj: dict) -> tuple:
    """Every other read of a cached Pod: `observe`'s index and memo key, the sweep's."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (meta["name"], meta.get("resourceVersion"), labels.get(POD_JOB_NAME_LABEL),
            int_label(labels, LABEL_JOB_ID), label_ids(labels), meta.get("creationTimestamp"),
            meta.get("deletionTimestamp"))


def assert_same_observation(job: dict | None, pods: list[dict], replica: int) -> None:
    lean = lean_job(job) if job is not None else None
    lean_pods = [lean_pod(p) for p in pods]
    whole_state = state_of(job, pods, replica)
    assert state_of(lean, lean_pods, replica) == whole_state
    # What `observe` maps a Job from when its Pods are not read (a Job it takes as running).
    assert state_of(lean, [], replica) == state_of(job, [], replica)
    if job is not None:
        assert job_reads(lean, replica) == job_reads(job, replica)
    assert [pod_reads(p) for p in lean_pods] == [pod_reads(p) for p in pods]


# Each case: (replica, the Job's status, the Pods' statuses, Job options, indexes deleting).
MAPPING_CASES = {
    **{f"case-{cid}": (c["replica"], c["job_status"], c.get("pods") or [], {}, ())
       for cid, c in CASES.items() if "job_status" in c},
    **{f"pod-end-{i}": (1, BACKOFF_FAILED, [status], {}, ())
       for i, status in enumerate(
           {"phase": "Failed", "conditions": [READY],
            **({"reason": reason, "message": message} if reason else {}),
            **({"conditions": [READY, disruption_target(*cond)]} if cond else {}),
            "containerStatuses": [{"name": "main", "state": {"terminated": {
                "exitCode": 137, "reason": "Error", "message": "Killed"}}}]}
           for reason, message, cond, _expected in POD_ENDS)},
    **{f"lost-before-running-{shape}": (2, job_status, [{"phase": "Running",
                                                         "conditions": [READY]}, lost], {}, (1,))
       for shape, (lost, job_status, _word) in LOST_BEFORE_RUNNING.items()},
    "running-evicted-held-terminating": (
        2, {"active": 2, "ready": 2, "terminating": 1},
        [{"phase": "Running", "conditions": [READY]},
         {"phase": "Running", "reason": "Evicted", "message": KUBELET_EVICTION,
          "conditions": [READY]}], {}, (1,)),
    "terminating-pod-no-count": (2, {"active": 2, "ready": 2},
                                 [{"phase": "Running", "conditions": [READY]}] * 2, {}, (0,)),
    "suspended": (1, {"conditions": [{"type": "Suspended", "status": "True",
                                      "reason": "JobSuspended", "message": "Job suspended"}]},
                  [], {"suspend": True}, ()),
    # Suspended on create (a queue's webhook), before the Job controller adds the condition.
    "suspended-spec-only": (1, {}, [], {"suspend": True}, ()),
    "resumed-condition-false": (1, {"active": 1, "ready": 0, "conditions": [
        {"type": "Suspended", "status": "False", "reason": "JobResumed"}]},
        [{"phase": "Pending"}], {}, ()),
    "deleted-outside-falcon": (1, {"active": 1, "ready": 1}, [{"phase": "Running",
                                                              "conditions": [READY]}],
                               {"deleting": True}, ()),
    "running-with-start-time": (2, {"active": 2, "ready": 2, "startTime": STAMP},
                                [{"phase": "Running", "conditions": [READY]}] * 2, {}, ()),
    "init-container-image-pull": (1, {"active": 1, "ready": 0}, [{
        "phase": "Pending", "initContainerStatuses": [{
            "name": "fetch", "image": "gcr.io/acme/fetch:9", "imageID": "", "ready": False,
            "restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull",
                                                     "message": "pull access denied"}}}]}],
        {}, ()),
    "crash-loop-with-last-exit": (1, {"active": 1, "ready": 0}, [{
        "phase": "Running", "containerStatuses": [{
            "name": "main", "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                  "message": "back-off 5m0s"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                         "message": "Traceback ..."}}}]}], {}, ()),
    "failed-with-last-state-only": (1, BACKOFF_FAILED, [{
        "phase": "Failed", "containerStatuses": [{
            "name": "main", "state": {"running": {"startedAt": STAMP}},
            "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}], {}, ()),
    "success-criteria-met": (2, {"succeeded": 2, "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True"}]}, [], {}, ()),
    "unschedulable-and-scheduled": (2, {"active": 2, "ready": 0}, [
        {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                             "reason": "Unschedulable", "message": "0/3"}]},
        {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}],
        {}, ()),
}


@pytest.mark.parametrize("case_id", sorted(MAPPING_CASES))
def test_what_the_caches_keep_maps_to_the_state_the_whole_objects_map_to(case_id):
    replica, status, pod_statuses, options, deleting = MAPPING_CASES[case_id]
    job = whole_job(replica, status, **options)
    assert_same_observation(job, whole_pods(job, pod_statuses, deleting=deleting), replica)


def test_a_job_whose_name_is_gone_maps_the_same_with_its_leftover_pods():
    """`job-deleted-behind-falcon`: no Job, its Pods left (an orphaning delete)."""
    job = whole_job(1, {"active": 1})
    assert_same_observation(None, whole_pods(job, [{"phase": "Running",
                                                    "conditions": [READY]}]), 1)


def test_the_completion_index_annotation_is_kept_only_for_a_pod_without_the_label():
    job = whole_job(1, {"active": 1})
    (pod,) = whole_pods(job, [{"phase": "Failed", "containerStatuses": [{
        "name": "main", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}])
    assert "annotations" not in lean_pod(pod)["metadata"]
    del pod["metadata"]["labels"][POD_COMPLETION_INDEX]  # before Kubernetes 1.28
    assert lean_pod(pod)["metadata"]["annotations"] == {POD_COMPLETION_INDEX: "0"}
    whole = state_of(whole_job(1, BACKOFF_FAILED), [pod], 1)
    assert "(index 0)" in whole.message
    assert state_of(lean_job(whole_job(1, BACKOFF_FAILED)), [lean_pod(pod)], 1) == whole


def test_the_values_many_objects_repeat_are_one_object():
    """A phase, a creation second, the Job's name its Pods carry: one string each however many
    objects hold them; a condition, a Job's spec and status, its finalizers: one dict or list
    each."""
    job = whole_job(2, {"active": 2, "ready": 2})
    pods = [lean_pod(p) for p in whole_pods(copy.deepcopy(job), [
        {"phase": "Running", "conditions": [READY]}] * 2)]
    lean = lean_job(job)
    # Built apart, as two decoded LIST items are: equal strings, distinct objects.
    assert pods[0]["status"]["phase"] is pods[1]["status"]["phase"]
    assert pods[0]["status"]["conditions"][0]["type"] is sys.intern("Ready")
    assert pods[0]["metadata"]["labels"][POD_JOB_NAME_LABEL] is lean["metadata"]["name"]
    assert pods[1]["metadata"]["creationTimestamp"] is lean["metadata"]["creationTimestamp"]
    assert pods[0]["metadata"]["resourceVersion"] == "2000"  # kept as sent, not shared
    # Equal conditions, specs, statuses and finalizers: one dict or list each.
    assert pods[0]["status"]["conditions"][0] is pods[1]["status"]["conditions"][0]
    other = lean_job(whole_job(2, {"active": 2, "ready": 2}, name="falcon-4-other-main"))
    for path in (("spec",), ("status",), ("metadata", "finalizers")):
        a, b = lean, other
        for key in path:
            a, b = a[key], b[key]
        assert a is b, path
    # ... but only equal ones, type for type: a count of 1 is not `true`.
    odd = lean_job(whole_job(2, {"active": 2, "ready": True}))
    assert odd["status"] == {"ready": True} and odd["status"]["ready"] is True
    assert lean_job(whole_job(2, {"active": 2, "ready": 1}))["status"]["ready"] is not True
