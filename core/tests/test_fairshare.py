"""`core.domain.fairshare.fair_admissions`: who starts next when capacity frees, row by row."""
from __future__ import annotations

import pytest

from core.domain.fairshare import Queued, default_per_user, fair_admissions


def q(user: str, n: int, size: int = 1) -> Queued:
    """Item `n` of `user` (its FIFO order is `n`, so lower numbers are older)."""
    return Queued(key=f"{user}{n}", user=user, order=(n, f"{user}{n}"), size=size)


def keys(items) -> list:
    return [item.key for item in items]


A8 = [q("a", n) for n in range(1, 9)]  # eight analyses of user a, queued first


@pytest.mark.parametrize("queued, running, limit, per_user, expected", [
    # Nothing waits, or nothing is free.
    ([], {}, 2, 2, []),
    (A8, {"a": 2}, 2, 2, []),
    # Eight of a then one of b, 2 slots, a holds both: b starts at the next free slot.
    (A8 + [q("b", 9)], {"a": 1}, 2, 2, ["b9"]),
    (A8 + [q("b", 9)], {"a": 2}, 2, 2, []),
    # Both slots free: one each (b is not behind a's backlog).
    (A8 + [q("b", 9)], {}, 2, 2, ["a1", "b9"]),
    # a alone uses at most the cap, even with slots free.
    (A8, {}, 4, 2, ["a1", "a2"]),
    (A8, {"a": 1}, 4, 2, ["a1"]),
    # A user at the cap does not block the others.
    (A8 + [q("b", 9), q("b", 10)], {"a": 2}, 4, 2, ["b9", "b10"]),
    # Fewest running first; ties by the oldest waiting item; round-robin.
    ([q("a", 1), q("a", 2), q("b", 3), q("b", 4), q("c", 5)], {}, 5, 5,
     ["a1", "b3", "c5", "a2", "b4"]),
    ([q("a", 1), q("b", 2)], {"a": 1}, 3, 3, ["b2", "a1"]),
    # FIFO within a user, whatever order the items arrive in.
    ([q("a", 3), q("a", 1), q("a", 2)], {}, 2, 2, ["a1", "a2"]),
    # Runs held beyond the limit (adopted after a restart) leave nothing free.
    ([q("b", 1)], {"a": 5}, 4, 4, []),
    # Sizes (replicas): a head that does not fit waits; smaller heads of others backfill.
    ([q("a", 1, size=6), q("b", 2, size=1)], {"c": 4}, 8, 8, ["b2"]),
    # ... but never a user's own later item (FIFO within a user).
    ([q("a", 1, size=6), q("a", 2, size=1)], {"c": 4}, 8, 8, []),
    # A size past what is left of the user's share waits.
    ([q("a", 1, size=3), q("b", 2, size=2)], {"a": 2}, 10, 4, ["b2"]),
])
def test_fair_admissions(queued, running, limit, per_user, expected):
    assert keys(fair_admissions(queued, running=running, limit=limit,
                                per_user=per_user)) == expected


def test_admission_costs_one_heap_step_per_turn():
    # 10,000 queued items of 100 users: admitting 50 reads each item once (the sort), no
    # scan per admission.
    queued = [q(f"u{n % 100}", n) for n in range(10_000)]
    admitted = fair_admissions(queued, running={}, limit=50, per_user=1)
    assert keys(admitted) == [f"u{n}{n}" for n in range(50)]


@pytest.mark.parametrize("limit, share", [(1, 1), (2, 1), (3, 2), (8, 4), (9, 5)])
def test_default_share_is_half_rounded_up(limit, share):
    assert default_per_user(limit) == share
