"""The attacks of the "safe to share" issue, performed against a live platform.

One platform per auth mode for the whole module (`tests.attack_platform`): in the cloudflare mode
gunicorn, rungrpc and the three controllers with their own service tokens, against a JWKS the test
serves; in the local mode `runlocal`. Each attack goes through a public interface (HTTP, gRPC, the
`falcon` CLI, a task the local cluster runs) and is shown refused, with nothing read and nothing
changed. A few tests start single processes instead (listeners, the cloudflare mode's opt-in to
running user code as the server's user).
"""
from __future__ import annotations

import shlex
import threading
import time
import uuid
from pathlib import Path

import grpc
import httpx
import jwt
import pytest
from django.core.management import call_command

from accounts.tests.cloudflare import OTHER_AUD
from tests.attack_platform import (
    CONTROLLERS, MODES, UNSAFE_OPT_IN, Platform, alias_chain_config, base_env, cloudflare_access,
    cloudflare_env, controller_cmd, controller_env, listening, make_staff, manage, prepared_env,
    staff_subject, start_cloudflare, start_local, wait_for,
)
from tests.test_e2e import free_port, platform_database_url

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_the_session_sets_the_test_database_up():
    """pytest-django creates the test databases only for the aliases its session's marked tests
    name (`_get_databases_for_setup`); the platform tests are unmarked on purpose (a marked test
    holds a transaction, or flushes, under the platform's feet), so this one asks for them."""


@pytest.fixture(scope="module", params=MODES)
def live(request, django_db_setup, django_db_blocker, tmp_path_factory):
    """The running platform of one mode; its rows are flushed when the module is done with it."""
    mode = request.param
    tmp = tmp_path_factory.mktemp(f"live-{mode}")
    db_url = platform_database_url(django_db_blocker)
    with django_db_blocker.unblock():
        make_staff("staff@example.com", staff_subject(mode))
    try:
        if mode == "cloudflare":
            with cloudflare_access() as (access, edge):
                platform = start_cloudflare(tmp, db_url, access, edge)
                try:
                    yield platform
                finally:
                    platform.stop()
        else:
            platform = start_local(tmp, db_url)
            try:
                yield platform
            finally:
                platform.stop()
    finally:
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)


@pytest.fixture
def orm(django_db_blocker):
    """Read the database the platform uses (the test's connection, outside a transaction)."""
    with django_db_blocker.unblock():
        yield


def cloudflare_only(live: Platform) -> None:
    if live.mode != "cloudflare":
        pytest.skip("a cloudflare-mode attack")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def stubs(channel):
    from falcon_proto.falcon.v1 import (
        analysis_pb2_grpc, experiment_pb2_grpc,
    )

    class Stubs:
        exps = experiment_pb2_grpc.ExperimentServiceStub(channel)
        records = analysis_pb2_grpc.AnalysisRecordServiceStub(channel)

    return Stubs


def grpc_code(call) -> grpc.StatusCode:
    """Run `call`; return the status code it failed with (OK when it did not fail)."""
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def running_exp(live: Platform, who: str = "alice") -> dict:
    """An experiment of `who` that keeps running until aborted (the test aborts it)."""
    exp = live.create_exp(who, unique("long"), "sleep 120")
    live.wait_status(exp["id"], {"Running"})
    return exp


def abort_as_owner(live: Platform, exp_id: int) -> None:
    live.request("POST", f"/api/v1/exps/{exp_id}/abort", as_="alice")


# -- the basics ------------------------------------------------------------------------------


def forged_tokens(live: Platform) -> dict[str, str]:
    now = int(time.time())
    if live.mode == "cloudflare":
        claims = live.access.claims(email="alice@example.com", sub="cf-sub-alice")
        wrong_aud = live.access.sign(email="alice@example.com", sub="cf-sub-alice",
                                     aud=[OTHER_AUD])
    else:
        from accounts.issuer import LocalIssuer, load_key

        claims = jwt.decode(live.tokens["alice"], options={"verify_signature": False})
        key = load_key(Path(live.env["FALCON_VAR_DIR"]) / "jwt-signing-key.pem")
        wrong_aud = LocalIssuer(key, issuer=claims["iss"], audience=["someone-else"]).issue(
            "alice@example.com", ttl_seconds=600).token
    claims.update(iat=now, nbf=now, exp=now + 600)
    return {"alg none": jwt.encode(claims, key=None, algorithm="none"),
            "wrong aud": wrong_aud}


