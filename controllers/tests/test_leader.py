"""Leader election on a coordination.k8s.io/v1 Lease (decisions.md#dec-lease,
cluster-behaviours.md#cb-18).

The electors talk to the loopback fake API through the real `kubernetes` client; the fake
enforces optimistic concurrency, so a renewal with a stale resourceVersion really gets 409.
The last test runs two real `manage.py runcontroller resources` processes on one Lease, kills
the leader with SIGKILL, and checks that the other takes over and finishes the work.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from django.db import connection
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controllers.kubeclient import KubeCaller, KubeConnection, api_client
from controllers.leader import (
    ElectionConfig,
    Fenced,
    LeadershipLost,
    LeaseElector,
    run_elected,
)
from controllers.management.commands.runcontroller import default_lease_name
from controllers.tests.fake_k8s import fake_kube, kubeconfig  # noqa: F401  (fixtures)
from core.testing import wait_until as poll_until

ROOT = Path(__file__).resolve().parents[2]
NS = "falcon"
LEASE = "falcon-resources"
FAST = {"lease_duration": 0.8, "renew_deadline": 0.5, "retry_period": 0.1}


def make_elector(kubeconfig, identity: str, wall_clock=None, clock=None,
                 **timing) -> LeaseElector:
    conn = KubeConnection(kubeconfig=str(kubeconfig), retries=0, request_timeout=0.3,
                          connect_timeout=0.3)
    cfg = ElectionConfig(lease_name=LEASE, namespace=NS, identity=identity, **{**FAST, **timing})
    extra = {"wall_clock": wall_clock} if wall_clock else {}
    if clock:
        extra["clock"] = clock
    return LeaseElector(client.CoordinationV1Api(api_client(conn)), cfg, caller=KubeCaller(conn),
                        **extra)


def lease_spec(fake) -> dict:
    return (fake.get("leases", NS, LEASE) or {}).get("spec") or {}


def wait_for(check, timeout: float, what: str):
    """Poll `check` until it returns a truthy value, which is returned; fail after `timeout`."""
    return poll_until(check, timeout=timeout, what=what)


def test_bad_timings_are_refused_with_an_error_not_an_exit():
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        ElectionConfig(lease_name="l", namespace="n", identity="i", lease_duration=5,
                       renew_deadline=5, retry_period=1)


def test_default_lease_names_separate_controllers_and_cluster_sets():
    assert default_lease_name("falcon", "exp", None) == "falcon-exp"
    assert default_lease_name("falcon", "resources", ["b", "A_1"]) == \
        default_lease_name("falcon", "resources", ["A_1", "b"]) == "falcon-resources-a-1-b"
    long = default_lease_name("falcon", "resources", [f"cluster-{i}" for i in range(40)])
    assert len(long) <= 253


def test_one_replica_leads_and_the_other_waits_until_the_lease_expires(kubeconfig, fake_kube):
    now = [1000.0]  # both replicas' monotonic clock, moved by the test
    a = make_elector(kubeconfig, "a", clock=lambda: now[0])
    b = make_elector(kubeconfig, "b", clock=lambda: now[0])
    assert a.try_acquire_or_renew() and a.is_leader()
    spec = lease_spec(fake_kube)
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 1
    assert fake_kube.get("leases", NS, LEASE)["metadata"]["resourceVersion"]
    assert not b.try_acquire_or_renew() and not b.is_leader()
    assert a.try_acquire_or_renew()  # renewal: a PUT with the read resourceVersion
    put = [r for r in fake_kube.requests if r.method == "PUT"]
    assert len(put) == 1 and put[0].resource == "leases"
    assert not b.try_acquire_or_renew()
    now[0] += 0.5
    assert not b.try_acquire_or_renew()  # renewed 0.5 s ago: not expired for b
    now[0] += 1.1  # a stopped renewing; b observed the same record for > lease duration
    assert b.try_acquire_or_renew() and b.is_leader()
    spec = lease_spec(fake_kube)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew() and not a.is_leader()


def test_a_renewal_with_a_stale_resource_version_loses_the_lease(kubeconfig, fake_kube):
    a = make_elector(kubeconfig, "a")
    assert a.try_acquire_or_renew()
    # Another client writes the Lease between a's read and a's PUT.
    fake_kube.inject("PUT", "leases", action=lambda: fake_kube.bump("leases", NS, LEASE))
    assert not a.try_acquire_or_renew()
    assert not a.is_leader()
    with pytest.raises(LeadershipLost):
        a.fence()
    assert lease_spec(fake_kube)["holderIdentity"] == "a"  # the PUT did not go through


def test_a_leader_that_cannot_renew_stops_acting_before_the_lease_can_expire(kubeconfig,
                                                                            fake_kube):
    now = [1000.0]  # the replica's monotonic clock: each failed attempt moves it 0.05 s
    a = make_elector(kubeconfig, "a", clock=lambda: now[0])
    assert a.try_acquire_or_renew()
    renewed_at = now[0]
    fake_kube.inject(None, "leases", status=503, times=1000)
    while a.is_leader():
        a.try_acquire_or_renew()
        now[0] += 0.05
    stopped_after = now[0] - renewed_at
    assert FAST["renew_deadline"] - 0.1 <= stopped_after < FAST["lease_duration"]


def test_lease_times_are_microtime_with_six_digits_even_on_a_whole_second(kubeconfig,
                                                                         fake_kube):
    whole = datetime(2026, 1, 1, 10, 0, 0, tzinfo=timezone.utc)
    # The fake is as strict as the API server: the client's isoformat() of a whole second has
    # no fraction, and such a Lease is refused.
    api = client.CoordinationV1Api(api_client(KubeConnection(kubeconfig=str(kubeconfig))))
    with pytest.raises(ApiException) as info:
        api.create_namespaced_lease(NS, client.V1Lease(
            metadata=client.V1ObjectMeta(name="raw"),
            spec=client.V1LeaseSpec(holder_identity="x", acquire_time=whole, renew_time=whole)))
    assert info.value.status == 400 and "2006-01-02T15:04:05.000000Z07:00" in info.value.body

    a = make_elector(kubeconfig, "a", wall_clock=lambda: whole)
    assert a.try_acquire_or_renew()  # create
    assert a.try_acquire_or_renew()  # renew: acquireTime read back (a whole second) re-sent
    spec = lease_spec(fake_kube)
    assert spec["renewTime"] == spec["acquireTime"] == "2026-01-01T10:00:00.000000Z"
    a.release()
    spec = lease_spec(fake_kube)
    assert spec.get("holderIdentity") in (None, "")
    assert spec["renewTime"] == "2026-01-01T10:00:00.000000Z"


def test_fenced_writes_raise_once_the_lease_is_lost(kubeconfig, fake_kube):
    a = make_elector(kubeconfig, "a")
    calls = []

    class Api:
        def update_job_status(self, **kw):
            calls.append(kw)

        def list_jobs(self, flt):
            return ["read"]

    fenced = Fenced(Api(), a.fence, ("update_job_status",))
    with pytest.raises(LeadershipLost):
        fenced.update_job_status(job_id=1)
    assert a.try_acquire_or_renew()
    fenced.update_job_status(job_id=2)
    a.lose("test")
    with pytest.raises(LeadershipLost):
        fenced.update_job_status(job_id=3)
    assert fenced.list_jobs(None) == ["read"] and calls == [{"job_id": 2}]


def test_losing_the_lease_stops_the_loop_and_the_replica_waits_as_a_follower(kubeconfig,
                                                                             fake_kube):
    a = make_elector(kubeconfig, "a")
    stop = threading.Event()
    writes: list[float] = []
    runs = []

    ended = threading.Event()

    def work(halt: threading.Event):
        runs.append(time.monotonic())
        try:
            while not halt.is_set():
                a.fence()
                writes.append(time.monotonic())
                halt.wait(0.02)
        finally:
            ended.set()

    thread = threading.Thread(target=run_elected, args=(work,), kwargs={"elector": a,
                                                                       "stop": stop})
    thread.start()
    wait_for(lambda: writes, 60, "the leader to work")

    def b_takes_the_lease():
        fake_kube.objects[("leases", NS, LEASE)]["spec"]["holderIdentity"] = "b"
        fake_kube.bump("leases", NS, LEASE)

    # Another replica writes the Lease: a's next renewal gets 409 and a stops at once, then
    # waits as a follower while b holds it.
    fake_kube.inject("PUT", "leases", action=b_takes_the_lease)
    wait_for(lambda: not a.is_leader(), 60, "a to lose the lease")
    lost_at = time.monotonic()
    wait_for(ended.is_set, 60, "a's loop to stop")
    assert not any(t > lost_at for t in writes)
    # a follows: it reads the Lease again (twice, so one follower wait passed) without acting.
    reads = fake_kube.count("GET", "leases")
    wait_for(lambda: fake_kube.count("GET", "leases") >= reads + 2, 60,
             "a to try the Lease again as a follower")
    assert len(runs) == 1 and not a.is_leader()  # following, not acting
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


@pytest.mark.parametrize("outage", ["failing", "slow"])
def test_a_leader_fenced_out_by_an_api_outage_follows_then_leads_again(kubeconfig, fake_kube,
                                                                      outage):
    a = make_elector(kubeconfig, "a")
    stop = threading.Event()
    stalled = threading.Event()  # the "slow" outage: Lease calls unanswered until set
    runs: list[float] = []
    writes: list[float] = []

    ended: list[float] = []

    def work(halt: threading.Event):
        # The loop's writes are fenced and nothing here catches LeadershipLost: the first
        # write after renew_deadline without a renewal raises out of `work`.
        runs.append(time.monotonic())
        try:
            while not halt.is_set():
                a.fence()
                writes.append(time.monotonic())
                halt.wait(0.02)
        finally:
            ended.append(time.monotonic())

    thread = threading.Thread(target=run_elected, args=(work,), kwargs={"elector": a,
                                                                       "stop": stop})
    thread.start()
    try:
        wait_for(lambda: writes, 60, "the leader to work")
        # Every Lease call fails (503) or stalls past the client timeout, for well over
        # renew_deadline.
        if outage == "failing":
            fake_kube.inject(None, "leases", status=503, times=10_000)
        else:
            # Held until the API server is back (below): each call outlives its client.
            fake_kube.inject(None, "leases", hold=stalled, times=10_000)
        wait_for(lambda: not a.is_leader(), 60, "a to stop acting")
        wait_for(lambda: ended, 60, "a's loop to stop")
        # The outage goes on while a follows: two more attempts at the Lease, both failed.
        calls = fake_kube.count(None, "leases")
        wait_for(lambda: fake_kube.count(None, "leases") >= calls + 2, 60,
                 "a to try the Lease again as a follower")
        assert thread.is_alive(), "run_elected returned as if --once: the replica is gone"
        lost_writes = len(writes)
        with fake_kube.lock:
            fake_kube.faults.clear()  # the API server is back
        stalled.set()
        wait_for(lambda: len(runs) == 2 and len(writes) > lost_writes + 3, 60,
                 "the same replica to lead and work again")
        assert a.is_leader() and lease_spec(fake_kube)["holderIdentity"] == "a"
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert lease_spec(fake_kube).get("holderIdentity") in (None, "")  # released on stop


def test_a_follower_beats_so_the_liveness_probe_keeps_it(kubeconfig, fake_kube, tmp_path,
                                                        monkeypatch):
    beat_file = tmp_path / "heartbeat"
    monkeypatch.setenv("FALCON_HEARTBEAT_FILE", str(beat_file))
    a, b = make_elector(kubeconfig, "a"), make_elector(kubeconfig, "b")
    assert a.try_acquire_or_renew()
    stop = threading.Event()
    thread = threading.Thread(target=run_elected, args=(lambda halt: None,),
                              kwargs={"elector": b, "stop": stop})
    thread.start()
    try:
        wait_for(beat_file.exists, 60, "the follower's first beat")
        first = beat_file.stat().st_mtime_ns
        wait_for(lambda: a.try_acquire_or_renew() and beat_file.stat().st_mtime_ns > first, 60,
                 "a later beat while a still leads")
        assert not b.is_leader()
    finally:
        stop.set()
        thread.join(5)


def test_a_leader_whose_loop_dies_stops_renewing_releases_and_exits(kubeconfig, fake_kube):
    a, b = make_elector(kubeconfig, "a"), make_elector(kubeconfig, "b")

    def work(halt):
        puts = fake_kube.count("PUT", "leases")
        wait_for(lambda: fake_kube.count("PUT", "leases") >= puts + 2, 60,
                 "a few renewals")
        raise RuntimeError("the tick crashed")

    with pytest.raises(RuntimeError, match="crashed"):
        run_elected(work, a, stop=threading.Event())
    assert lease_spec(fake_kube).get("holderIdentity") in (None, "")
    puts = fake_kube.count("PUT", "leases")
    # Nobody renews for a dead loop: the renewer thread ended before run_elected returned.
    assert not [t for t in threading.enumerate() if t.name == "lease-renewer"]
    assert fake_kube.count("PUT", "leases") == puts
    assert b.try_acquire_or_renew()  # at once: the Lease was released


def test_without_a_release_another_replica_takes_over_within_duration_plus_retry(
        kubeconfig, fake_kube):
    now = [1000.0]  # both replicas' monotonic clock, moved by the test
    a = make_elector(kubeconfig, "a", clock=lambda: now[0])
    b = make_elector(kubeconfig, "b", clock=lambda: now[0])

    def work(halt):
        fake_kube.inject("PUT", "leases", status=500, times=1)  # the release fails
        raise RuntimeError("the tick crashed")

    with pytest.raises(RuntimeError):
        run_elected(work, a, stop=threading.Event())
    assert lease_spec(fake_kube)["holderIdentity"] == "a"
    started = now[0]
    while not b.try_acquire_or_renew():  # b tries every retry period
        now[0] += FAST["retry_period"]
    assert now[0] - started <= FAST["lease_duration"] + FAST["retry_period"] + 0.3


PRODUCTION = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}


@pytest.mark.parametrize("lag", [0.001, 0.5, 1.0, 1.5, 1.999])
def test_after_a_kill_9_another_replica_takes_over_within_duration_plus_retry_period(
        kubeconfig, fake_kube, lag):
    """The takeover bound of docs/analyzer.md, on the production timings (15/10/2 s) and a
    virtual clock (the API calls take no virtual time).

    Leader a renews every retry period and is killed right after a renewal R; follower b reads
    the Lease `lag` seconds before each of a's renewals, so it sees R only one retry period
    later: the worst moment. b measures the 15 s from when IT saw R (client-go), so the Lease
    is free for b at R + (2 - lag) + 15; b must take it then, no later than R + 17 s, and
    never before R + 15 s. On a 2 s grid b would try only at R + (2 - lag) + 16: up to 18 s.
    """
    now = [1000.0]
    a = make_elector(kubeconfig, "a", clock=lambda: now[0], **PRODUCTION)
    b = make_elector(kubeconfig, "b", clock=lambda: now[0], **PRODUCTION)
    assert a.try_acquire_or_renew()
    renewals = [1002.0, 1004.0, 1006.0]  # then a is killed (SIGKILL: no release)
    killed_at = renewals[-1]
    stop = threading.Event()
    took_over: list[float] = []

    def wait(seconds: float) -> bool:
        """Advance the virtual clock; a renews at its times on the way."""
        target = now[0] + seconds
        while renewals and renewals[0] <= target:
            now[0] = renewals.pop(0)
            assert a.try_acquire_or_renew()
        now[0] = target
        return stop.is_set()

    def work(halt):
        took_over.append(now[0])
        stop.set()

    now[0] = renewals[0] - lag  # b starts following just before a's first renewal
    run_elected(work, b, stop=stop, wait=wait)
    assert took_over, "b never took over"
    assert killed_at + PRODUCTION["lease_duration"] <= took_over[0] \
        <= killed_at + PRODUCTION["lease_duration"] + PRODUCTION["retry_period"]
    assert lease_spec(fake_kube)["leaseTransitions"] == 1


# -- two real controller processes, one Lease -------------------------------------------------

def database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"mysql://{db['USER']}{password}@{db['HOST']}:{db['PORT'] or 3306}/{db['NAME']}"


@pytest.mark.django_db(transaction=True)
def test_two_resource_managers_one_lease_the_leader_killed_the_other_finishes(
        settings, fake_kube, kubeconfig, tmp_path):
    from experiments.tests.factories import make_exp
    from falcon_site.grpc.testing import INTERNAL_TOKEN, running_server
    from jobs.models import Job

    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump({"clusters": {"k8s-a": {
        "backend": "kubernetes", "namespace": "falcon-jobs", "kubeconfig": str(kubeconfig),
        "backoff_initial": 0.05, "request_timeout": 5}}}))
    settings.FALCON_CLUSTERS_FILE = str(clusters)
    settings.FALCON_INTERNAL_TOKEN = INTERNAL_TOKEN
    procs: dict[str, subprocess.Popen] = {}
    with running_server() as server:
        base_env = dict(
            os.environ, DATABASE_URL=database_url(), FALCON_VAR_DIR=str(tmp_path / "var"),
            FALCON_CLUSTERS_FILE=str(clusters), FALCON_INTERNAL_TOKEN=INTERNAL_TOKEN,
            FALCON_GRPC_TARGET=f"127.0.0.1:{server.port}", FALCON_LEASE_KUBECONFIG=str(kubeconfig),
            FALCON_LEASE_IN_CLUSTER="0", FALCON_LEASE_NAMESPACE=NS, PYTHONUNBUFFERED="1")
        # Their own FALCON_VAR_DIR starts empty: create its local state, as a deployment does.
        subprocess.run([sys.executable, str(ROOT / "manage.py"), "prepare"], cwd=ROOT,
                       env=base_env, check=True, capture_output=True, timeout=60)

        def start(identity: str) -> subprocess.Popen:
            log = open(tmp_path / f"{identity}.log", "w")
            return subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runcontroller", "resources",
                 "--interval", "0.2", "--lease-duration", "1.5", "--renew-deadline", "1",
                 "--retry-period", "0.2"],
                cwd=ROOT, env=dict(base_env, POD_NAME=identity), stdout=log,
                stderr=subprocess.STDOUT)

        def logs() -> str:
            return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in tmp_path.glob("rm-*.log"))

        try:
            procs["rm-a"] = start("rm-a")
            wait_for(lambda: lease_spec(fake_kube).get("holderIdentity") == "rm-a", 30,
                     "rm-a to lead")
            procs["rm-b"] = start("rm-b")
            exp = make_exp(name="ha", cluster_name="k8s-a", image="gcr.io/acme/t:1")
            job = Job.objects.get(experiment=exp)
            wait_for(lambda: Job.objects.get(pk=job.pk).cluster_job_name, 20,
                     "rm-a to submit the job")
            name = Job.objects.get(pk=job.pk).cluster_job_name
            # rm-b has started and is waiting on the Lease, doing nothing.
            wait_for(lambda: "while holding Lease" in (tmp_path / "rm-b.log").read_text(), 30,
                     "rm-b to start")
            assert lease_spec(fake_kube)["holderIdentity"] == "rm-a"
            procs["rm-a"].send_signal(signal.SIGKILL)
            procs["rm-a"].wait(10)
            fake_kube.set_job_status("falcon-jobs", name, {
                "succeeded": 1, "completedIndexes": "0",
                "conditions": [{"type": "Complete", "status": "True"}]})
            try:
                wait_for(lambda: Job.objects.get(pk=job.pk).status == "Succeeded", 30,
                         "rm-b to finish the job")
            except AssertionError:
                raise AssertionError(logs())
            # rm-b took the Lease over; how soon (within lease duration + retry period) is
            # shown on a virtual clock by the two `..._takes_over_within_duration_plus_retry...`
            # tests above, which no load on this machine can fail.
            spec = lease_spec(fake_kube)
            assert spec["holderIdentity"] == "rm-b" and spec["leaseTransitions"] >= 1
            assert fake_kube.count("POST", "jobs") == 1  # never submitted twice
            assert procs["rm-b"].poll() is None
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
