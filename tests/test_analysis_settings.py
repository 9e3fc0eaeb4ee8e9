"""The analyzer's and the local cluster's capacity settings refuse bad values at start, naming
the variable."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# A fresh process reads the settings module, as every process does first at its start; the
# values are checked there. (No `django.setup()`: loading the apps costs about ten times
# the settings and checks nothing more here.)
READ_SETTINGS = ("import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'falcon_site.settings'; "
                 "from django.conf import settings as s; ")


def load(**env: str) -> subprocess.CompletedProcess:
    code = READ_SETTINGS + "print(s.FALCON_ANALYSIS_CONCURRENCY, s.FALCON_ANALYSIS_POLL_SECONDS)"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)


@pytest.mark.parametrize("name,value,what", [
    ("FALCON_ANALYSIS_ONLINE_CONCURRENCY", "0", "a whole number >= 1"),
    ("FALCON_ANALYSIS_OFFLINE_CONCURRENCY", "two", "a whole number >= 1"),
    ("FALCON_ANALYSIS_MAX_ATTEMPTS", "-1", "a whole number >= 1"),
    ("FALCON_ANALYSIS_POLL_SECONDS", "0", "a number of seconds > 0"),
    ("FALCON_ANALYSIS_BACKOFF_SECONDS", "nan", "a number of seconds > 0"),
    ("FALCON_ANALYZER_MAX_RUNNING_PER_USER", "0", "a whole number >= 1"),
    ("FALCON_ANALYZER_MAX_RUNNING_PER_USER", "half", "a whole number >= 1"),
])
def test_a_bad_value_is_refused_naming_the_variable(name, value, what):
    result = load(**{name: value})
    assert result.returncode != 0
    assert f"{name} must be {what}; got {value!r}." in result.stderr


def test_good_values_are_read():
    result = load(FALCON_ANALYSIS_ONLINE_CONCURRENCY="3", FALCON_ANALYSIS_POLL_SECONDS="0.5")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{'offline': 2, 'online': 3} 0.5"


def test_the_per_user_cap_defaults_to_half_of_each_queues_slots():
    from controllers.analyzer.controller import AnalyzerConfig

    config = AnalyzerConfig(result_root="file:///r", limits={"offline": 3, "online": 8})
    assert config.per_user_limits() == {"offline": 2, "online": 4}
    config = AnalyzerConfig(result_root="file:///r", limits={"offline": 3, "online": 8},
                            max_running_per_user=1)
    assert config.per_user_limits() == {"offline": 1, "online": 1}


@pytest.mark.parametrize("env, message", [
    ({"FALCON_LOCAL_MAX_REPLICAS": "0"},
     "FALCON_LOCAL_MAX_REPLICAS must be a whole number >= 1 (replicas); got '0'."),
    ({"FALCON_LOCAL_MAX_REPLICAS_PER_USER": "many"},
     "FALCON_LOCAL_MAX_REPLICAS_PER_USER must be a whole number >= 1 (replicas); got 'many'."),
    ({"FALCON_LOCAL_MAX_REPLICAS": "4", "FALCON_LOCAL_MAX_REPLICAS_PER_USER": "5"},
     "FALCON_LOCAL_MAX_REPLICAS_PER_USER (5) must be at most FALCON_LOCAL_MAX_REPLICAS (4)"),
])
def test_bad_local_replica_limits_are_refused_naming_the_variable(env, message):
    result = load(**env)
    assert result.returncode != 0 and message in result.stderr


def test_local_replica_limits_default_to_the_cpus_and_half_of_them():
    code = READ_SETTINGS + ("print(s.FALCON_LOCAL_MAX_REPLICAS, "
                            "s.FALCON_LOCAL_MAX_REPLICAS_PER_USER)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FALCON_LOCAL_MAX_")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, env=env, timeout=60)
    machine = max(8, os.cpu_count() or 1)
    assert result.stdout.split() == [str(machine), str(machine // 2)], result.stderr
