"""Exact keyset pages over HTTP for every allowed ordering (decisions.md#dec-paging).

Experiments share their sort keys (one `created_at`, a few names, statuses and priorities); a
client walks the list 10 at a time while, between page fetches, experiments are created,
deleted (seen ones) and moved to another status. Every row that existed throughout with an
unchanged sort key must be seen exactly once, in the order asked for.
"""
from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from urllib.parse import parse_qs, urlsplit

import pytest

from accounts.issuer import local_subject
from accounts.tests.factories import UserFactory
from experiments.models import Experiment
from experiments.tests.factories import make_exp

ORDERINGS = ["created_at", "updated_at", "name", "status", "priority", "id"]
T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def alice(db):
    return UserFactory(user_id=local_subject("alice@example.com"), email="alice@example.com")


def _make_rows(alice, n: int = 36) -> list[int]:
    ids = [make_exp(creator=alice, name=f"same{i % 3}").pk for i in range(n)]
    Experiment.objects.update(created_at=T0, updated_at=T0)
    for i, pk in enumerate(ids):
        Experiment.objects.filter(pk=pk).update(priority=i % 2,
                                                status=("Created", "Running")[i % 4 == 0])
    return ids


def _key(row: dict, field: str):
    return row[field] if field != "id" else row["id"]


def _walk(api, ordering: str, between_pages) -> list[dict]:
    seen, url, page_no = [], f"/api/v1/exps?page_size=10&ordering={ordering}", 0
    while url:
        res = api.get(url)
        assert res.status_code == 200, res.json()
        body = res.json()
        seen += body["results"]
        url = body["next"]
        between_pages(page_no, seen)
        page_no += 1
    return seen


