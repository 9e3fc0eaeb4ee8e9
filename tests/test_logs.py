"""Structured logs of the whole platform (runlocal: HTTP, gRPC, the controllers, the analyzer)
through a full create, run, analyse and abort flow: every line a JSON object, with the request
and entity ids, and no token or secret."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_e2e import create, database_url, falcon, get, running_platform, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


@pytest.fixture(autouse=True)
def _json_debug_logs(monkeypatch):
    """Every process of the platform logs JSON lines at DEBUG (everything libraries log too)."""
    monkeypatch.setenv("FALCON_LOG_FORMAT", "json")
    monkeypatch.setenv("FALCON_LOG_LEVEL", "DEBUG")


@pytest.fixture
def platform(_json_debug_logs, tmp_path):
    """A platform of this test's own: its processes start with the JSON, DEBUG environment."""
    with running_platform(tmp_path, database_url()) as env:
        yield env


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
    res = falcon(platform, "analysis", "create", "--exp", str(done["id"]), "--command",
                 'echo analysed; echo \'{"n": 1}\' > "$FALCON_RESULT_FILE"', "-o", "json")
    assert res.returncode == 0, res.stderr
    analysis_id = json.loads(res.stdout)["id"]
    wait_until(lambda: json.loads(falcon(platform, "analysis", "get", analysis_id, "-o",
                                         "json").stdout)["status"] == "succeeded")
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

    # Every line of every process is a JSON object: runserver's access lines, what the
    # commands print ("Falcon is running"), the analyzer's lines.
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
    assert len(records) > 20 and all(isinstance(r, dict) for r in records)
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
    # runserver's access line of the abort, with its fields and the same request id.
    [access] = [r for r in records if r["logger"] == "django.server"
                and r["request_id"] == abort["request_id"]]
    assert (access["method"], access["path"], access["status"]) == (
        "POST", f"/api/v1/exps/{long['id']}/abort", 200)
    # Every line naming the analysis carries its id and its experiment's, in the API server
    # (transitions) and in the analyzer controller; the analyzer served the create under the
    # id of the HTTP request that asked for it.
    # (An HTTP line names it by its path: its `falcon.http` line carries the path's id, the
    # access line of runserver the request id they share.)
    about = [r for r in records if analysis_id in r["message"]]
    assert {r["logger"] for r in about} >= {"falcon.transitions", "falcon.controllers.analyzer"}
    for r in about:
        if r["logger"] == "falcon.http":
            assert r.get("analysis_id") == analysis_id, r
        elif r["logger"] != "django.server":
            assert (r.get("analysis_id"), r.get("exp_id")) == (analysis_id, done["id"]), r
    [created] = [r for r in about if r["logger"] == "falcon.controllers.analyzer.server"
                 and r["message"].startswith(f"analysis {analysis_id}: created online")]
    [post] = [r for r in records if r["logger"] == "falcon.http"
              and r["message"].startswith("POST /api/v1/analyses 201")]
    assert created["request_id"] == post["request_id"] != "-"
