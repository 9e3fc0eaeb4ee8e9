"""Log pages over HTTP on awkward text: pages cut only between characters, `tail` counting only
`\\n` as a line end (`GET /api/v1/exps/{id}/logs`)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from artifacts.store import replica_log_url
from experiments.tests.factories import make_exp
from experiments.tests.test_exp_files import alice, put  # noqa: F401 (fixture)

EXPS = "/api/v1/exps"
JAPANESE = "日本語\n" * 4


def read_pages(api, url: str, limit: int, offset: int = 0) -> list[dict]:
    pages = []
    while True:
        body = api.get(url, {"offset": offset, "limit": limit}).json()
        assert body["offset"] == offset and body["next_offset"] >= offset, body
        if body["next_offset"] == offset:
            return pages
        pages.append(body)
        offset = body["next_offset"]


def test_every_limit_gives_pages_of_whole_characters_that_make_the_file(auth_api, alice,
                                                                         tmp_path):
    exp = make_exp(creator=alice, name="utf8")
    put(replica_log_url(exp.artifact_path, "main", 0), JAPANESE.encode(), tmp_path)
    url = f"{EXPS}/{exp.pk}/logs"
    for limit in range(1, 13):
        pages = read_pages(auth_api, url, limit)
        assert "".join(p["data"] for p in pages) == JAPANESE, limit
        assert not any("\ufffd" in p["data"] for p in pages), limit
        for page in pages:  # each page is its own bytes: offsets are byte positions
            assert page["next_offset"] - page["offset"] == len(page["data"].encode())
    # A limit smaller than one character returns that whole character.
    assert auth_api.get(url, {"limit": 1}).json()["data"] == "日"
    # An offset inside a character starts the page after it, and says so.
    body = auth_api.get(url, {"offset": 1, "limit": 4}).json()
    assert (body["offset"], body["data"], body["next_offset"]) == (3, "本", 6)


def test_bytes_that_are_not_utf8_are_neither_held_back_nor_skipped(auth_api, alice, tmp_path):
    raw = b"\x80ok\xe6\x97\n\xff\xe6"  # a stray continuation, a cut character, an invalid byte
    exp = make_exp(creator=alice, name="bad-bytes")
    put(replica_log_url(exp.artifact_path, "main", 0), raw, tmp_path)
    for limit in range(1, 6):
        pages = read_pages(auth_api, f"{EXPS}/{exp.pk}/logs", limit)
        assert sum(p["next_offset"] - p["offset"] for p in pages) == len(raw)
        assert "".join(p["data"] for p in pages) == raw.decode("utf-8", "replace")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40),
       limit=st.integers(1, 12))
def test_any_text_read_with_any_limit_comes_back_whole(auth_api, alice, tmp_path, text, limit):
    exp = make_exp(creator=alice, name="any")
    put(replica_log_url(exp.artifact_path, "main", 0), text.encode(), tmp_path)
    pages = read_pages(auth_api, f"{EXPS}/{exp.pk}/logs", limit)
    assert "".join(p["data"] for p in pages) == text


@pytest.mark.parametrize("tail", [6, 1, 2])
def test_tail_counts_only_newlines_so_a_redrawn_progress_bar_is_one_line(auth_api, alice,
                                                                         tmp_path, tail):
    losses = "".join(f"loss={i / 10}\n" for i in range(5))
    bar = "".join(f"\r[{'#' * (i // 5):<20}] {i}%" for i in range(100)) + "\n"
    exp = make_exp(creator=alice, name="bar")
    put(replica_log_url(exp.artifact_path, "main", 0), (losses + bar).encode(), tmp_path)
    data = auth_api.get(f"{EXPS}/{exp.pk}/logs", {"tail": tail}).json()["data"]
    lines = [f"loss={i / 10}\n" for i in range(5)] + [bar]
    assert data == "".join(lines[-tail:])


def test_tail_keeps_a_line_that_starts_where_the_window_starts(auth_api, alice, tmp_path):
    from experiments.files import TAIL_WINDOW_PER_LINE

    line = "x" * (TAIL_WINDOW_PER_LINE - 1) + "\n"  # exactly the window of one line
    exp = make_exp(creator=alice, name="edge")
    put(replica_log_url(exp.artifact_path, "main", 0), ("first\n" + line).encode(), tmp_path)
    assert auth_api.get(f"{EXPS}/{exp.pk}/logs", {"tail": 1}).json()["data"] == line