@pytest.mark.parametrize("ordering", [o for f in ORDERINGS for o in (f, f"-{f}")])
def test_no_row_is_missed_or_repeated_while_others_change(auth_api, alice, ordering):
    ids = _make_rows(alice)
    touched: set[int] = set()
    made = [0]

    def between_pages(page_no, seen):
        seen_ids = [row["id"] for row in seen]
        # Delete a row already seen (it must be terminal to be deleted).
        victim = seen_ids[page_no % len(seen_ids)]
        if Experiment.objects.filter(pk=victim).exists():
            Experiment.objects.filter(pk=victim).update(status="Aborted")
            touched.add(victim)
            assert auth_api.delete(f"/api/v1/exps/{victim}").status_code == 204
        # Create one, with the shared keys.
        new = make_exp(creator=alice, name=f"same{made[0] % 3}")
        Experiment.objects.filter(pk=new.pk).update(created_at=T0, updated_at=T0)
        made[0] += 1
        touched.add(new.pk)
        # Move an unseen row to another status (its updated_at changes too).
        unseen = [pk for pk in ids if pk not in seen_ids and pk not in touched]
        if unseen:
            mover = unseen[len(unseen) // 2]
            Experiment.objects.filter(pk=mover).update(
                status="Failed", updated_at=datetime.now(timezone.utc))
            touched.add(mover)

    seen = _walk(auth_api, ordering, between_pages)
    seen_ids = [row["id"] for row in seen]
    steady = [pk for pk in ids if pk not in touched]
    assert steady, "the walk must keep rows that never change"
    for pk in steady:
        assert seen_ids.count(pk) == 1, (ordering, pk, seen_ids)
    # Rows whose keys never changed are in the order asked for, ties broken by id.
    field, desc = ordering.lstrip("-"), ordering.startswith("-")
    steady_rows = [row for row in seen if row["id"] in set(steady)]
    keys = [(_key(row, field), row["id"]) for row in steady_rows]
    assert keys == sorted(keys, reverse=desc)
    if field in ("created_at", "name", "priority", "id"):  # keys no change above moves
        assert len(seen_ids) == len(set(seen_ids)), (ordering, seen_ids)


def test_previous_links_walk_back_to_the_first_page(auth_api, alice):
    _make_rows(alice, n=25)
    first = auth_api.get("/api/v1/exps?page_size=10&ordering=name").json()
    second = auth_api.get(first["next"]).json()
    third = auth_api.get(second["next"]).json()
    assert third["next"] is None and len(third["results"]) == 5
    back = auth_api.get(third["previous"]).json()
    assert [r["id"] for r in back["results"]] == [r["id"] for r in second["results"]]
    back = auth_api.get(back["previous"]).json()
    assert [r["id"] for r in back["results"]] == [r["id"] for r in first["results"]]
    assert first["previous"] is None and back["previous"] is None


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _cursor(payload: dict) -> str:
    return _b64(json.dumps(payload))


@pytest.mark.parametrize("cursor", [
    "garbage", _b64("p=1"), _b64("o=1&p=2020-01-01"), _b64("p=not-a-time&o=3"), "%%%",
    _cursor({"v": 1, "o": ["-created_at", "-id"], "k": ["not a timestamp", 1], "r": 0}),
    _cursor({"v": 1, "o": ["-created_at", "-id"], "k": ["2025-01-01T00:00:00", 1], "r": 0}),
    _cursor({"v": 1, "o": ["-created_at", "-id"], "k": ["2025-01-01T00:00:00+00:00", 2**70],
             "r": 0}),
    _cursor({"v": 1, "o": ["-created_at", "-id"], "k": ["2025-01-01T00:00:00+00:00", "1"],
             "r": 0}),
    _cursor({"v": 1, "o": ["-created_at", "-id"], "k": ["2025-01-01T00:00:00+00:00"], "r": 0}),
    _cursor({"v": 1, "o": ["-created_at", "-id"], "k": ["2025-01-01T00:00:00+00:00", 1],
             "r": 7}),
    _cursor({"v": 1, "o": ["name", "id"], "k": ["a", 1], "r": 0}),  # another ordering
    _cursor({"v": 2, "o": ["-created_at", "-id"], "k": ["2025-01-01T00:00:00+00:00", 1]}),
    _cursor([1, 2, 3]), "A" * 5000, _b64("[" * 1500),  # nested past Python's recursion
    # in UTC, years 10000 and 0: no database or Python datetime holds them
    _cursor({"v": 1, "o": ["-created_at", "-id"], "k": ["9999-12-31T23:59:59-23:00", 1],
             "r": 0}),
    _cursor({"v": 1, "o": ["-created_at", "-id"], "k": ["0001-01-01T00:00:00+23:59", 1],
             "r": 0}),
    _cursor({"v": 1, "o": ["name", "id"], "k": ["\ud800", 1], "r": 0}),  # a lone surrogate
])
def test_forged_or_garbled_cursor_is_a_400_naming_cursor(auth_api, alice, cursor):
    make_exp(creator=alice)
    res = auth_api.get("/api/v1/exps", {"cursor": cursor})
    assert res.status_code == 400, (cursor, res.status_code)
    assert "cursor" in res.json() and res.json()["code"] == "invalid"


def test_a_cursor_of_another_ordering_is_refused_not_misread(auth_api, alice):
    _make_rows(alice, n=12)
    first = auth_api.get("/api/v1/exps?page_size=5&ordering=name").json()
    cursor = parse_qs(urlsplit(first["next"]).query)["cursor"][0]
    res = auth_api.get("/api/v1/exps", {"cursor": cursor, "ordering": "priority"})
    assert res.status_code == 400 and "another ordering" in res.json()["cursor"][0]


@pytest.mark.django_db
@pytest.mark.parametrize("count,page_size", [(0, 5), (1, 5), (5, 5), (6, 5), (9, 1), (9, 50)])
def test_page_rows_reads_the_ids_and_converts_the_page_edges(alice, count, page_size):
    """`core.http.keyset.page_rows` returns the rows `list(qs[:page_size + 1])` does, by id, and the
    page's first and last rows with every key as the ORM converts it (the cursors' values)."""
    from core.http import keyset

    for i in range(count):
        make_exp(creator=alice, name=f"edge{i}")
    keys = keyset.keys_for(Experiment, ["-created_at"])
    qs = Experiment.objects.values("id", "created_at").order_by("-created_at", "-id")
    expected = list(qs[:page_size + 1])
    rows = keyset.page_rows(qs, page_size, keys)
    assert [row["id"] for row in rows] == [row["id"] for row in expected]
    if expected:
        last = min(len(expected), page_size) - 1
        assert rows[0] == expected[0] and rows[last] == expected[last]
        assert isinstance(rows[last]["created_at"], datetime)
    assert keyset.page_rows(qs.none(), page_size, keys) == []
    # An annotation among the columns keeps every name on its own column.
    from django.db.models.functions import Lower

    annotated = (Experiment.objects.annotate(lname=Lower("name"))
                 .values("lname", "id", "created_at").order_by("-created_at", "-id"))
    if expected:
        assert keyset.page_rows(annotated, page_size, keys)[0] == list(annotated[:1])[0]
    with pytest.raises(ValueError, match="not every key"):
        keyset.page_rows(Experiment.objects.values("id"), page_size, keys)


@pytest.mark.parametrize("url", [
    "http://h/api/v1/exps", "http://h:8/api/v1/exps?status=Failed&page_size=5&cursor=abc",
    "http://h/api/v1/exps?z=1&a=2&a=1&cursor=q&b=&search=a%20b+c%26d",
    "https://h/x?cursor=1#frag", "http://h/x?label=a%3Db&label=c", "http://h/x?d=%C3%A9"])
def test_links_are_the_urls_drf_makes(url):
    """The `next` and `previous` links, made from the request's URL parsed once, are DRF's
    `replace_query_param` of the cursor (the parameters sorted by name)."""
    from urllib.parse import quote_plus

    from rest_framework.utils.urls import replace_query_param

    from core.http.drf import _link_parts

    before, after = _link_parts(url, "cursor")
    for cursor in ("eyJ2IjoxfQ", "abc-_"):
        assert f"{before}{quote_plus(cursor)}{after}" == replace_query_param(url, "cursor", cursor)
