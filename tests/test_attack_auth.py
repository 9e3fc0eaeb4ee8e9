"""Attacks on who a request is and what it may read, replayed over the public interfaces.

The issue "Safe to share", items 3, 5, 6, 7 and 13 (decisions.md#dec-sec-auth), each attack
performed and shown refused with nothing read and nothing changed, in the style of
accounts/tests/test_attacks.py: the `cloudflare` fixture serves a Cloudflare-shaped certs
endpoint on loopback and signs tokens as Access would; HTTP goes through Django's test client or
a real gunicorn, gRPC to an in-process server on loopback.

- Another user's analysis script read with GetAnalysisRecord `with_script` (item 3).
- A CLI login grant's token read from the database before, after or long after its 120 s
  (item 5).
- A look-alike email (Kelvin sign, long s, fullwidth letters, dotless and dotted i, a
  ligature, a Roman numeral) taking over an address (item 6).
- The `CF_Authorization` cookie riding along with a bad or another user's `Authorization:
  Bearer` past the CSRF check (item 7).
- A legitimate 8 KiB or 16 KiB token refused by gunicorn or by gRPC's metadata limit (item 13).
"""
from __future__ import annotations

import datetime as dt
import http.client
import logging
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from accounts.models import CliLoginGrant, User
from accounts.tests.cloudflare import AUD, TEAM
from accounts.tests.factories import UserFactory
from core.grpc.channel import auth_metadata
from core.grpc.errors import ERROR_CODE_KEY
from core.limits.tokens import HEADER_MARGIN_BYTES, MAX_HEADER_FIELD_BYTES, MAX_TOKEN_BYTES
from falcon_proto.falcon.v1 import (analysis_pb2, analysis_pb2_grpc, common_pb2,
                                    experiment_pb2, experiment_pb2_grpc)
from falcon_site.grpc.testing import grpc_channel, grpc_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parent.parent
WHOAMI = "/api/v1/auth/whoami"
SECRET_SCRIPT = "API_KEY = 'sk-alice-0123456789'\nprint('alice only')\n"


def person(cf, name: str, **extra) -> str:
    """A token of `name@example.com`, subject `cf-sub-<name>`."""
    return cf.sign(email=f"{name}@example.com", sub=f"cf-sub-{name}", **extra)


def register(name: str, **fields) -> User:
    return UserFactory(user_id=f"cf-sub-{name}", email=f"{name}@example.com", **fields)


def rpc_error(call, request, metadata) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, metadata=metadata, timeout=10)
    return info.value


# -- item 3: an analysis script goes only to its creator, staff and the analyzer ----------------

@pytest.fixture
def alice_record(cloudflare):
    from analysis.tests.factories import make_analysis, make_finished_exp

    alice = register("alice")
    return make_analysis(exp=make_finished_exp(creator=alice), plugin_name="",
                         command="python run.py", script_content=SECRET_SCRIPT,
                         script_name="run.py")


@pytest.fixture
def records(grpc_channel):
    return analysis_pb2_grpc.AnalysisRecordServiceStub(grpc_channel)


def _caller_token(cf, settings, caller: str) -> str:
    """A token of `caller`: a person's name, or `service:<role>` for a service token."""
    if caller.startswith("service:"):
        role = caller.split(":", 1)[1]
        settings.FALCON_SERVICE_ROLES = {f"{role}.access": role}
        return cf.sign(cf.service_claims(f"{role}.access"))
    if caller == "carol-staff":
        register("carol", is_staff=True)
        return person(cf, "carol")
    return person(cf, caller)


@pytest.mark.parametrize("caller", ["bob", "service:read-only", "service:exp-controller",
                                    "service:maintenance"])
def test_another_user_or_service_cannot_read_a_script_over_grpc(cloudflare, settings, records,
                                                                 alice_record, caller):
    md = auth_metadata(_caller_token(cloudflare, settings, caller))
    err = rpc_error(records.GetAnalysisRecord, analysis_pb2.GetAnalysisRecordReq(
        analysis_id=alice_record.pk, with_script=True), md)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert dict(err.trailing_metadata())[ERROR_CODE_KEY] == "permission_denied"
    assert "with_script" in err.details() and SECRET_SCRIPT not in err.details()
    # Without the script the record stays readable, and says there is one.
    got = records.GetAnalysisRecord(analysis_pb2.GetAnalysisRecordReq(
        analysis_id=alice_record.pk), metadata=md, timeout=10)
    assert got.script_content == "" and got.script_bytes == len(SECRET_SCRIPT.encode())