def test_forged_tokens_are_unauthenticated_on_both_transports(live):
    from falcon_proto.falcon.v1 import common_pb2

    for label, token in forged_tokens(live).items():
        res = live.request("GET", "/api/v1/exps", token=token)
        assert res.status_code == 401, (label, res.status_code, res.text)
        with live.channel() as channel:
            code = grpc_code(lambda: stubs(channel).exps.ListExps(
                common_pb2.CommonListReq(), metadata=live.md(token=token), timeout=30))
        assert code == grpc.StatusCode.UNAUTHENTICATED, label


def test_bob_cannot_abort_or_delete_alices_experiment(live):
    from falcon_proto.falcon.v1 import experiment_pb2

    exp = running_exp(live)
    try:
        for method, path in (("POST", f"/api/v1/exps/{exp['id']}/abort"),
                             ("DELETE", f"/api/v1/exps/{exp['id']}")):
            res = live.request(method, path, as_="bob")
            assert res.status_code in (403, 404), (method, res.status_code, res.text)
        with live.channel() as channel:
            s = stubs(channel)
            for rpc in (s.exps.AbortExp, s.exps.DeleteExp):
                code = grpc_code(lambda: rpc(experiment_pb2.AbortExpReq(id=exp["id"]) if
                                             rpc is s.exps.AbortExp else
                                             experiment_pb2.DeleteExpReq(id=exp["id"]),
                                             metadata=live.md("bob"), timeout=30))
                assert code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND)
        res = live.cli("bob", "exp", "abort", str(exp["id"]))
        assert res.returncode != 0
        assert live.exp(exp["id"])["status"] == "Running"
    finally:
        abort_as_owner(live, exp["id"])


def test_read_only_service_token_cannot_write(live):
    cloudflare_only(live)
    from falcon_proto.falcon.v1 import experiment_pb2

    exp = running_exp(live)
    try:
        body = {"name": unique("ro"), "cluster_name": "local", "exp_type": "attack",
                "role_to_task_spec": {"main": {"command": "true"}}}
        assert live.request("POST", "/api/v1/exps", as_="readonly", json=body).status_code == 403
        res = live.request("POST", f"/api/v1/exps/{exp['id']}/abort", as_="readonly")
        assert res.status_code == 403
        with live.channel() as channel:
            s = stubs(channel)
            assert grpc_code(lambda: s.exps.AbortExp(
                experiment_pb2.AbortExpReq(id=exp["id"]), metadata=live.md("readonly"),
                timeout=30)) == grpc.StatusCode.PERMISSION_DENIED
            assert grpc_code(lambda: s.exps.DeleteExp(
                experiment_pb2.DeleteExpReq(id=exp["id"]), metadata=live.md("readonly"),
                timeout=30)) == grpc.StatusCode.PERMISSION_DENIED
        assert live.exp(exp["id"])["status"] == "Running"
        names = [e["name"] for e in live.request("GET", "/api/v1/exps",
                                                 as_="staff").json()["results"]]
        assert body["name"] not in names
    finally:
        abort_as_owner(live, exp["id"])


# -- 2: symlinks planted by a task -----------------------------------------------------------


def test_links_planted_by_a_task_never_reach_outside_the_store(live, tmp_path):
    secret_bytes = f"TOP-SECRET-{uuid.uuid4().hex}".encode()
    secret = tmp_path / "outside" / "server-secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(secret_bytes)
    s = shlex.quote(str(secret))
    plant = (f'cd "$FALCON_ARTIFACT_PATH" && printf fine > real.txt && mkdir sub && '
             f'printf inner > sub/fine.txt && ln -s {s} secret-link && ln -s / root-link && '
             f'ln -s .. up-link && ln -s {s} sub/inner-link')
    exp = live.create_exp("alice", unique("links"), plant)
    assert live.wait_status(exp["id"], {"Succeeded", "Failed"})["status"] == "Succeeded"
    url = f"/api/v1/exps/{exp['id']}/artifacts"
    listing = live.request("GET", url, as_="alice")
    assert listing.status_code == 200, listing.text
    names = [f["name"] for f in listing.json()["results"]]
    prefix = next(n for n in names if n.endswith("real.txt"))[: -len("real.txt")]
    assert sorted(names) == sorted([f"{prefix}real.txt", f"{prefix}sub/fine.txt"]), names
    reads = [f"{prefix}secret-link", f"{prefix}sub/inner-link", f"{prefix}root-link{secret}",
             f"{prefix}up-link/{prefix}secret-link", f"{prefix}root-link/etc/hostname"]
    for who in ("alice", "bob"):
        res = live.request("GET", url, as_=who)
        assert secret_bytes not in res.content and b"-link" not in res.content, who
        for name in reads:
            res = live.request("GET", f"{url}/file", as_=who, params={"name": name})
            assert res.status_code == 404, (who, name, res.status_code)
            assert secret_bytes not in res.content
    assert live.request("GET", f"{url}/file", as_="alice",
                        params={"name": f"{prefix}real.txt"}).content == b"fine"
    download = live.tmp / unique("download")
    res = live.cli("alice", "exp", "artifacts", str(exp["id"]), "--download", str(download))
    assert secret_bytes not in (res.stdout + res.stderr).encode()
    got = [p for p in download.rglob("*")] if download.exists() else []
    assert not [p for p in got if p.is_symlink()]
    assert all(secret_bytes not in p.read_bytes() for p in got if p.is_file())
    # `.falcon-download/` holds the CLI's record of each file's version (for resuming).
    assert {p.relative_to(download).as_posix() for p in got if p.is_file()
            and ".falcon-download" not in p.relative_to(download).parts} <= \
        {f"{prefix}real.txt", f"{prefix}sub/fine.txt"}
    res = live.cli("alice", "exp", "delete", str(exp["id"]), "--yes", "--purge")
    assert res.returncode == 0, res.stdout + res.stderr
    assert secret.read_bytes() == secret_bytes


