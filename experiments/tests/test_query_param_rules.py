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


@pytest.mark.parametrize("path,param", [
    ("/api/v1/exps", "status"), ("/api/v1/exps", "page_size"), ("/api/v1/exps", "ordering"),
    ("/api/v1/exps", "cursor"), ("/api/v1/exps", "search"), ("/api/v1/exps", "creator"),
    ("/api/v1/exps", "format"), ("/api/v1/analyses", "status"),
    ("/api/v1/analyses", "page_size"), ("/api/v1/exps/{id}/artifacts", "page_size"),
    ("/api/v1/exps/{id}/artifacts", "after"), ("/api/v1/exps/{id}/logs", "role"),
    ("/api/v1/exps/diff", "ids")])
@pytest.mark.parametrize("empty", ["", " "])
def test_an_empty_query_value_is_a_400_naming_the_parameter_on_every_endpoint(
        api, path, param, empty):
    """`?status=` used to list everything and `?page_size=` to give the default page."""
    exp = make_exp(creator=api.user, name="e")
    response = api.get(path.format(id=exp.pk) + f"?{param}={empty}")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    assert "is empty" in body[param][0]


@pytest.mark.parametrize("blank,refused", [("\u00a0", True), ("\u2028 \t", True),
                                           ("\u0085", False), ("\x1c", False)])
def test_blank_means_what_the_schemas_pattern_says(api, blank, refused):
    """The schema's `pattern: \\S` is an ECMA-262 expression, whose white space has no U+0085
    and no U+001C-U+001F (Python's `str.strip()` has them): a value the schema calls non-blank
    is a value, found by the OpenAPI fuzz as a schema-valid request answered 400."""
    response = api.get("/api/v1/exps", {"exp_type": blank})
    assert (response.status_code == 400) is refused, response.content


def test_a_parameter_without_a_value_is_refused_too(api):
    response = api.get("/api/v1/exps?status")
    assert response.status_code == 400
    assert "is empty" in response.json()["status"][0]


def test_a_blank_item_of_a_comma_list_is_still_dropped(api):
    make_exp(creator=api.user, name="r")
    assert api.get("/api/v1/exps?status=Created,").status_code == 200


def test_a_creator_longer_than_an_email_is_a_400_naming_the_limit(api):
    """A 70,000-character creator reached the database whole."""
    from accounts.emails import MAX_EMAIL_CHARS

    response = api.get("/api/v1/exps", {"creator": "a" * 70_000})
    assert response.status_code == 400, response.content
    assert str(MAX_EMAIL_CHARS) in response.json()["creator"][0]
    assert api.get("/api/v1/exps", {"creator": api.user.email}).status_code == 200


@pytest.mark.parametrize("filterset", ["jobs.filters.JobFilter",
                                       "artifacts.filters.ArtifactFilter"])
def test_a_search_longer_than_every_searched_column_is_refused_before_any_query(filterset):
    """SQLite refuses a LIKE pattern over 50,000 bytes ("LIKE or GLOB pattern too complex"),
    which was answered as a database outage; the filter refuses it first, naming the limit."""
    from django.utils.module_loading import import_string

    from core.errors import ValidationFailed

    cls = import_string(filterset)
    with pytest.raises(ValidationFailed) as caught:
        cls.validate({"search": "a" * 70_000})
    assert "at most" in caught.value.errors["search"][0]
    values = cls.validate({"search": "a"})
    list(cls.apply(cls._meta.model.objects.all(), values))


@pytest.mark.parametrize("value", [",", " , ", ",,"])
def test_a_list_of_only_blanks_is_empty_too(api, value):
    response = api.get("/api/v1/exps", {"status": value})
    assert response.status_code == 400, response.content
    assert "only blanks" in response.json()["status"][0]


def test_the_renderer_chosen_follows_accept_and_format_each_time(auth_api):
    """`StrictContentNegotiation` remembers DRF's choice per Accept header and format: a
    browser's Accept gets the browsable API, JSON clients JSON, `?format=` wins, the same
    requests again get the same, and a refusal stays a refusal."""
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    for _ in range(2):
        assert auth_api.get("/api/v1/exps").headers["Content-Type"] == "application/json"
        assert auth_api.get("/api/v1/exps", HTTP_ACCEPT=browser).headers[
            "Content-Type"].startswith("text/html")
        assert auth_api.get("/api/v1/exps?format=json", HTTP_ACCEPT=browser).headers[
            "Content-Type"] == "application/json"
        assert auth_api.get("/api/v1/exps", HTTP_ACCEPT="application/json; indent=4").headers[
            "Content-Type"] == "application/json"  # orjson's renderer writes no parameters
        assert auth_api.get("/api/v1/exps", HTTP_ACCEPT="image/png").status_code == 406


def test_every_boolean_query_parameter_reads_one_way(api):
    """`purge`, `overwrite`, `all` and `timestamps` share one reader (`core.http.params`):
    true/false/1/0 in any case, anything else a 400 keyed by the parameter."""
    exp = make_exp(creator=api.user, name="b")
    other = make_exp(creator=api.user, name="c")
    refused = [
        api.delete(f"/api/v1/exps/{exp.pk}?purge=yes"),
        api.patch(f"/api/v1/exps/{exp.pk}/labels?overwrite=yes", {"labels": {"a": "1"}},
                  format="json"),
        api.get(f"/api/v1/exps/diff?ids={exp.pk},{other.pk}&all=yes"),
        api.get(f"/api/v1/exps/{exp.pk}/logs?timestamps=yes"),
        api.delete("/api/v1/analyses/an-1?purge=yes"),
    ]
    for response, name in zip(refused, ("purge", "overwrite", "all", "timestamps", "purge")):
        assert response.status_code == 400, (name, response.content)
        assert "must be true or false; got 'yes'" in str(response.json()[name]), name
    assert api.get(f"/api/v1/exps/diff?ids={exp.pk},{other.pk}&all=TRUE").status_code == 200
