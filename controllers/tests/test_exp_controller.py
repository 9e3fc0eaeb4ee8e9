"""The exp controller over the real gRPC API: every rule (docs/architecture.md, State machines),
re-entrancy, call count, fresh reads (cluster-behaviours.md#cb-17).

State is set up through the service functions (guarded transitions), the controller talks to an
in-process API server over a real socket with `GrpcFalconAPI`, and every assertion reads the
database the server wrote.
"""
from __future__ import annotations

import logging
from collections import Counter

import grpc
import pytest

from accounts.tests.factories import UserFactory
from artifacts.models import Artifact
from artifacts.store import local_path, store_for
from controllers.contract import ListFilter
from controllers.exp_controller import ExpController
from controllers.grpc_client import GrpcFalconAPI
from experiments.models import Experiment
from experiments.services import exp_abort, exp_update_status
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import (  # noqa: F401  (fixtures)
    INTERNAL_TOKEN, channel_to, falcon_api, grpc_server, running_server,
)
from jobs.models import Job
from jobs.services import job_update_status

pytestmark = pytest.mark.django_db(transaction=True)

WRITES = ("update_exp_status", "update_job_status", "update_artifact_status")


def has_files(url: str) -> bool:
    """The production `has_files` (runcontroller's): ask the artifact store."""
    return store_for(url).has_files(url)


class SimulatedCrash(BaseException):
    """The controller process dies here (a BaseException: no handler in a tick catches it)."""


class RecordingAPI:
    """A `FalconAPI` that delegates to the real client, records every call, and can crash.

    Args:
        inner: the real `GrpcFalconAPI`.
        crash_after: raise `SimulatedCrash` instead of sending write number `crash_after + 1`
            (None: never crash).
        before_write: called with `(method name, kwargs)` just before each write is sent.
    """

    def __init__(self, inner, crash_after: int | None = None, before_write=None):
        self.inner = inner
        self.crash_after = crash_after
        self.before_write = before_write
        self.lists: list[str] = []
        self.writes: list[tuple[str, dict]] = []

    def list_exps(self, flt: ListFilter):
        self.lists.append("list_exps")
        return self.inner.list_exps(flt)

    def list_jobs(self, flt: ListFilter):
        self.lists.append("list_jobs")
        return self.inner.list_jobs(flt)

    def list_artifacts(self, flt: ListFilter):
        self.lists.append("list_artifacts")
        return self.inner.list_artifacts(flt)

    def _write(self, method: str, **kwargs):
        if self.crash_after is not None and len(self.writes) >= self.crash_after:
            raise SimulatedCrash(f"crash before write {len(self.writes) + 1}: {method} {kwargs}")
        if self.before_write is not None:
            self.before_write(method, kwargs)
        self.writes.append((method, kwargs))
        return getattr(self.inner, method)(**kwargs)

    def update_exp_status(self, **kwargs):
        return self._write("update_exp_status", **kwargs)

    def update_job_status(self, **kwargs):
        return self._write("update_job_status", **kwargs)

    def update_artifact_status(self, **kwargs):
        return self._write("update_artifact_status", **kwargs)


def controller(api) -> ExpController:
    return ExpController(api, has_files=has_files)


# -- set-up through the services --------------------------------------------------------------

def walk(job: Job, *statuses: str, reason: str | None = None, message: str | None = None):
    """Move a job through `statuses` with guarded transitions (as the resource manager does)."""
    for status in statuses:
        job_update_status(job_id=job.pk, status=status, reason=reason, message=message)


def write_result(exp: Experiment, role: str = "main") -> None:
    """Write a file where the role's tasks write (`FALCON_ARTIFACT_PATH`)."""
    folder = local_path(exp.artifact_path) / role
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text('{"p50_ms": 12}\n')


def job_of(exp: Experiment, role: str) -> Job:
    return Job.objects.get(experiment_id=exp.pk, role=role)


def fresh(exp: Experiment) -> Experiment:
    return Experiment.objects.get(pk=exp.pk)