# -- 3: analysis scripts -----------------------------------------------------------------------


def test_only_the_owner_and_staff_read_an_analysis_script(live):
    from falcon_proto.falcon.v1 import analysis_pb2

    exp = live.create_exp("alice", unique("analysed"), 'echo 1 > "$FALCON_ARTIFACT_PATH/out"')
    assert live.wait_status(exp["id"], {"Succeeded", "Failed"})["status"] == "Succeeded"
    script = f"print('alice private script {uuid.uuid4().hex}')\n"
    res = live.request("POST", "/api/v1/analyses", as_="alice",
                       json={"exp_id": exp["id"], "command": "true", "script": script})
    assert res.status_code in (200, 201, 202), res.text
    analysis_id = res.json()["id"]
    readers = ["bob", "readonly"] if live.mode == "cloudflare" else ["bob"]
    with live.channel() as channel:
        records = stubs(channel).records
        req = analysis_pb2.GetAnalysisRecordReq(analysis_id=analysis_id, with_script=True)
        for who in readers:
            try:
                reply = records.GetAnalysisRecord(req, metadata=live.md(who), timeout=30)
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.PERMISSION_DENIED, (who, exc.code())
                assert script not in (exc.details() or "")
            else:
                pytest.fail(f"{who} read alice's analysis record (script "
                            f"{'included' if reply.script_content else 'omitted'})")
        for who in ("alice", "staff"):
            reply = records.GetAnalysisRecord(req, metadata=live.md(who), timeout=30)
            assert reply.script_content == script, who


# -- 5: CLI login grants (cloudflare) -----------------------------------------------------------


def confirm_cli_login(live: Platform, who: str) -> tuple[str, str, str]:
    """Run the login page's GET and Confirm as `who`; return (grant, state, verifier)."""
    import re
    from urllib.parse import parse_qs, urlsplit

    from cli.auth import login_code, s256_challenge

    verifier, state = uuid.uuid4().hex + uuid.uuid4().hex, uuid.uuid4().hex
    params = {"port": str(free_port()), "state": state, "challenge": s256_challenge(verifier),
              "code": login_code()}
    identity = {"Cf-Access-Jwt-Assertion": live.tokens[who]}
    with httpx.Client(base_url=live.http, timeout=30, follow_redirects=False) as client:
        page = client.get("/auth/cli-login", params=params, headers=identity)
        assert page.status_code == 200, page.text
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        done = client.post("/auth/cli-login", data={**params, "csrfmiddlewaretoken": csrf},
                           headers={**identity, "Origin": live.http,
                                    "Referer": f"{live.http}/auth/cli-login"})
        assert done.status_code == 303, done.text
    grant = parse_qs(urlsplit(done.headers["location"]).query)["grant"][0]
    return grant, state, verifier


def no_usable_tokens(live: Platform) -> None:
    from accounts.models import CliLoginGrant

    for row in CliLoginGrant.objects.all():
        for name in ("token", "state", "challenge", "user_id"):
            value = getattr(row, name, "") or ""
            assert not any(value and value in t for t in live.tokens.values()), name
            assert not (isinstance(value, str) and value.count(".") == 2
                        and value.startswith("eyJ")), f"grant column {name} holds a JWT"


