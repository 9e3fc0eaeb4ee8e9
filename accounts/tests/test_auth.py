"""Access-JWT authentication with the local issuer: accepted and refused tokens (never a 500)."""
from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from accounts.issuer import local_issuer, local_subject
from accounts.models import User

pytestmark = pytest.mark.django_db


def sign(claims: dict, *, key=None, kid=None, alg="RS256", headers=None) -> str:
    issuer = local_issuer()
    return jwt.encode(claims, key or issuer.key, algorithm=alg,
                      headers={"kid": kid or issuer.kid, **(headers or {})})


def claims(**overrides) -> dict:
    now = int(time.time())
    base = {"aud": ["falcon-local"], "iss": "falcon-local", "sub": "sub-1",
            "email": "carol@example.com", "iat": now, "nbf": now, "exp": now + 600,
            "type": "app"}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def get(api, token=None, **headers):
    if token is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return api.get("/api/v1/auth/whoami", **headers)


def test_valid_token_registers_the_user(api):
    res = get(api, sign(claims()))
    assert res.status_code == 200, res.content
    assert res.json() == {"kind": "user", "user_id": "sub-1", "email": "carol@example.com",
                          "is_staff": False}
    assert User.objects.filter(pk="sub-1", email="carol@example.com").count() == 1
    assert get(api, sign(claims())).status_code == 200
    assert User.objects.count() == 1


def test_aud_as_string_is_accepted(api):
    assert get(api, sign(claims(aud="falcon-local"))).status_code == 200


def test_token_from_cf_header_and_cookie(api):
    token = sign(claims())
    assert api.get("/api/v1/auth/whoami", HTTP_CF_ACCESS_JWT_ASSERTION=token).status_code == 200
    api.cookies["CF_Authorization"] = token
    assert api.get("/api/v1/auth/whoami").status_code == 200


def forged_hs256_with_public_key() -> str:
    pem = local_issuer().key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = {"alg": "HS256", "typ": "JWT", "kid": local_issuer().kid}
    import hashlib
    import hmac

    def b64(obj):
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    signing_input = f"{b64(header)}.{b64(claims())}"
    sig = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(sig).rstrip(b'=').decode()}"


def unsigned_token() -> str:
    return jwt.encode(claims(), None, algorithm="none", headers={"kid": local_issuer().kid})


@pytest.mark.parametrize("make_token,reason", [
    (lambda: sign(claims(exp=int(time.time()) - 3600)), "expired"),
    (lambda: sign(claims(exp=None)), "exp"),
    (lambda: sign(claims(iat=None)), "iat"),
    (lambda: sign(claims(aud=["someone-else"])), "audience"),
    (lambda: sign(claims(iss="https://evil.cloudflareaccess.com")), "issuer"),
    (unsigned_token, "algorithm"),
    (forged_hs256_with_public_key, "algorithm"),
    (lambda: sign(claims(), key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
     "signature"),
    (lambda: sign(claims(), kid="unknown-kid"), "kid"),
    (lambda: sign(claims(), kid="../../etc/passwd"), "kid"),
    (lambda: "not-a-jwt", "well-formed"),
    (lambda: "a" * 100_000, "longer"),
    (lambda: sign(claims(sub="")), "identity"),
    (lambda: sign(claims(email=None, common_name="svc.access")), "identity"),
])
def test_bad_tokens_are_401_with_a_reason(api, make_token, reason):
    res = get(api, make_token())
    assert res.status_code == 401, res.content
    assert reason in res.json()["detail"]
    assert not User.objects.exists()


def test_no_token_is_401_with_bearer_challenge(api):
    res = get(api)
    assert res.status_code == 401 and res["WWW-Authenticate"].startswith("Bearer")


def test_local_token_endpoint(api):
    res = api.post("/api/v1/auth/token", {"email": "dave@example.com"}, format="json")
    assert res.status_code == 201
    body = res.json()
    assert body["expires_at"] > time.time()
    who = get(api, body["token"]).json()
    assert who["email"] == "dave@example.com"
    assert who["user_id"] == local_subject("dave@example.com")
    assert api.post("/api/v1/auth/token", {"email": "nope"}, format="json").status_code == 400


def test_local_endpoints_are_off_in_cloudflare_mode(api, settings):
    settings.FALCON_AUTH_MODE = "cloudflare"
    assert api.post("/api/v1/auth/token", {"email": "x@example.com"},
                    format="json").status_code == 404
    assert api.get("/api/v1/auth/jwks").status_code == 404


def test_signing_key_is_created_once_with_0600(settings):
    import stat

    kid = local_issuer().kid
    mode = stat.S_IMODE(settings.FALCON_LOCAL_SIGNING_KEY.stat().st_mode)
    assert mode == 0o600
    local_issuer.cache_clear()
    assert local_issuer().kid == kid


@pytest.mark.django_db(transaction=True)
def test_verifier_fetches_keys_from_a_jwks_url(live_server, settings, api):
    """The PyJWKClient path: keys come from the server's JWKS over HTTP, as in production."""
    settings.FALCON_AUTH_JWKS_URL = f"{live_server.url}/api/v1/auth/jwks"
    from accounts.verifier import default_verifier

    assert isinstance(default_verifier().keys, jwt.PyJWKClient)
    assert get(api, sign(claims())).status_code == 200
    assert get(api, sign(claims(), kid="rotated-away")).status_code == 401


def test_jwks_endpoint_serves_the_public_key(api):
    keys = api.get("/api/v1/auth/jwks").json()["keys"]
    assert [k["kid"] for k in keys] == [local_issuer().kid]
    assert keys[0]["kty"] == "RSA" and "d" not in keys[0]


def test_a_createsuperuser_operator_can_log_in_with_a_local_token(api):
    ops = User.objects.create_superuser("ops@example.com", password="pw-for-tests")
    res = api.post("/api/v1/auth/token", {"email": "ops@example.com"}, format="json")
    who = get(api, res.json()["token"])
    assert who.status_code == 200, who.content
    assert who.json() == {"kind": "user", "user_id": ops.user_id, "email": "ops@example.com",
                          "is_staff": True}


@pytest.mark.parametrize("overrides,field", [({"sub": "s" * 300}, "sub"),
                                             ({"email": "a" * 290 + "@example.com"}, "email")])
def test_over_long_identity_claims_are_refused_not_truncated(api, overrides, field):
    res = get(api, sign(claims(**overrides)))
    assert res.status_code == 401 and field in res.json()["detail"]
    assert not User.objects.exists()


def test_numeric_date_claims_must_be_numbers(api):
    res = get(api, sign(claims(exp=str(int(time.time()) + 600))))
    assert res.status_code == 401 and "exp" in res.json()["detail"]