@pytest.mark.parametrize("caller", ["alice", "carol-staff", "service:analyzer"])
def test_the_creator_staff_and_the_analyzer_read_the_script_over_grpc(
        cloudflare, settings, records, alice_record, caller):
    md = auth_metadata(_caller_token(cloudflare, settings, caller))
    got = records.GetAnalysisRecord(analysis_pb2.GetAnalysisRecordReq(
        analysis_id=alice_record.pk, with_script=True), metadata=md, timeout=10)
    assert got.script_content == SECRET_SCRIPT


def test_a_deactivated_creator_cannot_read_the_script(cloudflare, records, alice_record):
    token = person(cloudflare, "alice")
    User.objects.filter(pk="cf-sub-alice").update(is_active=False)
    err = rpc_error(records.GetAnalysisRecord, analysis_pb2.GetAnalysisRecordReq(
        analysis_id=alice_record.pk, with_script=True), auth_metadata(token))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED


def test_list_rpcs_never_carry_a_script(cloudflare, settings, records, alice_record):
    for caller in ("alice", "service:analyzer"):
        md = auth_metadata(_caller_token(cloudflare, settings, caller))
        listed = records.ListAnalysisRecords(analysis_pb2.ListAnalysisRecordsReq(),
                                             metadata=md, timeout=10)
        assert [r.analysis_id for r in listed.records] == [alice_record.pk]
        assert all(r.script_content == "" for r in listed.records)
        running = records.ListRunningAnalyses(analysis_pb2.ListRunningAnalysesReq(),
                                              metadata=md, timeout=10) \
            if caller.startswith("service") else None
        assert running is None or all(r.script_content == "" for r in running.records)


