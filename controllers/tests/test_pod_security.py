"""controllers.pod_security: one definition of the Pod Security levels for every Falcon Pod."""
from __future__ import annotations

import pytest
from kubernetes import client

from controllers.pod_security import security_contexts

API = client.ApiClient()


def _plain(level, **kwargs):
    pod, container = security_contexts(level, **kwargs)
    return API.sanitize_for_serialization(pod), API.sanitize_for_serialization(container)


def test_restricted_is_the_default_and_meets_the_restricted_standard():
    pod, container = _plain("restricted")
    assert pod == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert container == {"allowPrivilegeEscalation": False, "privileged": False,
                         "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                         "seccompProfile": {"type": "RuntimeDefault"}}
    assert _plain("restricted") == tuple(API.sanitize_for_serialization(c)
                                         for c in security_contexts())


def test_a_uid_is_the_user_group_and_fs_group():
    pod, container = _plain("restricted", run_as_user=10001, read_only_root_filesystem=True)
    assert (pod["runAsUser"], pod["runAsGroup"], pod["fsGroup"]) == (10001, 10001, 10001)
    assert container["runAsUser"] == 10001 and container["readOnlyRootFilesystem"] is True


def test_baseline_and_privileged_relax_on_purpose():
    pod, container = _plain("baseline")
    assert "runAsNonRoot" not in pod and "capabilities" not in container
    assert container["allowPrivilegeEscalation"] is False
    pod, container = _plain("privileged", run_as_user=0)
    assert pod == {"runAsUser": 0, "runAsGroup": 0} and container == {"privileged": True}


@pytest.mark.parametrize("level, uid, message", [
    ("unconfined", None, "pod_security: 'unconfined' is not one of"),
    ("restricted", 0, "run_as_user: 0 is root"),
])
def test_an_unknown_level_or_root_under_restricted_is_refused(level, uid, message):
    with pytest.raises(ValueError, match=message):
        security_contexts(level, run_as_user=uid)