def artifact_of(exp: Experiment) -> Artifact:
    return Artifact.objects.get(experiment_id=exp.pk)


def succeeded_with_files(user, name="ok") -> Experiment:
    exp = make_exp(creator=user, name=name, roles=("main", "worker"))
    exp_update_status(exp_id=exp.pk, status="Running", message="2 Running")
    for role in ("main", "worker"):
        walk(job_of(exp, role), "Running", "Succeeded", reason="Completed")
    write_result(exp)
    return exp


def succeeded_without_files(user, name="empty") -> Experiment:
    exp = make_exp(creator=user, name=name)
    walk(job_of(exp, "main"), "Running", "Succeeded", reason="Completed")
    return exp


def one_role_failed(user, name="failed") -> Experiment:
    exp = make_exp(creator=user, name=name, roles=("main", "worker"))
    exp_update_status(exp_id=exp.pk, status="Running")
    walk(job_of(exp, "main"), "Running")
    walk(job_of(exp, "worker"), "Running", "Failed", reason="ReplicaFailed",
         message="Replica 0 of 1 exited with code 3. Last lines of its stderr:\nboom")
    return exp


def aborted_by_user(user, name="aborted") -> Experiment:
    exp = make_exp(creator=user, name=name, roles=("main", "worker"))
    walk(job_of(exp, "main"), "Running")
    exp_abort(exp_id=exp.pk, actor=exp.creator)
    for role in ("main", "worker"):
        walk(job_of(exp, role), "Aborted", reason="Aborted", message="cluster job deleted")
    return exp


def job_aborted_alone(user, name="lost") -> Experiment:
    """A job aborted without an abort of its experiment (e.g. by an operator over gRPC)."""
    exp = make_exp(creator=user, name=name)
    exp_update_status(exp_id=exp.pk, status="Running")
    walk(job_of(exp, "main"), "Running", "Aborting", reason="OperatorAbort",
         message="stopped by an operator")
    walk(job_of(exp, "main"), "Aborted", reason="Aborted", message="cluster job deleted")
    return exp


def running_and_pending(user, name="mixed") -> Experiment:
    exp = make_exp(creator=user, name=name, roles=("main", "worker"))
    walk(job_of(exp, "main"), "Running")
    return exp


def all_pending(user, name="queued") -> Experiment:
    return make_exp(creator=user, name=name, roles=("main", "worker"))


SCENARIOS = {
    "succeeded_with_files": succeeded_with_files,
    "succeeded_without_files": succeeded_without_files,
    "one_role_failed": one_role_failed,
    "aborted_by_user": aborted_by_user,
    "job_aborted_alone": job_aborted_alone,
    "running_and_pending": running_and_pending,
    "all_pending": all_pending,
}


def build_all(user) -> dict[str, Experiment]:
    return {key: build(user) for key, build in SCENARIOS.items()}


def snapshot(exps: dict[str, Experiment]) -> dict:
    """Everything the controller may write, per scenario, independent of row ids."""
    out = {}
    for key, exp in exps.items():
        exp = fresh(exp)

        def norm(text: str) -> str:
            return text.replace(exp.artifact_path, "<artifact_path>")

        art = artifact_of(exp)
        out[key] = {
            "exp": (exp.status, exp.reason, norm(exp.message), exp.started_at is not None,
                    exp.finished_at is not None, exp.aborting_at is not None,
                    exp.aborted_at is not None),
            "artifact": (art.status, art.reason, norm(art.message), art.finished_at is not None),
            "jobs": {job.role: (job.status, job.reason, job.message, job.aborting_at is not None,
                                job.aborted_at is not None)
                     for job in Job.objects.filter(experiment_id=exp.pk)},
        }
    return out


# -- 1. every rule that moves an experiment, its artifact and its jobs ------------------------

