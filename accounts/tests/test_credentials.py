"""`accounts.verifier.credential_from`: the one precedence of credentials
(decisions.md#dec-sec-auth)."""
from __future__ import annotations

import pytest

from accounts.verifier import credential_from


def pick(headers: dict[str, str], cookies: dict[str, str] | None = None):
    credential = credential_from(lambda name: headers.get(name), (cookies or {}).get)
    return None if credential is None else (credential.token, credential.source)


@pytest.mark.parametrize("headers,cookies,expected", [
    ({}, {}, None),
    ({}, {"CF_Authorization": " c "}, ("c", "cookie")),
    ({"authorization": "Bearer b"}, {"CF_Authorization": "c"}, ("b", "authorization")),
    # A bearer with nothing after it is presented, and refused by the verifier: no fallback.
    ({"authorization": "Bearer "}, {"CF_Authorization": "c"}, ("", "authorization")),
    ({"authorization": "bearer b"}, {}, ("b", "authorization")),
    # Another scheme is not an access token: the cookie is used (and CSRF-checked).
    ({"authorization": "Basic Zm9v"}, {"CF_Authorization": "c"}, ("c", "cookie")),
    ({"cf-access-token": "t", "authorization": "Bearer b"}, {"CF_Authorization": "c"},
     ("t", "cf-access-token")),
    ({"cf-access-jwt-assertion": "a", "cf-access-token": "t", "authorization": "Bearer b"},
     {"CF_Authorization": "c"}, ("a", "cf-access-jwt-assertion")),
    ({"cf-access-jwt-assertion": "  "}, {"CF_Authorization": "c"}, ("c", "cookie")),
])
def test_headers_win_over_the_cookie_in_one_order(headers, cookies, expected):
    assert pick(headers, cookies) == expected
    if expected is not None:
        credential = credential_from(lambda name: headers.get(name), cookies.get)
        assert credential.from_cookie is (expected[1] == "cookie")
