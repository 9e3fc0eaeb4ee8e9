"""Property tests of the gate's condition parser, metric patterns and metric extraction on
generated input: every text gets a parsed condition or a sentence (never another exception),
what parses round-trips, and any JSON records give finite numbers or null under string paths."""
from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings, strategies as st

from plugins.catalog import load_catalog
from plugins.gate import (CONDITION_PATTERN, MAX_CONDITION_CHARS, OPS, condition_problem,
                          parse_condition, path_matches)
from plugins.metrics import extract

CATALOG = load_catalog()
ASCII_WS = " \t\n\r\f\v"
# Text near the grammar: its pieces, digits, signs and the characters that broke parsers.
NEAR = st.lists(st.sampled_from(list("ab.-_:*?[]\"%<>=+eE0123456789 \t\n\u00a0\u2009"
                                      "\u0665\u2264\x00")
                                 + ["nan", "inf", "1e999", "bench-summary:", "<=", " < -5%"]),
                max_size=30).map("".join)
ANY_TEXT = st.one_of(st.text(max_size=80), NEAR)


@settings(max_examples=500, deadline=None)
@given(ANY_TEXT)
def test_every_text_is_a_condition_or_a_sentence(text):
    problem = condition_problem(text)
    if problem is None:
        condition = parse_condition(text)
        assert math.isfinite(condition.threshold)
        assert condition.op in OPS and condition.plugin and condition.pattern
        assert ":" not in condition.plugin
    else:
        assert isinstance(problem, str) and problem.endswith(".")
        with pytest.raises(ValueError) as info:
            parse_condition(text)
        assert str(info.value) == problem


SCHEMA = re.compile(re.sub(r"\?P<\w+>", "?:", CONDITION_PATTERN))


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT)
def test_the_schema_pattern_accepts_what_the_parser_accepts(text):
    """The OpenAPI schema's `pattern` and the server agree (a client validating by the schema
    neither refuses a good condition nor sends a bad one)."""
    if len(text) <= MAX_CONDITION_CHARS:
        assert (SCHEMA.search(text) is not None) == (condition_problem(text) is None)


PLUGIN = st.text(alphabet=st.characters(blacklist_characters=":" + ASCII_WS,
                                        blacklist_categories=("Cs",)), min_size=1, max_size=20)
PATTERN = st.text(alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)),
                  min_size=1, max_size=30).filter(
    lambda p: p[0] not in ASCII_WS and p[-1] not in ASCII_WS and not re.search(r"(<=|>=|<|>)", p))


@settings(max_examples=500, deadline=None)
@given(PLUGIN, PATTERN, st.sampled_from(sorted(OPS)),
       st.floats(allow_nan=False, allow_infinity=False, min_value=-1e90, max_value=1e90),
       st.booleans(), st.sampled_from(["", " ", "\t"]))
def test_a_written_condition_parses_back(plugin, pattern, op, threshold, relative, space):
    text = f"{plugin}:{pattern}{space}{op}{space}{threshold!r}{'%' if relative else ''}"
    if "e" in repr(threshold) and abs(int(repr(threshold).split("e")[1])) > 99:
        return  # the grammar takes two exponent digits (docs/compare.md)
    condition = parse_condition(text)
    assert (condition.plugin, condition.pattern, condition.op, condition.relative) == (
        plugin, pattern, op, relative)
    assert condition.threshold == threshold


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=30), st.text(max_size=30))
def test_patterns_never_raise_and_match_as_documented(pattern, path):
    assert path_matches(pattern, path) in (True, False)
    literal = pattern.replace("*", "").replace("?", "")
    assert path_matches(literal, literal)  # every other character is itself, `[` and `(` too
    assert path_matches("*", path)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
RECORD = st.dictionaries(
    st.sampled_from(["kind", "name", "group", "op", "module", "stage", "metric", "results",
                     "count", "mean", "p99", "total_us", "self_us", "busy_us", "x", "a.b", "ü/é"]),
    JSON, max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(RECORD, max_size=6), st.sampled_from([None, *sorted(CATALOG)]))
def test_any_records_give_finite_numbers_or_null_under_string_paths(records, plugin):
    rules = CATALOG[plugin].metrics if plugin else ()
    out = extract(records, rules)
    for path, value in out.values.items():
        assert isinstance(path, str) and path
        assert value is None or (type(value) is float and math.isfinite(value))
        assert out.units[path] in ("", "us", "ms", "s", "bytes", "count")
        assert out.better[path] in ("", "higher", "lower")


def test_a_pattern_of_many_stars_does_not_backtrack_for_ever():
    """`*a*a*a*a*a*a*a*a*b` against a long path of `a` backtracked exponentially with one
    `.*` per star (minutes at 8 stars: one request held a worker). Run in a child with a
    deadline, so a regression fails instead of hanging the suite."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("from plugins.gate import path_matches\n"
            "assert not path_matches('*a' * 40 + 'b', 'a' * 400)\n"
            "assert path_matches('*a' * 40 + '*', 'a' * 400)\n")
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, timeout=120,
                   env={"PYTHONPATH": str(root)})