def test_all_jobs_succeeded_with_files_succeeds_artifact_then_exp(falcon_api):
    exp = succeeded_with_files(UserFactory())
    api = RecordingAPI(falcon_api)
    stats = controller(api).tick()

    assert [m for m, _ in api.writes] == ["update_artifact_status", "update_exp_status"]
    assert (stats.applied, stats.failed) == (2, 0)
    art, exp = artifact_of(exp), fresh(exp)
    assert (art.status, art.reason) == ("Succeeded", "Succeeded") and art.finished_at
    assert (exp.status, exp.reason) == ("Succeeded", "Succeeded") and exp.finished_at
    assert exp.message == "all 2 role(s) succeeded"


def test_all_jobs_succeeded_without_files_fails_both_saying_so(falcon_api):
    exp = succeeded_without_files(UserFactory())
    controller(falcon_api).tick()

    art, exp = artifact_of(exp), fresh(exp)
    assert (art.status, exp.status) == ("Failed", "Failed")
    assert art.reason == exp.reason == "ArtifactEmpty"
    for text in (art.message, exp.message):
        assert f"no file under {exp.artifact_path}" in text and "FALCON_ARTIFACT_PATH" in text
    assert exp.finished_at and art.finished_at


def test_one_failed_role_aborts_the_other_and_fails_artifact_and_exp(falcon_api):
    exp = one_role_failed(UserFactory())
    api = RecordingAPI(falcon_api)
    controller(api).tick()

    assert [m for m, _ in api.writes] == ["update_job_status", "update_artifact_status",
                                          "update_exp_status"]
    main, worker = job_of(exp, "main"), job_of(exp, "worker")
    assert (main.status, main.reason) == ("Aborting", "SiblingFailed") and main.aborting_at
    assert "role worker failed" in main.message
    assert worker.status == "Failed"
    art, exp = artifact_of(exp), fresh(exp)
    assert (art.status, art.reason) == ("Failed", "ReplicaFailed")
    assert (exp.status, exp.reason) == ("Failed", "ReplicaFailed")
    assert exp.message.startswith("role worker failed: Replica 0 of 1 exited with code 3")
    assert "boom" in exp.message


def test_aborted_exp_with_aborted_jobs_fails_artifact_and_aborts_exp(falcon_api):
    exp = aborted_by_user(UserFactory())
    assert fresh(exp).status == "Aborting" and fresh(exp).aborted_at is None
    controller(falcon_api).tick()

    art, exp = artifact_of(exp), fresh(exp)
    assert (art.status, art.reason) == ("Failed", "Aborted") and art.message
    assert (exp.status, exp.reason) == ("Aborted", "Aborted")
    assert exp.aborted_at is not None and exp.aborting_at <= exp.aborted_at
    assert exp.message == "aborted (2 Aborted)"


def test_aborting_exp_waits_until_every_job_is_terminal(falcon_api):
    exp = make_exp(creator=UserFactory(), roles=("main", "worker"))
    exp_abort(exp_id=exp.pk, actor=exp.creator)
    walk(job_of(exp, "main"), "Aborted", reason="Aborted")
    api = RecordingAPI(falcon_api)
    controller(api).tick()
    assert api.writes == [] and fresh(exp).status == "Aborting"
    assert artifact_of(exp).status == "Created"

    walk(job_of(exp, "worker"), "Aborted", reason="Aborted")
    controller(falcon_api).tick()
    assert fresh(exp).status == "Aborted" and artifact_of(exp).status == "Failed"


def test_job_aborted_without_exp_abort_aborts_the_exp(falcon_api):
    exp = job_aborted_alone(UserFactory())
    controller(falcon_api).tick()

    art, exp = artifact_of(exp), fresh(exp)
    assert (art.status, art.reason) == ("Failed", "JobAborted")
    assert (exp.status, exp.reason) == ("Aborted", "JobAborted")
    assert exp.aborting_at and exp.aborted_at
    assert exp.message == "role main was aborted: cluster job deleted"


