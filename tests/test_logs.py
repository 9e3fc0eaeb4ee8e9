"""Structured logs of the whole platform (runlocal: HTTP, gRPC, both controllers) through a full
create, run and abort flow: JSON lines with the request and entity ids, and no token or secret."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_e2e import create, falcon, get, platform, wait_until  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


@pytest.fixture(autouse=True)
def _json_debug_logs(monkeypatch):
    """Every process of the platform logs JSON lines at DEBUG (everything libraries log too)."""
    monkeypatch.setenv("FALCON_LOG_FORMAT", "json")
    monkeypatch.setenv("FALCON_LOG_LEVEL", "DEBUG")


def secrets_of(tmp: Path) -> dict[str, str]:
    """The credentials the flow used: the CLI's cached tokens, the internal token, the secret
    key and the signing key (each line of its PEM body)."""
    found: dict[str, str] = {}
    for path in (tmp / "cli").rglob("*"):
        if path.is_file():
            for token in JWT.findall(path.read_text(errors="replace")):
                found[f"cli token in {path.name}"] = token
    var = tmp / "var"
    found["internal token"] = (var / "internal-token").read_text().strip()
    found["django secret key"] = (var / "django-secret-key").read_text().strip()
    pem = [line for line in (var / "jwt-signing-key.pem").read_text().splitlines()
           if line and not line.startswith("-----")]
    found.update({f"signing key line {i}": line for i, line in enumerate(pem[:3])})
    return found


def test_full_flow_logs_json_with_ids_and_never_a_secret(platform):
    tmp = Path(platform["_tmp"])
    done = create(platform, "logged",
                  {"main": {"command": 'echo done > "$FALCON_ARTIFACT_PATH/out"'}})
    assert falcon(platform, "exp", "wait", str(done["id"]), "--interval", "0.3").returncode == 0
    long = create(platform, "logged-long", {"main": {"command": "sleep 600"}})
    wait_until(lambda: get(platform, long["id"])["status"] == "Running")
    assert falcon(platform, "exp", "abort", str(long["id"])).returncode == 0
    falcon(platform, "exp", "wait", str(long["id"]), "--interval", "0.3")
    assert falcon(platform, "exp", "describe", str(long["id"])).returncode == 0

    text = (tmp / "runlocal.log").read_text()
    secrets = secrets_of(tmp)
    assert any(name.startswith("cli token") for name in secrets), "the CLI cached no token"
    for name, secret in secrets.items():
        assert len(secret) >= 16 and secret not in text, f"the log holds the {name}"

    records = [json.loads(line) for line in text.splitlines() if line.startswith('{"time"')]
    assert len(records) > 20
    # Every record is structured: time, level, logger, message, request id.
    assert all({"time", "level", "logger", "message", "request_id"} <= set(r) for r in records)
    transitions = [r for r in records if r["logger"] == "falcon.transitions"]
    for exp in (done, long):
        mine = [r for r in transitions if r.get("exp_id") == exp["id"]]
        assert any(r["message"].startswith(f"Experiment {exp['id']}: ")
                   and ("-> Succeeded" in r["message"] or "-> Aborted" in r["message"])
                   and r["message"].endswith("by internal service (exp)") for r in mine)
        job_id = exp["jobs"][0]["id"]
        assert any(r.get("job_id") == job_id for r in mine)
    # The abort came over HTTP: its line carries the request id of its HTTP request line.
    abort = next(r for r in transitions if r.get("exp_id") == long["id"]
                 and "Aborting" in r["message"] and "Experiment" in r["message"])
    http = [r for r in records if r["logger"] == "falcon.http"
            and r["request_id"] == abort["request_id"]]
    assert abort["request_id"] != "-" and http
    assert http[0]["message"].startswith(f"POST /api/v1/exps/{long['id']}/abort 200")
    assert http[0]["exp_id"] == long["id"]
    # Controllers' calls carry their own request ids on the gRPC side.
    assert any(r["logger"] == "falcon.grpc" and r["request_id"] != "-" for r in records)
