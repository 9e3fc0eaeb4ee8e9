"""Controllers authenticate to the gRPC API with a Cloudflare Access service token in production.

An offline stand-in for the Access edge hands out the service token's JWT as Cloudflare does
(the `CF_Authorization` cookie, for the `CF-Access-Client-Id` / `-Secret` headers), signed by the
test's Access team (`accounts.tests.cloudflare`); the API server verifies it like any token.
"""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ImproperlyConfigured

from controllers.contract import ListFilter
from controllers.service_token import (
    CloudflareServiceToken, CredentialsError, token_source_from_settings,
)
from controllers.grpc_client import GrpcFalconAPI
from experiments.tests.factories import make_exp
from falcon_site.grpc.testing import INTERNAL_TOKEN, grpc_server  # noqa: F401 (fixture)

CLIENT_ID = "falcon-controllers.access"
SECRET = "s3cret-0123456789"


@pytest.fixture
def edge(cloudflare):
    """An Access edge on loopback: service-token headers in, `CF_Authorization` cookie out."""
    state = {"ttl": 3600, "requests": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            state["requests"] += 1
            if (self.headers.get("CF-Access-Client-Id") == CLIENT_ID
                    and self.headers.get("CF-Access-Client-Secret") == SECRET):
                import time

                now = int(time.time())
                token = cloudflare.sign(cloudflare.service_claims(
                    CLIENT_ID, iat=now, nbf=now, exp=now + state["ttl"]))
                self.send_response(200)
                self.send_header("Set-Cookie", f"CF_Authorization={token}; Path=/; HttpOnly")
            else:
                self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):  # keep tokens out of the test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/v1/auth/config", state
    server.shutdown()
    server.server_close()


def test_controller_calls_the_api_with_a_service_token(edge, grpc_server, settings,  # noqa: F811
                                                       cloudflare):
    url, state = edge
    settings.FALCON_CF_SERVICE_TOKENS = [CLIENT_ID]
    exp = make_exp()
    tokens = CloudflareServiceToken(url, CLIENT_ID, SECRET)
    with GrpcFalconAPI(f"127.0.0.1:{grpc_server.port}", tokens) as api:
        for _ in range(3):
            assert [e.id for e in api.list_exps(ListFilter())] == [exp.pk]
    assert tokens.fetches == 1  # cached until shortly before it expires


def test_service_token_not_allowed_by_operators_is_refused(edge, grpc_server, settings,  # noqa: F811
                                                           cloudflare):
    from core.errors import PermissionDenied

    url, _ = edge
    settings.FALCON_CF_SERVICE_TOKENS = []
    with GrpcFalconAPI(f"127.0.0.1:{grpc_server.port}",
                       CloudflareServiceToken(url, CLIENT_ID, SECRET)) as api:
        with pytest.raises(PermissionDenied):
            api.list_exps(ListFilter())


def test_a_token_near_its_expiry_is_fetched_again(edge):
    url, state = edge
    state["ttl"] = 60  # shorter than the 300 s margin: every call needs a fresh one
    tokens = CloudflareServiceToken(url, CLIENT_ID, SECRET)
    first, second = tokens(), tokens()
    assert tokens.fetches == 2 and first and second


def test_a_wrong_secret_says_what_to_check_without_the_secret(edge):
    url, _ = edge
    with pytest.raises(CredentialsError) as err:
        CloudflareServiceToken(url, CLIENT_ID, "wrong-secret")()
    assert "HTTP 403" in str(err.value) and "client id and secret" in str(err.value)
    assert "wrong-secret" not in str(err.value)


def test_cloudflare_mode_needs_the_controllers_service_token(cloudflare, settings):
    settings.FALCON_CONTROLLER_ACCESS_URL = ""
    with pytest.raises(ImproperlyConfigured, match="FALCON_CF_CLIENT_ID"):
        token_source_from_settings()


def test_local_mode_uses_the_internal_token(settings):
    settings.FALCON_AUTH_MODE = "local"
    settings.FALCON_INTERNAL_TOKEN = INTERNAL_TOKEN
    assert token_source_from_settings()() == INTERNAL_TOKEN