def test_pending_and_running_map_through_job_status_to_exp_status(falcon_api):
    user = UserFactory()
    queued, mixed = all_pending(user), running_and_pending(user)
    api = RecordingAPI(falcon_api)
    controller(api).tick()

    queued, mixed = fresh(queued), fresh(mixed)
    assert (queued.status, queued.message) == ("Created", "2 Pending")
    # One role runs, the other still waits for the cluster: not running yet.
    assert (mixed.status, mixed.message) == ("Created", "1 Pending, 1 Running")
    assert mixed.started_at is None and queued.started_at is None
    assert artifact_of(mixed).status == artifact_of(queued).status == "Created"

    walk(job_of(queued, "main"), "Running")
    walk(job_of(mixed, "worker"), "Running")
    controller(falcon_api).tick()
    assert (fresh(queued).status, fresh(queued).message) == ("Created", "1 Pending, 1 Running")
    assert (fresh(mixed).status, fresh(mixed).message) == ("Running", "2 Running")
    assert fresh(mixed).started_at is not None


def test_three_roles_stay_created_until_the_third_runs(falcon_api):
    """Two roles with every pod ready and a third Unschedulable: the experiment is not
    running (jobStatus2expStatus over all of its jobs)."""
    exp = make_exp(creator=UserFactory(), name="three", roles=("ps", "worker", "eval"))
    walk(job_of(exp, "ps"), "Running")
    walk(job_of(exp, "worker"), "Running")
    controller(falcon_api).tick()
    assert (fresh(exp).status, fresh(exp).message) == ("Created", "1 Pending, 2 Running")
    walk(job_of(exp, "eval"), "Running")
    controller(falcon_api).tick()
    assert fresh(exp).status == "Running"


def test_failed_updates_are_logged_with_exp_and_job_and_the_next_exp_goes_on(falcon_api,
                                                                           caplog):
    user = UserFactory()
    # One role done, one running: the controller moves it to Running; an abort lands first.
    # (An abort after every role succeeded is refused instead: decisions.md#dec-abort-finished.)
    raced = make_exp(creator=user, name="raced", roles=("main", "worker"))
    walk(job_of(raced, "main"), "Running", "Succeeded", reason="Completed")
    walk(job_of(raced, "worker"), "Running")
    sibling = one_role_failed(user, name="sibling")
    later = running_and_pending(user, name="later")
    main = job_of(sibling, "main")

    def concurrent_change(method, kwargs):
        # Another writer gets there between the controller's read and its write.
        if method == "update_exp_status" and kwargs["exp_id"] == raced.pk:
            exp_abort(exp_id=raced.pk, actor=raced.creator)
        if method == "update_job_status" and kwargs["job_id"] == main.pk:
            walk(main, "Succeeded", reason="Completed")

    api = RecordingAPI(falcon_api, before_write=concurrent_change)
    with caplog.at_level(logging.WARNING, logger="falcon.controllers.exp"):
        stats = controller(api).tick()

    assert stats.failed == 2
    lines = [r.getMessage() for r in caplog.records if r.name == "falcon.controllers.exp"]
    assert len(lines) == 2, lines
    raced_line = next(line for line in lines if "raced" in line)
    assert f"id {raced.pk}" in raced_line and "-> Running" in raced_line
    for job in Job.objects.filter(experiment_id=raced.pk):
        assert str(job.pk) in raced_line.split(":")[0], raced_line  # the job ids, before the error
    sibling_line = next(line for line in lines if "sibling" in line)
    assert f"id {sibling.pk}" in sibling_line and f"job {main.pk}" in sibling_line


    # The failed job update did not stop its experiment; the next experiment was processed.
    assert fresh(sibling).status == "Failed" and artifact_of(sibling).status == "Failed"
    assert job_of(sibling, "main").status == "Succeeded"
    assert (fresh(later).status, fresh(later).message) == ("Created", "1 Pending, 1 Running")
    # The raced experiment stays as the abort left it, and the next tick finishes it.
    assert fresh(raced).status == "Aborting"
    walk(job_of(raced, "worker"), "Aborted", reason="Aborted")
    controller(falcon_api).tick()
    assert fresh(raced).status == "Aborted" and artifact_of(raced).status == "Failed"


