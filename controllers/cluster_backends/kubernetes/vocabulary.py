"""The Kubernetes names Falcon writes and reads: its labels, finalizer and container, and the
Kubernetes API vocabulary (Pod phases, condition types) the state mapping reads.

Pure constants: the manifests, the state mapping and the backend share them.
"""
from __future__ import annotations

LABEL_EXP_ID = "falcon.io/exp-id"
LABEL_JOB_ID = "falcon.io/job-id"
LABEL_ROLE = "falcon.io/role"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "falcon"
SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
ANNOTATION_EXP_NAME = "falcon.io/exp-name"
# Falcon's finalizer on each Job it creates (API conventions, "Finalizers"): Kubernetes (the TTL
# controller, a `kubectl delete`) cannot remove the Job before the resource manager recorded
# its outcome; the resource manager removes it once the Falcon job is terminal
# (`release_outcomes`, every tick), when nobody will record one (`sweep`), or when it deletes
# the Job itself (`delete`).
FINALIZER = "falcon.io/outcome"
# Set by the Job controller on every Pod it creates (Kubernetes >= 1.27; `job-name` before).
POD_JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# An Indexed Job's Pod's completion index: a label since Kubernetes 1.28, an annotation before
# (the Job controller sets both now).
POD_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CONTAINER = "main"
# An Indexed Job's Pod hostname is `<job name>-<index>` and must be a DNS label (<= 63); room
# for '-' and a 10-digit index.
K8S_JOB_NAME_MAX = 52
# Waiting reasons that will not clear by themselves: named first in a Pending message (CB-6).
STUCK_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff",
                 "RunContainerError")
# Waiting reasons about the image: the message names the image when the detail does not.
IMAGE_PULL_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName")
PROPAGATION_POLICIES = ("Foreground", "Background")
# 4xx answers to a create that a later attempt can get past (API conventions, "HTTP Status
# codes"): 409 is an adoption or a kept Service, 429 and 408 say "try again later", 401 means
# this controller's credentials are stale (a rotated service-account token), and 403 is either
# a full namespace ResourceQuota ("exceeded quota", which clears as other jobs finish) or an
# RBAC rule an operator fixes; Kubernetes gives both the same status and reason, and failing
# every Pending job for either would turn a passing squeeze or an operator's fix into mass
# failures (the job's message names the refusal meanwhile). Every other 4xx (400, 404, 422, ...)
# is the API server's decision about this object: final.
RETRYABLE_CLIENT_ERRORS = frozenset({401, 403, 408, 409, 429})

# Kubernetes API vocabulary, not Falcon statuses (core/v1 PodStatus, batch/v1 JobStatus).
# Pod phases: not started yet, and the two a Pod never leaves.
POD_PENDING = "Pending"
POD_SUCCEEDED = "Succeeded"
POD_FAILED = "Failed"
POD_FINISHED_PHASES = (POD_SUCCEEDED, POD_FAILED)
# Job condition types: the Job is done, is failing for good, or is held back.
CONDITION_COMPLETE = "Complete"
CONDITION_SUCCESS_CRITERIA_MET = "SuccessCriteriaMet"
CONDITION_FAILED = "Failed"
CONDITION_FAILURE_TARGET = "FailureTarget"
CONDITION_SUSPENDED = "Suspended"
# The Job condition types a state is read from (`state.condition`, always with status True).
JOB_CONDITIONS_READ = frozenset({CONDITION_COMPLETE, CONDITION_SUCCESS_CRITERIA_MET,
                                 CONDITION_FAILED, CONDITION_FAILURE_TARGET,
                                 CONDITION_SUSPENDED})
# Pod condition types: ready, not scheduled yet, or ended by someone else than the task.
CONDITION_READY = "Ready"
CONDITION_POD_SCHEDULED = "PodScheduled"
CONDITION_DISRUPTION_TARGET = "DisruptionTarget"
# A condition's `status` field.
CONDITION_TRUE = "True"
CONDITION_FALSE = "False"


# Above this many Jobs needing their Pods in one tick, one LIST of every Falcon Pod is cheaper
# than label selectors naming them (and keeps the URL short).
POD_SELECTOR_NAMES = 50
# Above this many Jobs a lagging cache lacks in one tick, one LIST of every Falcon Job reads
# them directly instead of one GET each (`_read_directly`).
DIRECT_READ_GETS = 50
# How long a Job this process created or read directly counts as present while the Jobs cache
# has not seen it, seconds: kube-controller-manager's `ExpectationsTimeout` (5 min). Past it
# the Job is read directly again (a cache that never catches up must not hide a deletion).
EXPECTATION_TIMEOUT = 300.0
