"""The attack suite: each way the authentication was broken, replayed against the fix.

Runs offline: the `cloudflare` fixture (accounts.tests.cloudflare) serves a Cloudflare-shaped
certs endpoint on loopback and signs tokens as Access would; gRPC calls go to an in-process
server (falcon_site.grpc.testing). HTTP and gRPC are both attacked where both apply. Each
section names the rule of docs/decisions.md it checks.
"""
from __future__ import annotations

import logging
import time

import grpc
import pytest
from django.core.signals import setting_changed

from core.grpc.channel import auth_metadata
from falcon_proto.falcon.v1 import common_pb2, experiment_pb2_grpc
from falcon_site.grpc.testing import grpc_channel, grpc_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)
WHOAMI = "/api/v1/auth/whoami"


def whoami(api, token):
    return api.get(WHOAMI, HTTP_CF_ACCESS_JWT_ASSERTION=token)


def cold_cache() -> None:
    """Rebuild the verifier (as a restarted process): no key set fetched yet."""
    setting_changed.send(sender=None, setting="FALCON_AUTH_MODE", value="cloudflare",
                         enter=True)


# -- AUTH-7: a certs answer without usable keys is an outage, not a lock-out -----------------------

@pytest.mark.parametrize("document", [{"keys": []}, {}, {"keys": [{"kty": "EC", "kid": "x"}]},
                                      {"keys": "nope"}])
def test_certs_without_usable_keys_keep_the_last_good_keys_and_the_cooldown(
        api, cloudflare, settings, caplog, document):
    settings.FALCON_AUTH_JWKS_LIFESPAN_SECONDS = 0.2
    settings.FALCON_AUTH_JWKS_STALE_SECONDS = 60
    settings.FALCON_AUTH_JWKS_RETRY_SECONDS = 60
    assert whoami(api, cloudflare.sign()).status_code == 200
    cloudflare.certs.document = document
    time.sleep(0.3)  # past the lifespan: the next request fetches
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            assert whoami(api, cloudflare.sign()).status_code == 200
    assert cloudflare.certs.hits == 2  # one fetch of the bad answer, then the back-off holds
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING
                and r.name.startswith("accounts")]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


@pytest.mark.parametrize("document", [{"keys": []}, {}])
def test_certs_without_usable_keys_and_no_last_good_set_answer_503_with_retry_after(
        api, cloudflare, settings, document):
    settings.FALCON_AUTH_JWKS_RETRY_SECONDS = 30
    cloudflare.certs.document = document
    for _ in range(3):
        res = whoami(api, cloudflare.sign())
        assert res.status_code == 503, res.content
        assert res.json()["code"] == "unavailable"
        assert 1 <= int(res["Retry-After"]) <= 30
        assert "WWW-Authenticate" not in res  # not a login problem
    assert cloudflare.certs.hits == 1


def test_a_certs_outage_is_unavailable_on_grpc_not_unauthenticated(cloudflare, grpc_channel):
    cloudflare.certs.status = 503
    stub = experiment_pb2_grpc.ExperimentServiceStub(grpc_channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.ListExps(common_pb2.CommonListReq(),
                      metadata=auth_metadata(cloudflare.sign()), timeout=10)
    assert err.value.code() is grpc.StatusCode.UNAVAILABLE


def test_a_certs_outage_on_the_admin_is_503_and_keeps_the_session(client, cloudflare):
    cloudflare.certs.status = 503
    res = client.get("/admin/", HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign())
    assert res.status_code == 503 and int(res["Retry-After"]) >= 1


def test_cli_login_during_a_certs_outage_is_503(client, cloudflare):
    cloudflare.certs.status = 503
    res = client.get("/auth/cli-login", {"port": "4000", "state": "s" * 32},
                     HTTP_CF_ACCESS_JWT_ASSERTION=cloudflare.sign())
    assert res.status_code == 503 and int(res["Retry-After"]) >= 1