def test_lines_about_an_experiment_carry_its_id_as_a_field(falcon_api, caplog):
    """The structured logs' `exp_id` field (core.observability.logs): the controller logs inside the
    experiment's log_context, so a JSON line can be found by id, not only by its text."""
    from core.observability.logs import ContextFilter

    user = UserFactory()
    raced = make_exp(creator=user, name="raced", roles=("main",))
    walk(job_of(raced, "main"), "Running")

    def concurrent_change(method, kwargs):
        if method == "update_exp_status" and kwargs["exp_id"] == raced.pk:
            exp_abort(exp_id=raced.pk, actor=raced.creator)

    caplog.handler.addFilter(ContextFilter())
    with caplog.at_level(logging.WARNING, logger="falcon.controllers.exp"):
        controller(RecordingAPI(falcon_api, before_write=concurrent_change)).tick()
    [record] = [r for r in caplog.records if r.name == "falcon.controllers.exp"]
    assert record.exp_id == raced.pk and f"exp_id={raced.pk}" in record.context


# -- 2. re-entrancy: a crash after any write, then fresh ticks ----------------------------------

def test_tick_is_reentrant_after_a_crash_at_every_write(falcon_api):
    user = UserFactory()
    reference_exps = build_all(user)
    api = RecordingAPI(falcon_api)
    controller(api).tick()
    needed = len(api.writes)
    reference = snapshot(reference_exps)
    again = RecordingAPI(falcon_api)
    controller(again).tick()
    assert again.writes == [], "an uninterrupted tick did not converge"
    assert snapshot(reference_exps) == reference
    # The reference is what the rules say (checked one by one above); spot-check a few.
    assert reference["succeeded_with_files"]["exp"][0] == "Succeeded"
    assert reference["job_aborted_alone"]["exp"][:2] == ("Aborted", "JobAborted")
    assert reference["one_role_failed"]["jobs"]["main"][0] == "Aborting"
    assert needed >= 12

    for crash_after in range(needed + 1):
        exps = build_all(user)
        crashing = RecordingAPI(falcon_api, crash_after=crash_after)
        if crash_after < needed:
            with pytest.raises(SimulatedCrash):
                controller(crashing).tick()
        else:
            controller(crashing).tick()
        assert len(crashing.writes) == crash_after

        controller(falcon_api).tick()  # a restarted controller: a fresh object, fresh reads
        controller(falcon_api).tick()
        assert snapshot(exps) == reference, f"crash after {crash_after} write(s)"
        converged = RecordingAPI(falcon_api)
        controller(converged).tick()
        assert converged.writes == [], f"crash after {crash_after}: {converged.writes}"


# -- 3. list calls do not grow with the number of experiments ---------------------------------

class CountingInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Count the RPCs a client sends, by method name."""

    def __init__(self):
        self.calls: Counter[str] = Counter()
        self.order: list[str] = []  # the methods in the order they were called

    def intercept_unary_unary(self, continuation, client_call_details, request):
        method = client_call_details.method.rsplit("/", 1)[-1]
        self.calls[method] += 1
        self.order.append(method)
        return continuation(client_call_details, request)


@pytest.mark.parametrize("count,page,reads", [(5, None, 1), (50, None, 1), (5, 2, 3)])
def test_one_tick_makes_one_read_call_per_page_whatever_the_number_of_jobs(
        grpc_server, monkeypatch, count, page, reads):
    """ListExpStates returns each experiment with all its jobs and its artifact: one call per
    page of experiments (5,000 by default), and one UpdateExpStatuses per page with changes
    (at most 1,000 items each), sent before the next page is read: the controller holds one
    page of the open experiments at a time."""
    if page is not None:
        monkeypatch.setattr("controllers.grpc_client.STATES_PAGE_SIZE", page)
    user = UserFactory()
    exps = [make_exp(creator=user, name=f"e{i}", roles=("main", "worker")) for i in range(count)]
    for exp in exps[::2]:
        walk(job_of(exp, "main"), "Running")
        walk(job_of(exp, "worker"), "Running")
    counter = CountingInterceptor()
    channel = grpc.intercept_channel(channel_to(grpc_server), counter)
    api = GrpcFalconAPI(f"127.0.0.1:{grpc_server.port}", INTERNAL_TOKEN, channel=channel)
    try:
        stats = controller(api).tick()
    finally:
        channel.close()

    assert stats.exps == count and stats.jobs == 2 * count
    assert {m: n for m, n in counter.calls.items() if not m.startswith("Update")} == {
        "ListExpStates": reads}
    # Every page's status/summary writes go in one batch call, whatever their number, and
    # before the next page is read (each page here has an experiment to update).
    assert counter.order == ["ListExpStates", "UpdateExpStatuses"] * reads
    assert "UpdateExpStatus" not in counter.calls
    assert fresh(exps[0]).status == "Running" and fresh(exps[1]).message == "2 Pending"


def test_a_refused_item_of_the_batch_is_logged_and_the_others_apply(grpc_server, caplog):
    user = UserFactory()
    raced = make_exp(creator=user, name="raced", roles=("main",))
    other = make_exp(creator=user, name="other", roles=("main",))
    for exp in (raced, other):
        walk(job_of(exp, "main"), "Running")
    api = GrpcFalconAPI(f"127.0.0.1:{grpc_server.port}", INTERNAL_TOKEN)
    original = api.update_exp_statuses

    def abort_first(updates):
        # Another writer aborts one experiment between the controller's read and its write.
        exp_abort(exp_id=raced.pk, actor=user)
        return original(updates)

    api.update_exp_statuses = abort_first
    try:
        with caplog.at_level(logging.WARNING, logger="falcon.controllers.exp"):
            stats = controller(api).tick()
    finally:
        api.close()
    assert stats.failed == 1 and stats.applied == 1
    assert fresh(raced).status == "Aborting" and fresh(other).status == "Running"
    line = next(r.getMessage() for r in caplog.records if "raced" in r.getMessage())
    assert f"id {raced.pk}" in line and "-> Running failed" in line and "Aborting" in line


# -- 5. every tick reads fresh data (cluster-behaviours.md#cb-17) ------------------------------

def test_each_tick_sees_rows_changed_by_another_connection(settings):
    settings.FALCON_INTERNAL_TOKEN = INTERNAL_TOKEN
    exp = make_exp(creator=UserFactory())
    # One worker thread: every call of every tick runs on the same server thread and its
    # database connection, the setting in which a held snapshot would show.
    with running_server(max_workers=1) as server, \
            GrpcFalconAPI(f"127.0.0.1:{server.port}", INTERNAL_TOKEN) as api:
        ctl = controller(api)
        ctl.tick()
        assert (fresh(exp).status, fresh(exp).message) == ("Created", "1 Pending")

        walk(job_of(exp, "main"), "Running")  # the test's own connection, committed
        ctl.tick()
        assert (fresh(exp).status, fresh(exp).message) == ("Running", "1 Running")

        walk(job_of(exp, "main"), "Succeeded", reason="Completed")
        write_result(exp)
        ctl.tick()
        assert fresh(exp).status == "Succeeded" and artifact_of(exp).status == "Succeeded"


def test_a_batch_refused_as_a_whole_is_logged_and_the_loop_goes_on(falcon_api, caplog):
    from core.errors import ValidationFailed

    exp = make_exp(creator=UserFactory(), name="whole", roles=("main",))
    walk(job_of(exp, "main"), "Running")

    class RefusingBatch:
        def __getattr__(self, name):
            return getattr(falcon_api, name)

        def update_exp_statuses(self, updates):
            raise ValidationFailed({"items": ["refused"]})

    with caplog.at_level(logging.ERROR, logger="falcon.controllers.exp"):
        stats = controller(RefusingBatch()).tick()
    assert stats.failed == 1 and fresh(exp).status == "Created"
    assert f"exp ids {exp.pk}" in caplog.text and "ValidationFailed" in caplog.text
    controller(falcon_api).tick()
    assert fresh(exp).status == "Running"
