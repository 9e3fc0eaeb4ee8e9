"""End to end: the whole Data Analyzer against its real pieces (docs/analyzer.md).

- the API server's gRPC (`falcon_site.grpc.server.build_server` on port 0, in this process, over
  the test database), with AnalysisRecordService;
- the API server's HTTP API (Django's `live_server`), which calls AnalyzerService;
- a real `manage.py runcontroller analyzer --no-leader-election` subprocess: its local backend
  starts real runners under a temporary state folder, its records go through the API server's
  gRPC only (its DATABASE_URL names a SQLite file that must never be created);
- the real plugins of `plugins/catalog.yaml` and `plugins/bin/`.

The test acts as a user over HTTP (a local-issuer token) and as the system around it (finishing
experiments in the database, stopping or killing the controller), then checks the records, the
store and the processes. Every wait has a deadline.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from core.testing import wait_until as poll_until
import requests
from grpc_health.v1 import health_pb2, health_pb2_grpc

from analysis import analyzer_client
from analysis.models import AnalysisRecord
from analysis.tests.factories import finish_exp
from artifacts.store import local_path
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import INTERNAL_TOKEN, running_server

ROOT = Path(__file__).resolve().parent.parent
ANALYZER_TOKEN = "e2e-analyzer-token-0123456789abcdef0123456789"
USER = "alice@example.com"
TERMINAL = ("succeeded", "failed", "cancelled", "skipped")

pytestmark = pytest.mark.django_db(transaction=True)


# -- helpers ----------------------------------------------------------------------------------

def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def until(predicate: Callable[[], Any], timeout: float = 30.0, every: float = 0.05,
          what: str = "the condition", tick: Callable[[], None] | None = None) -> Any:
    """Call `tick` (if any) and poll `predicate` until it returns a true value, which is
    returned; AssertionError naming `what` after `timeout` seconds."""
    return poll_until(predicate, timeout=max(timeout, 60.0), every=every, what=what, tick=tick)


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie awaiting its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def runner_pids(spec_path: Path) -> list[int]:
    """Live runner processes started with `--spec <spec_path>` (one run of one analysis)."""
    out = []
    needle = f"controllers.analyzer.runner --spec {spec_path}"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if needle in cmd and alive(int(entry)):
            out.append(int(entry))
    return out


class Controller:
    """A `manage.py runcontroller analyzer --no-leader-election` subprocess.

    Args:
        tmp_path: holds its state folder, its log and the SQLite file it must never open.
        grpc_port: the in-process API server's gRPC port (FALCON_GRPC_TARGET).
        addr: where it serves AnalyzerService (FALCON_ANALYZER_ADDR).
        env: extra environment (e.g. FALCON_ANALYSIS_ONLINE_CONCURRENCY).
        results: the analyses' store (FALCON_ANALYSIS_ROOT), the API server's too.
    """

    def __init__(self, tmp_path: Path, grpc_port: int, addr: str, env: dict[str, str],
                 results: Path):
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.addr = addr
        self.state_dir = tmp_path / "analyzer-state"
        self.log_path = tmp_path / "controller.log"
        self.no_db = tmp_path / "controller-never-opens.sqlite3"
        self.env = dict(
            os.environ,
            DATABASE_URL=f"sqlite:///{self.no_db}",
            FALCON_GRPC_TARGET=f"127.0.0.1:{grpc_port}",
            FALCON_ANALYZER_ADDR=addr,
            FALCON_INTERNAL_TOKEN=INTERNAL_TOKEN,
            FALCON_ANALYZER_TOKEN=ANALYZER_TOKEN,
            FALCON_ANALYSIS_ROOT=results.as_uri(),
            FALCON_ANALYZER_STATE_DIR=str(self.state_dir),
            FALCON_ANALYSIS_POLL_SECONDS="0.2",
            FALCON_ANALYSIS_BACKOFF_SECONDS="0.2",
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
            **env)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the process and wait until AnalyzerService reports SERVING."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runcontroller", "analyzer",
                 "--no-leader-election", "--addr", self.addr, "--interval", "0.2"],
                cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT)
        with grpc.insecure_channel(self.addr) as channel:
            stub = health_pb2_grpc.HealthStub(channel)

            def serving() -> bool:
                assert self.proc.poll() is None, f"the controller exited:\n{self.log()}"
                try:
                    return stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == \
                        health_pb2.HealthCheckResponse.SERVING
                except grpc.RpcError:
                    return False

            until(serving, timeout=60, every=0.1, what="the analyzer controller serving")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Send `sig` (SIGTERM: a clean stop; SIGKILL: a crash) and reap the process."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def log(self) -> str:
        """What the process printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def run_folder(self, analysis_id: str) -> Path:
        """The local backend's folder of the run of `analysis_id`."""
        return self.state_dir / f"analysis-{analysis_id}"


