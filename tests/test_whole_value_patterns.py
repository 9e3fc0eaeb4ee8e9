"""A pattern check covers the whole value: a trailing newline is never accepted.

In Python's `re`, `$` also matches just before a final "\\n", so `PATTERN.match(value)` with a
pattern ending in `$` accepts "value\\n". Every identifier Falcon checks with a pattern is
checked with `fullmatch`; one test per place that does it.
"""
from __future__ import annotations

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from analysis.tests.factories import make_finished_exp
from core.errors import ValidationFailed

pytestmark = pytest.mark.django_db


def test_a_caller_chosen_analysis_id_with_a_newline_is_refused():
    from analysis.services import analysis_record_create

    exp = make_finished_exp()
    with pytest.raises(ValidationFailed) as info:
        analysis_record_create(exp_id=exp.pk, analysis_type="online", command="true",
                               creator_email=exp.creator.email, result_root="file:///tmp/r",
                               analysis_id="an-1\n")
    assert "analysis_id" in info.value.errors


def test_an_artifact_type_with_a_newline_is_refused():
    from experiments.services import artifact_create
    from experiments.tests.factories import make_exp

    exp = make_exp()
    exp.artifact.delete()
    with pytest.raises(ValidationFailed) as info:
        artifact_create(exp_id=exp.pk, path="", artifact_type="profiling\n")
    assert "artifact_type" in info.value.errors


def test_a_token_kid_with_a_newline_is_refused(client):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode({"sub": "x", "email": "a@example.com"}, key, algorithm="RS256",
                       headers={"kid": "key-1\n"})
    res = client.get("/api/v1/exps", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert res.status_code == 401
    assert "no usable 'kid'" in res.json()["detail"]


def test_a_cli_login_state_with_a_newline_is_refused(settings, client):
    settings.FALCON_AUTH_MODE = "cloudflare"
    res = client.get("/auth/cli-login", {"port": "2000", "state": "s" * 32 + "\n"})
    assert res.status_code == 400
    assert b"state must be" in res.content


@pytest.mark.parametrize("field,value", [("name", "trace-summary\n"),
                                         ("memory_limit", "2Gi\n")])
def test_a_catalog_name_or_quantity_with_a_newline_is_refused(field, value):
    from plugins.catalog import parse_catalog

    entry = {"name": "trace-summary", "description": "d", "command": "true",
             "artifact_types": ["profiling"], "timeout_seconds": 60,
             "resources": {"cpu_request": "1", "cpu_limit": "1", "memory_request": "1Gi",
                           "memory_limit": "2Gi"}}
    if field == "name":
        entry["name"] = value
    else:
        entry["resources"][field] = value
    with pytest.raises(ValueError):
        parse_catalog({"plugins": [entry]})
