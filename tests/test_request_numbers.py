"""Every number a request carries is ASCII decimal within bounds: anything else is a 400.

The query and path parameters are read from the server's own OpenAPI schema, so a parameter
added later is covered without editing this module. Each gets non-ASCII digits (superscripts,
Arabic-Indic, full-width), signs, spaces, `_`, hexadecimal and huge values; the answer is never
a 5xx, and a numeric parameter answers 400 naming it.
"""
from __future__ import annotations

from urllib.parse import quote

import pytest
from django.test import Client

from core.limits.numbers import BadNumber, parse_decimal
from analysis.tests.factories import make_analysis
from experiments.tests.factories import make_exp

pytestmark = pytest.mark.django_db

BAD_NUMBERS = ["²²²²", "١٢", "１２", "+1", "-1", " 1", "1 ", "1_0", "0x10", "1e3", "1.0", "",
               "9" * 20, "9" * 400, "18446744073709551616", "9223372036854775808", "\x001",
               "1\n"]


@pytest.mark.parametrize("raw", BAD_NUMBERS)
def test_parse_decimal_refuses_everything_but_ascii_digits_in_bounds(raw):
    with pytest.raises(BadNumber):
        parse_decimal(raw, minimum=1, maximum=2**63 - 1)


def test_parse_decimal_accepts_ascii_digits_in_bounds():
    assert parse_decimal("0042", minimum=1, maximum=100) == 42
    with pytest.raises(BadNumber, match="from 1 to 100"):
        parse_decimal("101", minimum=1, maximum=100)


def _schema_parameters():
    """`(path template, method, parameter name, location, is numeric)` of every operation."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    out = []
    for path, item in schema["paths"].items():
        for method, op in item.items():
            for param in op.get("parameters", []):
                spec = param.get("schema", {})
                numeric = (spec.get("type") == "integer"
                           or spec.get("items", {}).get("type") == "integer"
                           or spec.get("pattern", "").startswith("^[0-9]"))
                listed = spec.get("type") == "array" or param.get("explode") is not None and \
                    spec.get("type") == "array"
                out.append((path, method, param["name"], param["in"], numeric, listed))
    return out


PARAMETERS = _schema_parameters()


def test_the_schema_has_the_numeric_parameters_this_module_is_about():
    names = {(name, where) for _, _, name, where, numeric, _ in PARAMETERS if numeric}
    assert {("exp_id", "path"), ("page_size", "query"), ("id", "query")} <= names


@pytest.mark.parametrize("path,method,name,where,numeric,listed", PARAMETERS,
                         ids=[f"{m}:{p}:{n}" for p, m, n, *_ in PARAMETERS])
def test_no_parameter_answers_5xx_and_numbers_answer_400(path, method, name, where, numeric,
                                                         listed, token_for, analyzer):
    exp = make_exp()
    analysis = make_analysis()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_for('alice@example.com')}")
    for raw in BAD_NUMBERS:
        if where == "path":
            if raw == "" or "\x00" in raw:
                continue  # an empty or NUL segment is another URL (404), not this parameter
            url, query = path.replace("{" + name + "}", quote(raw, safe="")), {}
        else:
            if raw == "" or (listed and raw.strip() != raw):
                # No value is no filter; a comma list trims its items ("1, 2") by design.
                continue
            url = path.replace("{exp_id}", str(exp.pk)).replace("{analysis_id}",
                                                                analysis.analysis_id)
            query = {name: raw}
        res = getattr(client, method)(url, query if method == "get" else None,
                                      QUERY_STRING="&".join(f"{k}={quote(v)}"
                                                            for k, v in query.items()))
        assert res.status_code < 500, (method, url, name, raw, res.status_code)
        if numeric:
            assert res.status_code == 400, (method, url, name, raw, res.status_code)
            assert name in res.json(), res.json()


# The CLI login's `port` (`?port=²²²²`): accounts/tests/test_attacks.py.


@pytest.mark.parametrize("last", ["²", "+1", " 1", "1_0", "9" * 30, "-1"])
def test_grpc_page_token_with_a_bad_number_is_invalid_argument(last):
    import base64

    from core.errors import ValidationFailed
    from core.grpc.paging import decode_page_token

    token = base64.urlsafe_b64encode(f"k1:{last}".encode()).decode().rstrip("=")
    with pytest.raises(ValidationFailed, match="page_token"):
        decode_page_token(token)