class Http:
    """The HTTP API as the user `USER` sees it (a requests session with a local-issuer token)."""

    def __init__(self, base: str, token: str):
        self.base = base
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def get(self, path: str, **params) -> requests.Response:
        """GET `path` (bounded by a client timeout)."""
        return self.session.get(self.base + path, params=params, timeout=30)

    def post(self, path: str, body: dict | None = None) -> requests.Response:
        """POST `body` as JSON to `path` (bounded by a client timeout)."""
        return self.session.post(self.base + path, json=body, timeout=30)

    def analysis(self, analysis_id: str) -> dict:
        """GET /api/v1/analyses/{id}, asserted 200."""
        resp = self.get(f"/api/v1/analyses/{analysis_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()

    def create(self, **body) -> dict:
        """POST /api/v1/analyses, asserted 201."""
        resp = self.post("/api/v1/analyses", body)
        assert resp.status_code == 201, resp.text
        return resp.json()

    def wait_status(self, analysis_id: str, statuses: tuple[str, ...] = TERMINAL,
                    timeout: float = 30.0) -> dict:
        """Poll GET until the analysis is in one of `statuses`; return it."""
        return until(lambda: (a := self.analysis(analysis_id))["status"] in statuses and a,
                     timeout=timeout, every=0.1,
                     what=f"analysis {analysis_id} in {'/'.join(statuses)}")


class Platform:
    """What one test works with: `http` (the user's API), `controller`, `tmp` (the test's own
    folder) and `user`."""

    def __init__(self, http: Http, controller: Controller, tmp: Path, user):
        self.http = http
        self.controller = controller
        self.tmp = tmp
        self.user = user


def finished_exp(user, tmp: Path, *, exp_type: str, files: dict[str, str],
                 name: str = "exp"):
    """An experiment of `exp_type` by `user`, Succeeded with a Succeeded artifact whose `main`
    job folder holds `files` (name -> text), as a finished job leaves it."""
    exp = make_exp(creator=user, name=name, exp_type=exp_type)
    folder = local_path(exp.artifact_path) / "main"
    folder.mkdir(parents=True, exist_ok=True)
    for file_name, text in files.items():
        (folder / file_name).write_text(text)
    return finish_exp(exp)


class ApiServer:
    """The module's API server (gRPC in process, HTTP on `live_server`) and the controllers it
    has started: at most one runs at a time, for two would both act on the same records.

    `shared` is the controller with the default settings, kept from one test to the next while
    it runs untouched; a test that needs other settings, or stops or kills its controller,
    gets one of its own (`own`), after the shared one is stopped.
    """

    def __init__(self, tmp: Path, grpc_port: int, base_url: str):
        self.tmp, self.grpc_port, self.base_url = tmp, grpc_port, base_url
        self.results = tmp / "results"
        self.shared: Controller | None = None
        self.started = 0

    def new_controller(self, env: dict[str, str]) -> Controller:
        self.started += 1
        controller = Controller(self.tmp / f"controller-{self.started}", self.grpc_port,
                                f"127.0.0.1:{free_port()}", env, self.results)
        controller.start()
        return controller

    def shared_controller(self) -> Controller:
        if self.shared is None or self.shared.proc.poll() is not None:
            self.drop_shared()
            self.shared = self.new_controller({})
        return self.shared

    def drop_shared(self) -> None:
        if self.shared is not None:
            shared, self.shared = self.shared, None
            retire(shared)


def retire(controller: Controller) -> None:
    """Stop `controller` and what it left running; it reached its records through gRPC only."""
    controller.stop()
    _stop_leftover_runs(controller.state_dir)
    assert not controller.no_db.exists(), "the controller opened a database"


@pytest.fixture(scope="module")
def api_server(django_db_setup, django_db_blocker, live_server, tmp_path_factory):
    """The API server of the module, its settings and its controllers (`ApiServer`).

    Its gRPC threads and the shared controller's polls reach the database between tests too,
    so the module keeps the database unblocked; each test still flushes it at its end
    (`transaction=True`), after `platform` has seen the shared controller idle.
    """
    from django.test import override_settings

    tmp = tmp_path_factory.mktemp("analyzer-e2e")
    overrides = override_settings(
        FALCON_INTERNAL_TOKEN=INTERNAL_TOKEN, FALCON_ANALYZER_TOKEN=ANALYZER_TOKEN,
        FALCON_ANALYSIS_ROOT=(tmp / "results").as_uri())
    overrides.enable()
    try:
        with django_db_blocker.unblock(), running_server(max_workers=8) as server:
            api = ApiServer(tmp, server.port, live_server.url)
            try:
                yield api
            finally:
                api.drop_shared()
                analyzer_client.close()
    finally:
        overrides.disable()


def _user_platform(api: ApiServer, controller: Controller, settings, tmp_path: Path,
                   token_for) -> Platform:
    """The platform as this test's user sees it, calling `controller`."""
    from accounts.models import User

    settings.FALCON_ANALYZER_TARGET = controller.addr
    analyzer_client.close()
    http = Http(api.base_url, token_for(USER))
    assert http.get("/api/v1/analyses").status_code == 200  # registers the user
    return Platform(http, controller, tmp_path, User.objects.get(email=USER))


def _busy(controller: Controller) -> list[str]:
    """What `controller` still has in flight: records not terminal, offline analyses owed (not
    created yet), run folders left; empty when it is idle."""
    from analysis.selectors import exps_awaiting_analysis
    from plugins.catalog import load_catalog

    busy = [f"analysis {a} {s}" for a, s in AnalysisRecord.objects.exclude(
        status__in=TERMINAL).values_list("analysis_id", "status")]
    busy += [f"exp {t.experiment.pk} owes {t.plugin_name}" for t in exps_awaiting_analysis(
        limit=10, plugins=[(p.name, p.artifact_types) for p in load_catalog().values()])]
    if controller.state_dir.is_dir():
        busy += [f"run folder {f.name}" for f in controller.state_dir.glob("analysis-*")]
    return busy


@pytest.fixture
def platform(api_server, transactional_db, settings, tmp_path, token_for) -> Platform:
    """The platform with the default settings, on the module's shared controller.

    At the end the test waits for the controller to be idle (what the test started has
    finished: e.g. the offline analyses of its experiments), so the flush that follows removes
    no row the controller is still working on and the next test starts from nothing. A
    controller that does not get idle is not shared any further.
    """
    platform = _user_platform(api_server, api_server.shared_controller(), settings, tmp_path,
                              token_for)
    yield platform
    left: list[str] = []

    def idle() -> bool:
        left[:] = _busy(platform.controller)
        return not left

    try:
        until(idle, every=0.1, what="the shared controller idle (nothing left of the test)")
    except BaseException as exc:
        api_server.drop_shared()
        raise AssertionError(f"{exc}; left: {left}") from None


@pytest.fixture
def platform_factory(api_server, transactional_db, settings, tmp_path, token_for):
    """Build a platform on a controller of the test's own, with the extra environment given
    (started after the shared one is stopped); stopped at teardown."""
    controllers: list[Controller] = []

    def build(**env: str) -> Platform:
        api_server.drop_shared()
        controller = api_server.new_controller(env)
        controllers.append(controller)
        return _user_platform(api_server, controller, settings, tmp_path, token_for)

    try:
        yield build
    finally:
        for controller in controllers:
            retire(controller)
        analyzer_client.close()


def _stop_leftover_runs(state_dir: Path) -> None:
    """Kill what a failed test left running under `state_dir` (runners and their commands)."""
    if not state_dir.is_dir():
        return
    for folder in state_dir.iterdir():
        for name in ("run.json", "child.json"):
            try:
                pid = json.loads((folder / name).read_text()).get("pid", 0)
            except (OSError, ValueError):
                continue
            if pid > 0:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


# -- scenarios --------------------------------------------------------------------------------

def matmul_result(replica: int) -> dict:
    """A result file of the matmul benchmark (examples/local/tasks.yaml) of one replica."""
    return {"replica": replica, "host": "e2e", "config": {"sizes": [128, 256], "repeats": 3},
            "results": [
                {"n": 128, "best_seconds": 0.001 + replica / 1000, "gflops": 4.2 - replica},
                {"n": 256, "best_seconds": 0.008 + replica / 500, "gflops": 4.19 + replica},
            ]}


def test_offline_bench_summary_of_a_succeeded_benchmark(platform):
    docs = [matmul_result(0), matmul_result(1)]
    exp = finished_exp(platform.user, platform.tmp, exp_type="benchmark", name="matmul",
                       files={f"matmul-replica-{d['replica']}.json": json.dumps(d, indent=2)
                              for d in docs})

    record = until(lambda: AnalysisRecord.objects.filter(
        experiment=exp, status="succeeded").first(), what="the offline analysis succeeded")
    assert (record.analysis_type, record.plugin_name) == ("offline", "bench-summary")
    assert record.attempts == 1 and record.started_at and record.finished_at

    folder = local_path(record.result_path)
    lines = (folder / "bench-summary.jsonl").read_text().splitlines()
    metrics = {r["metric"]: r for r in map(json.loads, lines) if r.get("kind") == "metric"}
    expected: dict[str, list[float]] = {
        "replica": [d["replica"] for d in docs],
        "config.sizes": [n for d in docs for n in d["config"]["sizes"]],
        "config.repeats": [d["config"]["repeats"] for d in docs],
    }
    for key in ("n", "best_seconds", "gflops"):
        expected[f"results.{key}"] = [r[key] for d in docs for r in d["results"]]
    assert set(metrics) == set(expected)
    for metric, values in expected.items():
        assert metrics[metric]["count"] == len(values), metric
        assert metrics[metric]["mean"] == pytest.approx(statistics.fmean(values)), metric
        assert metrics[metric]["min"] == min(values) and metrics[metric]["max"] == max(values)
    assert (folder / "output.log").is_file()

    # The HTTP API shows the same results.
    resp = platform.http.get(f"/api/v1/analyses/{record.analysis_id}/results")
    assert resp.status_code == 200, resp.text
    assert [r for r in resp.json()["records"] if r.get("kind") == "metric"] == \
        [json.loads(line) for line in lines if json.loads(line).get("kind") == "metric"]

    # Later polls create nothing more for it: a second experiment's analysis is created by a
    # poll that also saw the first one.
    second = finished_exp(platform.user, platform.tmp, exp_type="benchmark", name="again",
                          files={"matmul-replica-0.json": json.dumps(docs[0])})
    until(lambda: AnalysisRecord.objects.filter(experiment=second).exists(),
          what="the second experiment's offline analysis")
    assert AnalysisRecord.objects.filter(experiment=exp).count() == 1


def test_offline_starts_only_the_plugins_whose_inputs_the_artifact_holds(platform):
    from analysis.selectors import exps_awaiting_analysis
    from plugins.catalog import load_catalog

    trace = {"traceEvents": [{"ph": "X", "name": "step 1", "ts": 0, "dur": 5, "pid": 1,
                              "tid": 1}]}
    # A profile without HLO dumps (the usual case), and a benchmark that wrote no JSON.
    profile = finished_exp(platform.user, platform.tmp, exp_type="profiling", name="no-hlo",
                           files={"host.xplane.pb": "xplane", "host.trace.json": json.dumps(trace)})
    bench = finished_exp(platform.user, platform.tmp, exp_type="benchmark", name="no-json",
                         files={"stdout.txt": "ran, wrote nothing\n"})

    def record(exp, plugin: str, status: str):
        return AnalysisRecord.objects.filter(experiment=exp, plugin_name=plugin,
                                             status=status).first()

    hlo = until(lambda: record(profile, "hlo-stats", "skipped"), what="hlo-stats skipped")
    summary = until(lambda: record(bench, "bench-summary", "skipped"),
                    what="bench-summary skipped")
    until(lambda: record(profile, "trace-summary", "succeeded"), what="trace-summary ran")
    for skipped, globs in ((hlo, "**/*.txt, **/*.hlo"),
                           (summary, "**/*.jsonl, **/*.json, **/*.csv")):
        assert skipped.analysis_type == "offline" and skipped.reason == "NoInputs"
        assert globs in skipped.error_message and skipped.attempts == 0
        assert skipped.finished_at and not skipped.started_at
    assert not AnalysisRecord.objects.filter(status="failed").exists()
    resp = platform.http.get("/api/v1/analyses", status="skipped")
    assert resp.status_code == 200, resp.text
    assert {r["id"] for r in resp.json()["results"]} == {hlo.analysis_id, summary.analysis_id}
    # The decision is kept: discovery is never offered these (artifact, plugin) pairs again,
    # so their artifacts are not listed on every poll.
    catalog = load_catalog()
    owed = exps_awaiting_analysis(limit=100, plugins=[
        (p.name, p.artifact_types) for p in catalog.values()])
    assert not [t for t in owed if t.experiment.pk in (profile.pk, bench.pk)]


def test_an_online_plugin_of_another_artifact_type_is_refused_before_queuing(platform):
    exp = finished_exp(platform.user, platform.tmp, exp_type="benchmark", name="matmul",
                       files={"matmul-replica-0.json": json.dumps(matmul_result(0))})
    resp = platform.http.post("/api/v1/analyses", {"exp_id": exp.pk, "plugin": "hlo-stats"})
    assert resp.status_code == 400, resp.text
    message = resp.json()["plugin"][0]
    assert "'hlo-stats'" in message and "'profiling'" in message and "'benchmark'" in message
    assert not AnalysisRecord.objects.filter(experiment=exp, analysis_type="online").exists()


SCRIPT = """\
echo "hello from the script of $FALCON_ANALYSIS_ID"
echo "größe ✓ 終わり"
printf '{"kind": "metric", "metric": "answer", "value": %s}\\n' "$1" > "$FALCON_RESULT_FILE"
printf '{"kind": "note", "text": "second"}\\n' >> "$FALCON_RESULT_FILE"
"""


def test_online_command_with_a_script_over_http(platform):
    exp = finished_exp(platform.user, platform.tmp, exp_type="training",
                       files={"loss.csv": "step,loss\n1,0.5\n"})
    created = platform.http.create(exp_id=exp.pk, command='sh "$FALCON_SCRIPT" 42',
                                   script=SCRIPT, name="my check")
    assert created["analysis_type"] == "online" and created["has_script"] is True
    assert created["creator"] == USER and created["status"] in ("pending", "running")

    done = platform.http.wait_status(created["id"])
    assert done["status"] == "succeeded", done
    assert done["attempts"] == 1
    logs = platform.http.get(f"/api/v1/analyses/{created['id']}/logs")
    assert logs.status_code == 200, logs.text
    assert f"hello from the script of {created['id']}" in logs.json()["content"]
    assert logs.json()["complete"] is True
    # Read in small pages (as a follower does), the log is the same, every character whole.
    pages, offset, complete = [], 0, False
    while not complete:
        page = platform.http.get(f"/api/v1/analyses/{created['id']}/logs", offset=offset,
                                 limit=5).json()
        assert page["next_offset"] > offset or page["complete"], page
        pages.append(page["content"])
        offset, complete = page["next_offset"], page["complete"]
    assert "".join(pages) == logs.json()["content"]
    assert "größe ✓ 終わり\n" in logs.json()["content"]
    results = platform.http.get(f"/api/v1/analyses/{created['id']}/results")
    assert results.status_code == 200, results.text
    assert results.json()["records"] == [
        {"kind": "metric", "metric": "answer", "value": 42}, {"kind": "note", "text": "second"}]
    assert results.json()["file"] == f"{done['result_path']}result.jsonl"
    # The script ran over its own copy of the artifact; the user's experiment is untouched.
    assert AnalysisRecord.objects.get(pk=created["id"]).script_content == SCRIPT


def _running_child(platform: Platform, analysis_id: str) -> int:
    """The pid of the command of a running analysis (the run folder's child.json)."""
    child = platform.controller.run_folder(analysis_id) / "child.json"
    until(child.exists, what=f"the command of {analysis_id} started")
    pid = json.loads(child.read_text())["pid"]
    assert alive(pid)
    return pid


def test_cancel_a_running_analysis_over_http(platform):
    exp = finished_exp(platform.user, platform.tmp, exp_type="training", files={"x.txt": "x"})
    created = platform.http.create(exp_id=exp.pk, command="echo started; sleep 120")
    analysis_id = created["id"]
    platform.http.wait_status(analysis_id, ("running",))
    pid = _running_child(platform, analysis_id)
    until(lambda: "started" in platform.http.get(
        f"/api/v1/analyses/{analysis_id}/logs").json()["content"], what="the first line")

    resp = platform.http.post(f"/api/v1/analyses/{analysis_id}/cancel")
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "cancelled"
    until(lambda: not alive(pid), what="the command stopped")
    until(lambda: not platform.controller.run_folder(analysis_id).exists(),
          what="the run folder removed")
    final = platform.http.analysis(analysis_id)
    assert final["status"] == "cancelled" and final["reason"] == "Cancelled"
    assert final["finished_at"]
    log = local_path(final["result_path"]) / "output.log"
    assert "started" in log.read_text()  # the log is kept
    logs = platform.http.get(f"/api/v1/analyses/{analysis_id}/logs").json()
    assert "started" in logs["content"] and logs["complete"] is True
    # Cancelling again is fine and changes nothing.
    again = platform.http.post(f"/api/v1/analyses/{analysis_id}/cancel")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


def test_online_queue_admits_one_at_a_time_in_fifo_order(platform_factory):
    platform = platform_factory(FALCON_ANALYSIS_ONLINE_CONCURRENCY="1")
    exp = finished_exp(platform.user, platform.tmp, exp_type="training",
                       files={"x.txt": "x"})
    shared = platform.tmp / "shared"
    shared.mkdir()
    # A run that finds another one inside the critical section says so: the queue's limit is
    # checked on the processes themselves, not only on the records.
    command = (f'mkdir "{shared}/busy" 2>/dev/null || echo "$FALCON_ANALYSIS_ID" '
               f'>> "{shared}/overlaps"; echo "$FALCON_ANALYSIS_ID" >> "{shared}/order"; '
               f'sleep 1; rmdir "{shared}/busy"')
    with ThreadPoolExecutor(3) as pool:
        created = list(pool.map(lambda i: platform.http.create(
            exp_id=exp.pk, command=command, name=f"q{i}"), range(3)))
    ids = {c["id"] for c in created}
    assert len(ids) == 3

    most_running = 0
    positions_seen: set[tuple[int, ...]] = set()

    def all_done() -> bool:
        nonlocal most_running
        resp = platform.http.get("/api/v1/analyses", exp=exp.pk)
        assert resp.status_code == 200, resp.text
        rows = {r["id"]: r for r in resp.json()["results"]}
        assert set(rows) == ids
        most_running = max(most_running,
                           sum(r["status"] == "running" for r in rows.values()))
        # Each GET is its own moment: asked oldest first, a position read later can only
        # have moved up (an analysis ahead admitted), never down.
        pending = sorted((r for r in rows.values() if r["status"] == "pending"),
                         key=lambda r: (r["created_at"], r["id"]))
        positions_seen.add(tuple(p for p in (platform.http.analysis(r["id"])["queue_position"]
                                             for r in pending) if p is not None))
        return all(r["status"] in TERMINAL for r in rows.values())

    until(all_done, timeout=40, every=0.05, what="the three analyses finished")
    assert most_running == 1
    assert (1, 2) in positions_seen
    assert {p for seen in positions_seen for p in seen} == {1, 2}, positions_seen
    assert not (shared / "overlaps").exists(), (shared / "overlaps").read_text()

    final = [AnalysisRecord.objects.get(pk=i) for i in ids]
    assert [r.status for r in final] == ["succeeded"] * 3
    fifo = [r.analysis_id for r in sorted(final, key=lambda r: (r.created_at, r.analysis_id))]
    assert [r.analysis_id for r in sorted(final, key=lambda r: r.started_at)] == fifo
    assert (shared / "order").read_text().split() == fifo
    for a, b in zip(sorted(final, key=lambda r: r.started_at),
                    sorted(final, key=lambda r: r.started_at)[1:]):
        assert a.finished_at <= b.started_at  # the next one started after the last ended


def test_controller_down_then_back(platform_factory):
    platform = platform_factory(FALCON_ANALYSIS_ONLINE_CONCURRENCY="1")
    http = platform.http
    exp = finished_exp(platform.user, platform.tmp, exp_type="training", files={"x.txt": "x"})
    long = http.create(exp_id=exp.pk, command="echo long; sleep 120")["id"]
    http.wait_status(long, ("running",))
    long_pid = _running_child(platform, long)
    queued = http.create(exp_id=exp.pk, command="echo never")["id"]
    later = http.create(exp_id=exp.pk, command="echo later")["id"]
    assert http.analysis(queued)["queue_position"] == 1

    platform.controller.stop()
    assert alive(long_pid)  # runs outlive their controller

    resp = http.post("/api/v1/analyses", {"exp_id": exp.pk, "command": "echo no"})
    assert resp.status_code == 503, resp.text
    assert resp.json()["code"] == "unavailable"
    listed = http.get("/api/v1/analyses", exp=exp.pk)
    assert listed.status_code == 200
    assert {r["id"] for r in listed.json()["results"]} == {long, queued, later}
    # Cancel falls back to the database, for a pending and for a running analysis.
    for analysis_id in (queued, long):
        resp = http.post(f"/api/v1/analyses/{analysis_id}/cancel")
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "cancelled"
    # The log is read from the store meanwhile.
    logs = http.get(f"/api/v1/analyses/{long}/logs").json()
    assert "long" in logs["content"] and "unavailable" in logs["note"]
    assert alive(long_pid)  # nobody stopped it yet

    platform.controller.start()
    until(lambda: not alive(long_pid), what="the cancelled run stopped by the controller")
    until(lambda: not platform.controller.run_folder(long).exists(),
          what="the cancelled run's folder removed")
    # The pending work left is done once the cancelled run's slot is free.
    assert http.wait_status(later)["status"] == "succeeded"
    for analysis_id in (long, queued):
        final = AnalysisRecord.objects.get(pk=analysis_id)
        assert final.status == "cancelled", (analysis_id, final.status, final.message)
    never = AnalysisRecord.objects.get(pk=queued)
    assert never.attempts == 0 and never.started_at is None
    assert not platform.controller.run_folder(queued).exists()


def test_controller_killed_mid_run_the_run_finishes_once(platform_factory):
    platform = platform_factory()
    exp = finished_exp(platform.user, platform.tmp, exp_type="training", files={"x.txt": "x"})
    gate = platform.tmp / "gate"
    command = (f'echo first; while [ ! -e "{gate}" ]; do sleep 0.05; done; echo last; '
               'echo \'{"done": 1}\' > "$FALCON_RESULT_FILE"')
    analysis_id = platform.http.create(exp_id=exp.pk, command=command)["id"]
    platform.http.wait_status(analysis_id, ("running",))
    child = _running_child(platform, analysis_id)
    spec = platform.controller.run_folder(analysis_id) / "spec.json"
    until(lambda: runner_pids(spec), what="the runner process")

    platform.controller.stop(signal.SIGKILL)
    assert len(runner_pids(spec)) == 1 and alive(child)  # the run outlives its controller
    platform.controller.start()
    # Let the restarted controller recover (it must re-attach, not start a second run) before
    # the run may end.
    until(lambda: "analyzer recovered" in platform.controller.log().split(
        "AnalyzerService on port")[-1], what="the restarted controller recovered")
    assert len(runner_pids(spec)) == 1
    gate.touch()

    def one_runner() -> None:
        assert len(runner_pids(spec)) <= 1, "two runners of one analysis"

    until(lambda: AnalysisRecord.objects.get(pk=analysis_id).status in TERMINAL,
          every=0.05, tick=one_runner, what="the analysis finished")
    done = AnalysisRecord.objects.get(pk=analysis_id)
    assert done.status == "succeeded", done.message
    assert done.attempts == 1  # re-attached, never started again
    log = (local_path(done.result_path) / "output.log").read_text()
    assert log.count("first") == 1 and log.count("last") == 1
    results = platform.http.get(f"/api/v1/analyses/{analysis_id}/results")
    assert results.json()["records"] == [{"done": 1}]
