"""`core.processes.user_code`: who may run users' code as the server, and `core.processes.ports.metrics_host`."""
from __future__ import annotations

import pytest

from core.processes.ports import metrics_host
from core.processes.user_code import check_user_code, user_code_problem

KUBERNETES_ONLY = "clusters:\n  tpu-a:\n    backend: kubernetes\n    namespace: jobs\n"
MIXED = KUBERNETES_ONLY + "  laptop:\n    backend: local\n  desk:\n    backend: local\n"


@pytest.fixture
def mode(settings, tmp_path):
    """Set the authentication mode, the opt-ins, the clusters file and the analyzer backend."""

    def configure(auth: str, *, nonloopback=False, unsafe=False, clusters: str | None = None,
                  analyzer: str = "local") -> None:
        settings.FALCON_AUTH_MODE = auth
        settings.FALCON_LOCAL_ALLOW_NONLOOPBACK = nonloopback
        settings.FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER = unsafe
        settings.FALCON_ANALYZER_BACKEND = analyzer
        if clusters is None:
            settings.FALCON_CLUSTERS_FILE = ""
        else:
            path = tmp_path / f"clusters-{abs(hash(clusters))}.yaml"
            path.write_text(clusters)
            settings.FALCON_CLUSTERS_FILE = str(path)

    return configure


def test_one_persons_machine_runs_user_code_with_no_setting(mode):
    mode("local")
    assert user_code_problem(tasks=True, analyses=True) == (None, None)
    assert check_user_code() == []


@pytest.mark.parametrize("auth,nonloopback", [("cloudflare", False), ("local", True)])
def test_several_people_and_a_local_runner_are_refused(mode, auth, nonloopback):
    mode(auth, nonloopback=nonloopback)
    refusal, warning = user_code_problem(tasks=True, analyses=True)
    assert warning is None
    assert "local cluster local" in refusal and "FALCON_ANALYZER_BACKEND=local" in refusal
    assert "FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER=1" in refusal
    assert [e.id for e in check_user_code()] == ["falcon.E010"]


def test_each_process_is_refused_for_what_it_runs(mode):
    mode("cloudflare", clusters=KUBERNETES_ONLY, analyzer="local")
    assert user_code_problem(tasks=True, analyses=False) == (None, None)  # the API servers
    assert user_code_problem(tasks=False, analyses=True)[0]  # the analyzer controller
    mode("cloudflare", clusters=MIXED, analyzer="kubernetes")
    refusal, _ = user_code_problem(tasks=True, analyses=True)
    assert "local clusters desk, laptop (the clusters file " in refusal
    assert "FALCON_ANALYZER_BACKEND" not in refusal.split("Use Kubernetes")[0]


def test_kubernetes_everywhere_needs_no_opt_in(mode):
    mode("cloudflare", clusters=KUBERNETES_ONLY, analyzer="kubernetes")
    assert user_code_problem(tasks=True, analyses=True) == (None, None)


def test_the_opt_in_turns_the_refusal_into_a_warning(mode):
    mode("cloudflare", unsafe=True)
    refusal, warning = user_code_problem(tasks=True, analyses=True)
    assert refusal is None
    assert warning.startswith("WARNING: FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER=1")
    assert check_user_code() == []


@pytest.mark.parametrize("configured,host", [("", "127.0.0.1"), ("127.0.0.1", "127.0.0.1"),
                                             ("::1", "::1"), ("[::1]", "::1")])
def test_metrics_listen_on_loopback_in_local_mode(configured, host):
    assert metrics_host(configured, 9100, mode="local", opt_in=False) == (host, None)


@pytest.mark.parametrize("configured", ["0.0.0.0", "::", "10.0.0.5", "metrics.example"])
def test_metrics_beyond_loopback_need_the_local_opt_in(configured):
    with pytest.raises(ValueError, match="FALCON_METRICS_ADDR=.*FALCON_LOCAL_ALLOW_NONLOOPBACK"):
        metrics_host(configured, 9100, mode="local", opt_in=False)
    host, warning = metrics_host(configured, 9100, mode="local", opt_in=True)
    assert host == configured and "WARNING" in warning
    assert metrics_host(configured, 9100, mode="cloudflare", opt_in=False) == (configured, None)


def test_metrics_default_to_every_address_outside_local_mode():
    assert metrics_host("", 9100, mode="cloudflare", opt_in=False) == ("0.0.0.0", None)
