"""Fuzz the HTTP API with schemathesis against a live server, from the server's own OpenAPI schema.

Every operation of /api/schema/ gets generated requests, valid and invalid (schemathesis's
positive and negative modes), sent over real HTTP to pytest-django's `live_server`, and every
answer goes through ALL of schemathesis's default checks: no 5xx, status codes and content
types the schema declares, bodies and headers matching the schema, invalid data refused, valid
data accepted, missing auth refused, unsupported methods refused, ... No check is turned off.
Valid (positive) cases are adjusted only where JSON Schema cannot state the server's rule
(`adjust_valid_case`): a configured cluster, an opaque cursor, 7 versus 7.0, quantities compared;
invalid ones only where the query string turns the invalid value into valid text.

Bounded and deterministic: a fixed number of examples per operation, derandomized, no deadline.
Runs on SQLite and on MariaDB/MySQL (whichever DATABASE_URL names).
"""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from analysis.tests.factories import make_analysis, make_finished_exp
from experiments.tests.factories import make_exp
from plugins.rules import resource_problems

pytestmark = pytest.mark.django_db(transaction=True)

# Every check stays on. A check turned off would be listed here with its reason.
EXCLUDED_CHECKS: list = []

MAX_EXAMPLES = 40


@pytest.fixture
def falcon_token(token_for):
    return token_for("fuzz@example.com")


@pytest.fixture
def api_schema(live_server, transactional_db, falcon_token, analyzer):
    """The live server's schema, with a few experiments and analyses in the database."""
    # A few experiments, so that generated ids sometimes name one.
    for _ in range(3):
        make_exp()
    make_analysis(exp=make_finished_exp())
    return schemathesis.openapi.from_url(live_server.url + "/api/schema/")


def _integral_floats_as_ints(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _integral_floats_as_ints(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integral_floats_as_ints(item) for item in value]
    return value


def adjust_valid_case(case) -> None:
    """Adjust valid (positive) cases to what the schema cannot state; invalid ones stay as
    generated, but for an invalid value a query string cannot carry (a scalar `label`, which
    arrives as valid text)."""
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if positive and case.operation.path in ("/api/v1/exps", "/api/v1/analyses") and case.query:
        # `cursor` is an opaque token only valid as the server gave it out (a `next` or
        # `previous` link): no schema can generate one, so valid cases go without it.
        case.query.pop("cursor", None)
    if positive and case.operation.path == "/api/v1/exps/compare" and case.query \
            and "baseline" in case.query:
        # The baseline must be one of `ids`: a relation between two parameters no schema
        # states. Valid cases take the first id.
        ids = case.query.get("ids") or []
        if ids:
            case.query["baseline"] = ids[0]
        else:
            case.query.pop("baseline")
    if positive and case.query and isinstance(case.query.get("label"), list):
        # Selectors on more label keys than an experiment can have (`MAX_LABELS`, counted over
        # every value and comma list) are a 400: a count no schema states. Valid cases keep
        # the values that fit.
        from experiments.labels import MAX_LABELS

        kept, keys = [], set()
        for value in case.query["label"]:
            more = {part.strip().split("=")[0] for part in str(value).split(",")
                    if part.strip()}
            if len(keys | more) > MAX_LABELS:
                break
            keys |= more
            kept.append(value)
        case.query["label"] = kept
        if not kept:
            case.query.pop("label")
    if not positive and case.query and "label" in case.query \
            and not isinstance(case.query["label"], list):
        # `label` is an array of selectors; an "invalid" case makes it a scalar (null, true, 0,
        # a string), but a query string has only text, so it is sent as `label=null`,
        # `label=true`, `label=0`: each a valid selector (that label is set), so the case is
        # valid. Such cases send a selector that is invalid as text instead.
        case.query["label"] = "=no-key"
    if positive and isinstance(case.body, (dict, list)):
        # JSON Schema counts 7.0 as an integer; the server, by design, takes only 7 (no
        # coercion: a float is refused wherever an integer is due, gRPC's rule too).
        case.body = _integral_floats_as_ints(case.body)
    body = case.body
    if (positive and case.operation.method.upper() == "POST"
            and case.operation.path == "/api/v1/exps"
            and isinstance(body, dict) and "cluster_name" in body):
        # A valid create must name a configured cluster, which the schema cannot list (the
        # clusters file is the deployment's): valid cases name the test cluster "local"
        # (conftest.py). Negative cases are left as generated: they must stay invalid.
        body["cluster_name"] = "local"
        if body.get("cloned_from") is not None:
            # `cloned_from` must name an existing experiment, which no schema can list: valid
            # cases name one of the seeded experiments.
            from experiments.models import Experiment

            body["cloned_from"] = Experiment.objects.order_by("pk").values_list(
                "pk", flat=True).first()
    if (positive and case.operation.method.upper() == "POST"
            and case.operation.path == "/api/v1/analyses"
            and isinstance(body, dict) and isinstance(body.get("resources"), dict)):
        # A resource override must be above 0, sensible (at most 1024 cores, 16Ti) and each
        # request at most its limit: comparisons of quantities no pattern states. Valid cases
        # drop the values that break them (`plugins.rules.resource_problems`).
        resources = body["resources"]
        while problems := resource_problems(
                {k: v for k, v in resources.items() if isinstance(v, str)}):
            for key in problems:
                resources.pop(key, None)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case, falcon_token):
    adjust_valid_case(case)
    case.call_and_validate(headers={"Authorization": f"Bearer {falcon_token}"},
                           excluded_checks=EXCLUDED_CHECKS)
