"""The regression gate of `falcon exp compare --fail-on` and metric patterns (Django-free, no I/O).

Shared by the API server, which evaluates the conditions on the compare document, and the CLI,
which checks them before sending (docs/compare.md, "The gate").

A condition is ``PLUGIN:PATTERN OP THRESHOLD[%]``: ``bench-summary:results.gflops.mean < -5%``.
``PATTERN`` is a metric key path where ``*`` matches any run of characters (dots included) and
``?`` one character; every other character is itself (``[`` too, which paths use for quoted
keys). ``OP`` is one of ``<``, ``<=``, ``>``, ``>=``. The threshold is a change against the
baseline: relative in percent with ``%``, else absolute, in the metric's unit.
"""
from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from functools import lru_cache

OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
       ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
MAX_CONDITIONS = 20
MAX_CONDITION_CHARS = 500
# One spelling for the parser and the OpenAPI schema's `pattern` (the exponent has at most two
# digits, so every threshold that parses is finite).
_WS = r"[ \t\n\r\f\v]"  # ASCII whitespace, spelled out: JSON Schema's `\s` is not Python's
_NOT_WS = r"[^ \t\n\r\f\v]"
CONDITION_PATTERN = (
    rf"^{_WS}*(?P<plugin>[^: \t\n\r\f\v]+):(?P<pattern>{_NOT_WS}(?:[^\n]*?{_NOT_WS})?){_WS}*"
    rf"(?P<op><=|>=|<|>){_WS}*"
    rf"(?P<threshold>[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{{1,2}})?)"
    rf"{_WS}*(?P<percent>%)?{_WS}*$")
_CONDITION = re.compile(CONDITION_PATTERN)
EXAMPLE = "bench-summary:results.gflops.mean < -5%"


@lru_cache(maxsize=512)
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    # fnmatch's translation, not a hand-made `.*` per star: `*a*a*a*a*a*a*a*a*b` against a
    # path of many `a` backtracked for minutes (one request held a worker), and fnmatch
    # matches each star after the first without backtracking. `[` is made literal first,
    # since paths use it for quoted keys and fnmatch would read a character class.
    return re.compile(fnmatch.translate(pattern.replace("[", "[[]")))


def path_matches(pattern: str, path: str) -> bool:
    """Whether the metric key path `path` matches `pattern` (``*`` any run, ``?`` one char)."""
    return _pattern_regex(pattern).fullmatch(path) is not None


@dataclass(frozen=True)
class Condition:
    """One parsed ``--fail-on`` condition: `text` as given, `plugin`, `pattern`, `op`,
    `threshold` (percent when `relative`)."""

    text: str
    plugin: str
    pattern: str
    op: str
    threshold: float
    relative: bool

    def holds(self, change: float, change_percent: float) -> bool:
        """Whether this change (absolute, and relative in percent; ±inf when the baseline is
        0) meets the condition."""
        value = change_percent if self.relative else change
        return OPS[self.op](value, self.threshold)


def condition_problem(text: object) -> str | None:
    """What is wrong with `text` as a condition (a sentence naming the fix), or None."""
    if not isinstance(text, str) or not text.strip(" \t\n\r\f\v"):
        return f"must be a condition such as {EXAMPLE!r}."
    if len(text) > MAX_CONDITION_CHARS:
        return (f"{text[:40]!r}... is {len(text)} characters; a condition is at most "
                f"{MAX_CONDITION_CHARS}.")
    match = _CONDITION.fullmatch(text)
    if match is None:
        return (f"{text[:80]!r} is not PLUGIN:METRIC OP THRESHOLD with OP one of <, <=, >, >= "
                f"and a number, '%' for a relative change; e.g. {EXAMPLE!r}.")
    if not math.isfinite(float(match.group("threshold"))):
        return f"the threshold of {text[:80]!r} must be a finite number."
    return None


def parse_condition(text: str) -> Condition:
    """Parse one condition; raises ValueError with `condition_problem`'s sentence."""
    problem = condition_problem(text)
    if problem is not None:
        raise ValueError(problem)
    match = _CONDITION.fullmatch(text)
    assert match is not None
    return Condition(text=text.strip(" \t\n\r\f\v"), plugin=match.group("plugin"),
                     pattern=match.group("pattern"), op=match.group("op"),
                     threshold=float(match.group("threshold")),
                     relative=match.group("percent") is not None)


def changes(baseline: float, value: float) -> tuple[float, float]:
    """`(value - baseline, relative change in percent)`; the percent is 0 when both are 0 and
    ±inf when only the baseline is 0 (a metric that appears from nothing)."""
    change = value - baseline
    if baseline == 0:
        return change, 0.0 if change == 0 else math.copysign(math.inf, change)
    return change, change / abs(baseline) * 100.0