def test_cli_login_grants_keep_no_usable_token(live, orm):
    cloudflare_only(live)
    from accounts.models import CliLoginGrant

    grant, state, verifier = confirm_cli_login(live, "alice")
    res = live.request("POST", "/auth/cli-login/redeem",
                       json={"grant": grant, "state": state, "verifier": verifier})
    assert res.status_code == 200 and res.json()["token"], res.text
    no_usable_tokens(live)
    confirm_cli_login(live, "bob")  # never redeemed: it expires
    from django.utils import timezone

    CliLoginGrant.objects.update(expires_at=timezone.now() - timezone.timedelta(seconds=1))
    no_usable_tokens(live)
    confirm_cli_login(live, "alice")  # the next login's work on the way
    CliLoginGrant.objects.update(expires_at=timezone.now() - timezone.timedelta(seconds=1))
    no_usable_tokens(live)


# -- 6: look-alike emails (cloudflare) ----------------------------------------------------------


@pytest.mark.parametrize("fake, victim", [
    ("\u212aate@example.com", "kate@example.com"),  # KELVIN SIGN
    ("\u017fam@example.com", "sam@example.com"),  # LATIN SMALL LETTER LONG S
    ("\uff46red@example.com", "fred@example.com"),  # FULLWIDTH f
    ("\u0131van@example.com", "ivan@example.com"),  # LATIN SMALL LETTER DOTLESS I
])
def test_look_alike_email_is_refused_and_takes_nothing_over(live, fake, victim):
    cloudflare_only(live)
    local = victim.split("@")[0]
    victim_token = live.access.sign(email=victim, sub=f"cf-sub-{local}")
    if local == "kate":  # one victim who had logged in already
        assert live.request("GET", "/api/v1/auth/whoami", token=victim_token).status_code == 200
    forged = live.access.sign(email=fake, sub=f"cf-sub-evil-{local}")
    res = live.request("GET", "/api/v1/auth/whoami", token=forged)
    assert res.status_code == 401, (fake, res.status_code, res.text)
    me = live.request("GET", "/api/v1/auth/whoami", token=victim_token)
    assert me.status_code == 200, me.text
    assert victim in me.text and f"cf-sub-evil-{local}" not in me.text


# -- 7: CSRF through the Access cookie --------------------------------------------------------------


def test_cookie_with_a_garbage_bearer_cannot_abort_cross_site(live):
    cloudflare_only(live)
    exp = running_exp(live)
    try:
        res = live.request("POST", f"/api/v1/exps/{exp['id']}/abort",
                           headers={"Authorization": "Bearer garbage",
                                    "Origin": "https://evil.example",
                                    "Cookie": f"CF_Authorization={live.tokens['alice']}"})
        assert 400 <= res.status_code < 500, res.status_code
        assert live.exp(exp["id"])["status"] == "Running"
    finally:
        abort_as_owner(live, exp["id"])


# -- 8: log forging ------------------------------------------------------------------------------


def test_a_path_cannot_forge_http_log_lines(live):
    res = live.request("GET", "/api/v1/exps/%0aFORGED%0d%1b[31m")
    assert 400 <= res.status_code < 500
    marker = unique("marker")
    live.request("GET", f"/api/v1/exps/{marker}")
    wait_for("the HTTP log showing the request after the attack",
             lambda: marker.encode() in live.log_bytes(), 30)
    log = live.log_bytes()
    assert not [line for line in log.split(b"\n") if line.lstrip().startswith(b"FORGED")]
    controls = {b for b in log if b < 0x20 and b not in (0x0A, 0x09)}
    assert not controls, f"raw control bytes in the HTTP log: {sorted(controls)}"


# -- 10: capacity of one gRPC list ----------------------------------------------------------------


def test_list_exps_caps_its_id_filter(live):
    """1,001 ids are refused by their count, before one is read (the message says how many
    were sent: the check ran on the length; tests/test_attack_capacity.py shows it reads no
    row); 1,000 are served."""
    from falcon_proto.falcon.v1 import common_pb2

    with live.channel() as channel:
        exps = stubs(channel).exps
        with pytest.raises(grpc.RpcError) as refused:
            exps.ListExps(common_pb2.CommonListReq(ids=list(range(1, 1002))),
                          metadata=live.md("alice"), timeout=60)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = refused.value.details()
        assert "ids" in details and "has 1001 values" in details and "at most 1000" in details
        reply = exps.ListExps(common_pb2.CommonListReq(ids=list(range(1, 1001))),
                              metadata=live.md("alice"), timeout=60)
        assert reply is not None


# -- 13: big tokens (cloudflare, gunicorn) ------------------------------------------------------------


