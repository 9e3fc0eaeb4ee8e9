"""`falcon exp wait` and `exp create --wait`: the status is moved by the service functions from
the test body (the controllers are not part of these tests), inside the CLI's injected sleep."""
from __future__ import annotations

import json

import pytest
import urllib3

from cli.exit_codes import ExitCode
from experiments.models import Experiment
from experiments.services import exp_update_status
from jobs.services import job_update_status

from .conftest import TASKS_YAML, one_line

pytestmark = pytest.mark.django_db(transaction=True)


class Script:
    """An injected `sleep`: each call applies the next step and advances a fake clock."""

    def __init__(self, steps):
        self.steps = list(steps)
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.steps:
            self.steps.pop(0)()

    def monotonic(self) -> float:
        return self.now


def _create(cli, files, name="wait-me"):
    result = cli("exp", "create", "--name", name, "--cluster", "c", "--type", "profiling",
                 "--role-to-task-spec", files(f"{name}.yaml", TASKS_YAML), "-o", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _run(exp_id, job_id):
    return lambda: (job_update_status(job_id=job_id, status="Running"),
                    exp_update_status(exp_id=exp_id, status="Running"))


def _end(exp_id, job_id, status, reason=None):
    return lambda: (job_update_status(job_id=job_id, status=status, reason=reason),
                    exp_update_status(exp_id=exp_id, status=status, reason=reason))


def test_wait_shows_each_change_and_exits_0_on_succeeded(logged_in, files):
    exp = _create(logged_in, files)
    exp_id, job_id = exp["id"], exp["jobs"][0]["id"]
    script = Script([lambda: None, _run(exp_id, job_id), _end(exp_id, job_id, "Succeeded")])
    logged_in.sleep, logged_in.monotonic = script.sleep, script.monotonic

    result = logged_in("exp", "wait", str(exp_id), "--interval", "5")
    assert result.exit_code == ExitCode.OK, result.output
    lines = result.stdout.splitlines()
    assert lines == [
        f"[0s] experiment {exp_id} Created (jobs main:Pending; artifact Created)",
        f"[10s] experiment {exp_id} Running (jobs main:Running; artifact Created)",
        f"[15s] experiment {exp_id} Succeeded (jobs main:Succeeded; artifact Created)",
        f"experiment {exp_id} Succeeded",
    ]
    assert script.slept == [5.0, 5.0, 5.0]


def test_wait_exits_6_when_the_experiment_failed(logged_in, files):
    exp = _create(logged_in, files)
    exp_id, job_id = exp["id"], exp["jobs"][0]["id"]
    script = Script([_end(exp_id, job_id, "Failed", reason="TaskFailed")])
    logged_in.sleep, logged_in.monotonic = script.sleep, script.monotonic

    result = logged_in("exp", "wait", str(exp_id), "-o", "json")
    assert result.exit_code == ExitCode.EXP_FAILED, result.output
    assert json.loads(result.stdout)["status"] == "Failed"
    assert "Failed" in result.stderr  # the progress goes to stderr with -o json
    assert result.stderr.splitlines()[-1] == \
        f"error: experiment {exp_id} ended Failed (TaskFailed)"


def test_wait_exits_6_when_the_experiment_was_aborted(logged_in, files):
    exp = _create(logged_in, files)
    exp_id = exp["id"]
    assert logged_in("exp", "abort", str(exp_id)).exit_code == 0
    script = Script([lambda: exp_update_status(exp_id=exp_id, status="Aborted")])
    logged_in.sleep, logged_in.monotonic = script.sleep, script.monotonic
    result = logged_in("exp", "wait", str(exp_id))
    assert result.exit_code == ExitCode.EXP_FAILED
    assert f"experiment {exp_id} ended Aborted" in result.stderr


def test_wait_gives_up_after_the_timeout(logged_in, files):
    exp_id = _create(logged_in, files)["id"]
    script = Script([])
    logged_in.sleep, logged_in.monotonic = script.sleep, script.monotonic
    result = logged_in("exp", "wait", str(exp_id), "--interval", "2", "--timeout", "5")
    assert result.exit_code == ExitCode.TIMEOUT
    assert one_line(result.stderr) == \
        f"error: gave up waiting for experiment {exp_id} after 5s; it is still Created"
    assert script.slept == [2.0, 2.0, 1.0]  # never sleeps past the deadline


def test_wait_yaml_output_is_only_the_final_experiment(logged_in, files):
    import yaml

    exp = _create(logged_in, files)
    script = Script([_end(exp["id"], exp["jobs"][0]["id"], "Succeeded")])
    logged_in.sleep, logged_in.monotonic = script.sleep, script.monotonic
    result = logged_in("exp", "wait", str(exp["id"]), "-o", "yaml")
    assert result.exit_code == 0, result.output
    final = yaml.safe_load(result.stdout)
    assert final["status"] == "Succeeded" and final["jobs"][0]["status"] == "Succeeded"


def test_create_wait_follows_the_new_experiment(logged_in, files):
    def finish():
        exp = Experiment.objects.get(name="and-wait")
        job = exp.jobs.get()
        _end(exp.pk, job.pk, "Succeeded")()

    script = Script([finish])
    logged_in.sleep, logged_in.monotonic = script.sleep, script.monotonic
    result = logged_in("exp", "create", "--name", "and-wait", "--cluster", "c", "--type",
                       "profiling", "--role-to-task-spec", files("t.yaml", TASKS_YAML), "--wait")
    assert result.exit_code == 0, result.output
    exp_id = Experiment.objects.get(name="and-wait").pk
    assert result.stdout.splitlines()[0] == f"created experiment {exp_id} (and-wait)"
    assert result.stdout.splitlines()[-1] == f"experiment {exp_id} Succeeded"


def test_wait_stops_when_the_session_expires_meanwhile(logged_in, files, token_for):
    from cli.token_cache import CredentialStore, Session

    exp_id = _create(logged_in, files)["id"]
    store = CredentialStore(logged_in.config_dir)

    def expire():
        old = store.get(logged_in.server)
        store.put(Session(server=old.server, token=token_for("alice@example.com", -60),
                          email=old.email, expires_at=old.expires_at, method="local",
                          obtained_at=0))

    script = Script([expire])
    logged_in.sleep, logged_in.monotonic = script.sleep, script.monotonic
    logged_in.transport.requests.clear()
    result = logged_in("exp", "wait", str(exp_id))
    assert result.exit_code == ExitCode.AUTH
    assert "session expired at" in result.stderr
    assert len(logged_in.transport.requests) == 1  # the first poll only


def test_ctrl_c_stops_waiting_not_the_experiment(logged_in, files):
    exp_id = _create(logged_in, files)["id"]

    def interrupted(seconds):
        raise KeyboardInterrupt

    logged_in.sleep = interrupted
    result = logged_in("exp", "wait", str(exp_id))
    assert result.exit_code == ExitCode.INTERRUPTED == 130
    assert one_line(result.stderr) == (
        f"error: stopped waiting; experiment {exp_id} is still Created (`falcon exp wait "
        f"{exp_id}` resumes, `falcon exp abort {exp_id}` stops it)")
    assert Experiment.objects.get(pk=exp_id).status == "Created"


class Flaky(urllib3.PoolManager):
    """A pool to the live server that refuses connections while `down` > 0."""

    def __init__(self):
        super().__init__(retries=False)
        self.down = 0

    def urlopen(self, method, url, redirect=True, **kw):
        if self.down:
            self.down -= 1
            raise urllib3.exceptions.NewConnectionError(
                None, "Failed to establish a new connection: [Errno 111] Connection refused"
            ) from ConnectionRefusedError(111, "Connection refused")
        return super().urlopen(method, url, redirect=redirect, **kw)


def test_wait_rides_out_a_server_restart(logged_in, files):
    exp = _create(logged_in, files)
    flaky = Flaky()
    logged_in.transport = flaky

    def restart():
        flaky.down = 2

    script = Script([restart, lambda: None, _end(exp["id"], exp["jobs"][0]["id"], "Succeeded")])
    logged_in.sleep, logged_in.monotonic = script.sleep, script.monotonic
    result = logged_in("exp", "wait", str(exp["id"]), "--interval", "5")
    assert result.exit_code == 0, result.output
    assert flaky.down == 0


def test_wait_gives_up_when_the_server_stays_down(logged_in, files):
    exp = _create(logged_in, files)
    flaky = Flaky()
    logged_in.transport = flaky

    def gone():
        flaky.down = 10**6

    script = Script([gone])
    logged_in.sleep, logged_in.monotonic = script.sleep, script.monotonic
    result = logged_in("exp", "wait", str(exp["id"]), "--interval", "30")
    assert result.exit_code == ExitCode.UNAVAILABLE
    assert script.now > 60  # kept trying for the grace period first