@pytest.mark.parametrize("caller", ["alice", "bob", "carol-staff", "service:read-only"])
def test_http_never_carries_a_script_body(api, cloudflare, settings, alice_record, caller):
    token = _caller_token(cloudflare, settings, caller)
    for url, status in ((f"/api/v1/analyses/{alice_record.pk}", 200),
                        (f"/api/v1/analyses/{alice_record.pk}?with_script=true", 200),
                        ("/api/v1/analyses", 200),
                        ("/api/v1/analyses?with_script=1", 400)):  # an unknown list parameter
        res = api.get(url, HTTP_CF_ACCESS_JWT_ASSERTION=token)
        assert res.status_code == status, (url, res.content)
        assert "sk-alice" not in res.content.decode(), url
    detail = api.get(f"/api/v1/analyses/{alice_record.pk}", HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert detail.json()["has_script"] is True


# -- item 5: a CLI login grant's token is never usable at rest ----------------------------------

def _cli_params(verifier: str = "v" * 43) -> dict[str, str]:
    from accounts.cli_login import s256

    return {"port": "54321", "state": "s" * 43, "challenge": s256(verifier), "code": "BCDF-GHJK"}


def _confirm(token: str) -> str:
    """Confirm a CLI login in a browser behind Access; return the grant id it sent the CLI."""
    from urllib.parse import parse_qs, urlsplit

    browser = Client(enforce_csrf_checks=True)
    page = browser.get("/auth/cli-login", _cli_params(), HTTP_CF_ACCESS_JWT_ASSERTION=token)
    res = browser.post("/auth/cli-login", {**_cli_params(), "csrfmiddlewaretoken":
                                           page.cookies["csrftoken"].value},
                       HTTP_CF_ACCESS_JWT_ASSERTION=token, HTTP_ORIGIN="http://testserver")
    assert res.status_code == 303, res.content
    return parse_qs(urlsplit(res["Location"]).query)["grant"][0]


def _redeem(grant: str):
    return Client().post("/auth/cli-login/redeem", {"grant": grant, "state": "s" * 43,
                                                    "verifier": "v" * 43},
                         content_type="application/json")


def _rows_hold(token: str) -> bool:
    """Whether any grant row, read as an attacker with the database would, holds `token`."""
    for row in CliLoginGrant.objects.values():
        for value in row.values():
            raw = bytes(value) if isinstance(value, (bytes, memoryview)) else str(value).encode()
            if token.encode() in raw or token.split(".")[1].encode() in raw:
                return True
    return False


def test_a_waiting_grant_holds_only_ciphertext_and_redemption_deletes_it(cloudflare):
    from cryptography.exceptions import InvalidTag

    from accounts.cli_login import _open

    token = person(cloudflare, "alice")
    grant = _confirm(token)
    row = CliLoginGrant.objects.get()
    assert not _rows_hold(token) and grant not in str(CliLoginGrant.objects.values().get())
    # What the row itself offers as a key opens nothing.
    with pytest.raises(InvalidTag):
        _open(row.grant_hash, row.grant_hash, bytes(row.sealed_token))
    res = _redeem(grant)
    assert res.status_code == 200 and res.json()["token"] == token
    assert not CliLoginGrant.objects.exists()


def test_expired_grants_are_deleted_without_another_login(cloudflare):
    """Injected clocks: a grant made 121 s ago is gone at the next use of the login page, at a
    redeem of anything, and by the periodic command; one made 119 s ago stays."""
    from accounts.cli_login import GRANT_TTL_SECONDS, grant_create, grant_sweep

    token = person(cloudflare, "alice")
    now = timezone.now()

    def grant_made(seconds_ago: int) -> str:
        return grant_create(state="s" * 43, challenge=_cli_params()["challenge"], token=token,
                            user_id="cf-sub-alice",
                            now=now - dt.timedelta(seconds=seconds_ago))

    # The login page (a GET: nothing confirmed) sweeps.
    grant_made(GRANT_TTL_SECONDS + 1)
    fresh = grant_made(GRANT_TTL_SECONDS - 1)
    page = Client().get("/auth/cli-login", _cli_params(), HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert page.status_code == 200 and CliLoginGrant.objects.count() == 1
    # A redeem, even of an unknown grant, sweeps.
    grant_made(GRANT_TTL_SECONDS + 1)
    assert _redeem("x" * 43).status_code == 400 and CliLoginGrant.objects.count() == 1
    # The periodic command sweeps.
    grant_made(GRANT_TTL_SECONDS + 1)
    call_command("clear_cli_login_grants", stdout=open(os.devnull, "w"))
    assert CliLoginGrant.objects.count() == 1
    # At 120 s the fresh one goes too, and its id then redeems nothing.
    assert grant_sweep(now=now + dt.timedelta(seconds=1)) == 1
    assert _redeem(fresh).status_code == 400 and not _rows_hold(token)


# -- item 6: look-alike emails never take over an address ----------------------------------------

# (look-alike, the address it would fold into)
LOOKALIKES = [
    ("\u212aate@example.com", "kate@example.com"),         # KELVIN SIGN
    ("\u017fam@example.com", "sam@example.com"),           # LATIN SMALL LETTER LONG S
    ("\uff4bate@example.com", "kate@example.com"),         # FULLWIDTH LATIN SMALL LETTER K
    ("\uff2bATE@example.com", "kate@example.com"),         # FULLWIDTH LATIN CAPITAL LETTER K
    ("\u0131mran@example.com", "imran@example.com"),       # LATIN SMALL LETTER DOTLESS I
    ("\u0130mran@example.com", "imran@example.com"),       # CAPITAL I WITH DOT ABOVE
    ("o\ufb00ice@example.com", "office@example.com"),      # LATIN SMALL LIGATURE FF
    ("kate@examp\u217ce.com", "kate@example.com"),         # SMALL ROMAN NUMERAL FIFTY
]
LOOKALIKE_IDS = [f"U+{ord(next(c for c in a if not c.isascii())):04X}" for a, _ in LOOKALIKES]


@pytest.mark.parametrize("lookalike,owner", LOOKALIKES, ids=LOOKALIKE_IDS)
def test_a_lookalike_email_cannot_take_over_an_address(api, cloudflare, grpc_channel, caplog,
                                                       lookalike, owner):
    caplog.set_level(logging.INFO, logger="accounts")
    real = cloudflare.sign(email=owner, sub="cf-sub-owner")
    assert api.get(WHOAMI, HTTP_CF_ACCESS_JWT_ASSERTION=real).status_code == 200
    forged = cloudflare.sign(email=lookalike, sub="cf-sub-attacker")
    res = api.get(WHOAMI, HTTP_CF_ACCESS_JWT_ASSERTION=forged)
    assert res.status_code == 401 and res.json()["code"] == "authentication_failed"
    assert lookalike not in res.content.decode("utf-8")
    assert any("refused a token" in r.getMessage() and "email" in r.getMessage()
               for r in caplog.records)
    stub = experiment_pb2_grpc.ExperimentServiceStub(grpc_channel)
    err = rpc_error(stub.ListExps, common_pb2.CommonListReq(), auth_metadata(forged))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert list(User.objects.values_list("pk", "email")) == [("cf-sub-owner", owner)]
    # The real owner still logs in, on both transports.
    assert api.get(WHOAMI, HTTP_CF_ACCESS_JWT_ASSERTION=real).json()["email"] == owner
    stub.ListExps(common_pb2.CommonListReq(), metadata=auth_metadata(real), timeout=10)


@pytest.mark.parametrize("lookalike,owner", LOOKALIKES, ids=LOOKALIKE_IDS)
def test_a_lookalike_registers_nobody_before_the_owner_comes(api, cloudflare, lookalike, owner):
    forged = cloudflare.sign(email=lookalike, sub="cf-sub-attacker")
    assert api.get(WHOAMI, HTTP_CF_ACCESS_JWT_ASSERTION=forged).status_code == 401
    assert not User.objects.exists()
    real = cloudflare.sign(email=owner, sub="cf-sub-owner")
    assert api.get(WHOAMI, HTTP_CF_ACCESS_JWT_ASSERTION=real).json()["email"] == owner


def test_a_lookalike_creator_email_names_nobody_over_grpc(cloudflare, grpc_channel):
    """CreateExp's `creator_email` is compared in the stored normal form, never by collation
    (MariaDB's equates `\\u212a` and `k`)."""
    from accounts.selectors import user_get_by_email
    from core.errors import NotFound

    register("kate")
    assert user_get_by_email(email="KATE@example.com").pk == "cf-sub-kate"
    with pytest.raises(NotFound):
        user_get_by_email(email="\u212aate@example.com")
    stub = experiment_pb2_grpc.ExperimentServiceStub(grpc_channel)
    err = rpc_error(stub.CreateExp, experiment_pb2.CreateExpReq(
        name="x", cluster_name="local", exp_type="profiling", config="a: 1\n",
        creator_email="\u212aate@example.com"), auth_metadata(person(cloudflare, "kate")))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED


def test_an_internationalised_domain_in_its_normal_form_keeps_working(api, cloudflare):
    token = cloudflare.sign(email="bob@b\u00fccher.example", sub="cf-sub-bob")
    res = api.get(WHOAMI, HTTP_CF_ACCESS_JWT_ASSERTION=token)
    assert res.status_code == 200 and res.json()["email"] == "bob@b\u00fccher.example"


# -- item 7: one credential precedence; the cookie is CSRF-checked whenever it is the one used ----

@pytest.fixture
def alice_exp(cloudflare):
    from experiments.tests.factories import make_exp

    return make_exp(creator=register("alice"))


def _browser_with_alice_cookie(cf) -> Client:
    browser = Client(enforce_csrf_checks=True)
    browser.cookies["CF_Authorization"] = person(cf, "alice")
    return browser


@pytest.mark.parametrize("authorization", ["Bearer garbage", "Bearer ", "bearer a.b.c"])
def test_the_cookie_plus_a_bad_bearer_cannot_abort(cloudflare, alice_exp, authorization):
    browser = _browser_with_alice_cookie(cloudflare)
    res = browser.post(f"/api/v1/exps/{alice_exp.pk}/abort", HTTP_AUTHORIZATION=authorization,
                       HTTP_ORIGIN="https://evil.example")
    assert res.status_code == 401, res.content
    alice_exp.refresh_from_db()
    assert alice_exp.status == "Created"


def test_the_cookie_beside_another_scheme_is_still_csrf_checked(cloudflare, alice_exp):
    browser = _browser_with_alice_cookie(cloudflare)
    res = browser.post(f"/api/v1/exps/{alice_exp.pk}/abort",
                       HTTP_AUTHORIZATION="Basic Zm9vOmJhcg==", HTTP_ORIGIN="https://evil.example")
    assert res.status_code == 403 and "CSRF" in res.json()["detail"]
    alice_exp.refresh_from_db()
    assert alice_exp.status == "Created"


def test_the_cookie_plus_bobs_bearer_is_bob(cloudflare, alice_exp):
    browser = _browser_with_alice_cookie(cloudflare)
    bob = f"Bearer {person(cloudflare, 'bob')}"
    assert browser.get(WHOAMI, HTTP_AUTHORIZATION=bob).json()["email"] == "bob@example.com"
    res = browser.post(f"/api/v1/exps/{alice_exp.pk}/abort", HTTP_AUTHORIZATION=bob,
                       HTTP_ORIGIN="https://evil.example")
    assert res.status_code == 403 and "bob@example.com" in res.json()["detail"]
    alice_exp.refresh_from_db()
    assert alice_exp.status == "Created"


def test_over_grpc_a_bad_bearer_wins_and_a_cookie_is_never_read(cloudflare, grpc_channel,
                                                                 alice_exp):
    stub = experiment_pb2_grpc.ExperimentServiceStub(grpc_channel)
    abort = experiment_pb2.AbortExpReq(id=alice_exp.pk)
    cookie = ("cookie", f"CF_Authorization={person(cloudflare, 'alice')}")
    for metadata in ((("authorization", "Bearer garbage"), cookie), (cookie,)):
        assert rpc_error(stub.AbortExp, abort, metadata).code() == \
            grpc.StatusCode.UNAUTHENTICATED
    bob = (("authorization", f"Bearer {person(cloudflare, 'bob')}"), cookie)
    assert rpc_error(stub.AbortExp, abort, bob).code() == grpc.StatusCode.PERMISSION_DENIED
    alice_exp.refresh_from_db()
    assert alice_exp.status == "Created"


def test_the_admin_follows_the_same_precedence(cloudflare):
    register("root", is_staff=True, is_superuser=True)
    register("alice")
    browser = Client()
    browser.cookies["CF_Authorization"] = person(cloudflare, "root")
    # A staff cookie with alice's bearer is alice: no admin.
    res = browser.get("/admin/", HTTP_AUTHORIZATION=f"Bearer {person(cloudflare, 'alice')}")
    assert res.status_code == 302
    assert browser.get("/admin/", HTTP_AUTHORIZATION="Bearer garbage").status_code == 302
    # The staff cookie alone is root (admin forms stay under Django's CSRF check).
    assert browser.get("/admin/").status_code == 200


# -- item 13: the verifier's largest token gets through every server in front of it ---------------

def sized_token(cf, size: int, **claims) -> str:
    """A validly signed person's token of `size` bytes, or up to 3 fewer (base64 comes in steps):
    many groups, as Access lists them."""
    groups = [f"engineering-team-{i:04d}@example.com" for i in range(size // 64)]
    token = ""
    for _ in range(40):
        token = cf.sign(groups=groups, **claims)
        if size - 3 <= len(token) <= size:
            return token
        if len(token) > size:
            groups[-1] = groups[-1][:-max(1, (len(token) - size) * 3 // 4)]
        else:
            groups[-1] += "x" * max(1, (size - len(token)) * 3 // 4)
    raise AssertionError(f"could not make a token of {size} bytes (last {len(token)})")


def test_the_limits_are_derived_from_the_verifier_and_agree():
    from accounts.verifier import MAX_TOKEN_BYTES as verifier_max
    from core.grpc.channel import CHANNEL_OPTIONS
    from falcon_site.grpc.server import SERVER_OPTIONS

    assert verifier_max == MAX_TOKEN_BYTES
    header = len("Cf-Access-Jwt-Assertion: ") + MAX_TOKEN_BYTES + len("\r\n")
    assert MAX_HEADER_FIELD_BYTES >= header + 1024  # room for a cookie's other cookies
    for options in (CHANNEL_OPTIONS, SERVER_OPTIONS):
        values = dict(options)
        assert values["grpc.max_metadata_size"] >= MAX_TOKEN_BYTES + 1024
        assert values["grpc.absolute_max_metadata_size"] == values["grpc.max_metadata_size"]


@pytest.mark.parametrize("size", [8 * 1024, MAX_TOKEN_BYTES])
def test_a_large_token_passes_grpc_metadata(cloudflare, grpc_channel, size):
    token = sized_token(cloudflare, size)
    stub = experiment_pb2_grpc.ExperimentServiceStub(grpc_channel)
    stub.ListExps(common_pb2.CommonListReq(), metadata=auth_metadata(token), timeout=10)
    too_long = sized_token(cloudflare, MAX_TOKEN_BYTES + 1024)
    err = rpc_error(stub.ListExps, common_pb2.CommonListReq(), auth_metadata(too_long))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "longer than" in err.details()


def _gunicorn_env(tmp_path: Path, cf) -> dict[str, str]:
    from tests.test_e2e import database_url

    return dict(os.environ, DATABASE_URL=database_url(), FALCON_VAR_DIR=str(tmp_path / "var"),
                FALCON_ARTIFACT_ROOT=(tmp_path / "artifacts").as_uri(), HOME=str(tmp_path),
                FALCON_AUTH_MODE="cloudflare", FALCON_CF_TEAM_DOMAIN=TEAM,
                FALCON_CF_CERTS_URL=cf.certs.url, FALCON_CF_AUDIENCES=AUD,
                # The default local cluster is refused in Cloudflare mode without the opt-in
                # (tests/test_attack_user_code.py); these tests are about header sizes only.
                FALCON_UNSAFE_RUN_USER_CODE_AS_SERVER="1",
                PYTHONUNBUFFERED="1")


def _get(port: int, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("GET", path, headers=headers)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def test_gunicorn_with_its_config_accepts_the_verifiers_largest_token(tmp_path, cloudflare):
    from tests.test_e2e import free_port
    from tests.test_json_server_logs import _serve, _stop

    env = _gunicorn_env(tmp_path, cloudflare)
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "prepare"], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    port = free_port()
    command = [str(Path(sys.executable).parent / "gunicorn"), "falcon_site.wsgi", "--bind",
               f"127.0.0.1:{port}", "--workers", "1"]
    proc = _serve(command, env, port, tmp_path / "gunicorn.log")
    try:
        for size in (8 * 1024, MAX_TOKEN_BYTES):
            token = sized_token(cloudflare, size)
            status, body = _get(port, WHOAMI, {"Cf-Access-Jwt-Assertion": token})
            assert status == 200, (size, body[:300])
            status, body = _get(port, WHOAMI, {"Authorization": f"Bearer {token}"})
            assert status == 200, (size, body[:300])
            # In a browser's Cookie header, beside its other cookies.
            cookie = (f"csrftoken={'c' * 64}; sessionid={'s' * 32}; CF_AppSession={'a' * 40}; "
                      f"CF_Authorization={token}")
            status, body = _get(port, WHOAMI, {"Cookie": cookie})
            assert status == 200, (size, body[:300])
        # Past the verifier's limit but within the header margin: the verifier's reason.
        status, body = _get(port, WHOAMI, {"Cf-Access-Jwt-Assertion": sized_token(
            cloudflare, MAX_TOKEN_BYTES + 1024)})
        assert status == 401 and b"longer than 16384 bytes" in body
        # Past the margin: gunicorn refuses the header itself.
        status, _body = _get(port, WHOAMI, {"Cf-Access-Jwt-Assertion": "a" * (
            MAX_TOKEN_BYTES + HEADER_MARGIN_BYTES)})
        assert status == 431
    finally:
        _stop(proc)
    assert User.objects.filter(email="bob@example.com").exists()