@pytest.mark.parametrize("size", [8 * 1024, 16_000])
def test_big_valid_tokens_are_accepted_by_gunicorn_and_grpc(live, size):
    cloudflare_only(live)
    from falcon_proto.falcon.v1 import common_pb2

    groups: list[str] = []
    token = live.access.sign(email="alice@example.com", sub="cf-sub-alice", groups=groups)
    while len(token) < size:
        groups.append(f"group-{len(groups):05d}-{uuid.uuid4().hex[:8]}")
        token = live.access.sign(email="alice@example.com", sub="cf-sub-alice", groups=groups)
    assert size <= len(token) < size + 200
    res = live.request("GET", "/api/v1/auth/whoami", token=token)
    assert res.status_code == 200, (len(token), res.status_code, res.text[:200])
    with live.channel() as channel:
        stubs(channel).exps.ListExps(common_pb2.CommonListReq(), metadata=live.md(token=token),
                                     timeout=30)


# -- 4: YAML alias expansion (last: until fixed it keeps a server busy) ---------------------------


def test_diff_of_alias_bomb_configs_is_refused_quickly_and_the_server_keeps_answering(live):
    config = alias_chain_config()
    assert len(config.encode()) < 600
    ids = [live.create_exp("alice", unique("bomb"), "true", config=config)["id"]
           for _ in range(2)]
    answer: dict = {}

    def diff() -> None:
        try:
            answer["res"] = live.request("GET", "/api/v1/exps/diff", as_="alice",
                                         params={"ids": f"{ids[0]},{ids[1]}"}, timeout=30)
        except Exception as exc:  # noqa: BLE001 (a timeout is the failure reported below)
            answer["error"] = exc

    thread = threading.Thread(target=diff, daemon=True)
    thread.start()
    health = live.request("GET", "/healthz", timeout=10)
    assert health.status_code == 200
    thread.join(35)
    assert "error" not in answer, f"no answer within the client's 30 s: {answer.get('error')!r}"
    assert answer["res"].status_code in (400, 422), answer["res"].status_code


# -- processes that must refuse to start -------------------------------------------------------------


def refuses(cmd: list[str], env: dict[str, str], port: int | None, started, what: str) -> str:
    """Start `cmd`; wait until it exits (return its output) or shows it runs (`started()` or
    `port` listening: fail). The process is killed either way."""
    import subprocess

    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def settled():
            if proc.poll() is not None:
                return "exited"
            if (port and listening(port)) or started():
                return "running"
            return None

        outcome = wait_for(f"{what} exiting or running", settled, 90, every=0.1)
        if outcome == "running":
            pytest.fail(f"{what} started instead of refusing")
        assert proc.returncode != 0, what
        return proc.stdout.read().decode(errors="replace")
    finally:
        if proc.poll() is None:
            import os
            import signal

            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        if port:
            assert not listening(port)


@pytest.mark.parametrize("kind", ["resources", "analyzer"])
def test_cloudflare_mode_refuses_to_run_user_code_without_the_opt_in(
        kind, tmp_path, django_db_setup, django_db_blocker):
    db_url = platform_database_url(django_db_blocker)
    with cloudflare_access() as (access, edge):
        env = prepared_env(tmp_path, controller_env(cloudflare_env(
            tmp_path, db_url, access, edge, FALCON_GRPC_TARGET=f"127.0.0.1:{free_port()}"), kind))
        analyzer = free_port()
        out = refuses(controller_cmd(kind, f"127.0.0.1:{analyzer}"), env,
                      analyzer if kind == "analyzer" else None,
                      lambda: edge.hits.get(CONTROLLERS[kind][0]), f"runcontroller {kind}")
    assert UNSAFE_OPT_IN in out, out


@pytest.mark.parametrize("what", ["metrics", "runserver"])
def test_local_mode_refuses_non_loopback_listeners(what, tmp_path, django_db_setup,
                                                   django_db_blocker):
    db_url = platform_database_url(django_db_blocker)
    port = free_port()
    env = prepared_env(tmp_path, base_env(tmp_path, db_url))
    if what == "metrics":
        env.update(FALCON_METRICS_PORT=str(port), FALCON_METRICS_ADDR="0.0.0.0")
        cmd = manage("rungrpc", "--addr", f"127.0.0.1:{free_port()}")
    else:
        cmd = manage("runserver", "--noreload", f"0.0.0.0:{port}")
    out = refuses(cmd, env, port, lambda: False, what)
    assert "FALCON_LOCAL_ALLOW_NONLOOPBACK" in out or "FALCON_METRICS_ADDR" in out, out
