"""Query parameters a list or a view cannot honour are refused with the field and the fix,
never quietly ignored: `ordering` with a doubled '-', a `search` longer than any name, a
`format` no renderer has."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.tests.factories import UserFactory
from experiments.filters import SEARCH_MAX_CHARS
from experiments.tests.factories import make_exp

pytestmark = pytest.mark.django_db


@pytest.fixture
def api():
    user = UserFactory()
    client = APIClient()
    client.force_authenticate(user)
    client.user = user
    return client


@pytest.mark.parametrize("ordering", ["--id", "---created_at", "-", "id,--name"])
def test_an_ordering_with_more_than_one_minus_is_refused(api, ordering):
    response = api.get("/api/v1/exps", {"ordering": ordering})
    assert response.status_code == 400, response.content
    assert "cannot order by" in response.json()["ordering"][0]


def test_a_descending_ordering_still_works(api):
    first, second = (make_exp(creator=api.user, name=n) for n in ("a", "b"))
    response = api.get("/api/v1/exps", {"ordering": "-id"})
    assert [row["id"] for row in response.json()["results"]] == [second.pk, first.pk]


def test_a_search_longer_than_any_name_is_refused_naming_the_limit(api):
    make_exp(creator=api.user, name="a")
    assert api.get("/api/v1/exps", {"search": "a" * SEARCH_MAX_CHARS}).status_code == 200
    response = api.get("/api/v1/exps", {"search": "a" * (SEARCH_MAX_CHARS + 1)})
    assert response.status_code == 400
    assert str(SEARCH_MAX_CHARS) in response.json()["search"][0]


@pytest.mark.parametrize("path", ["/api/v1/exps", "/api/v1/exps/{id}", "/api/v1/analyses"])
def test_an_unknown_format_is_406_naming_the_formats_on_every_view(api, path):
    exp = make_exp(creator=api.user, name="f")
    response = api.get(path.format(id=exp.pk), {"format": "xml"})
    assert response.status_code == 406, response.content
    detail = response.json()["detail"]
    assert "format must be one of json" in detail and "'xml'" in detail
    assert api.get(path.format(id=exp.pk), {"format": "json"}).status_code == 200
