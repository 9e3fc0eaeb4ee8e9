"""Experiment labels: Kubernetes label syntax and the label selectors of list filters.

Django-free (the CLI checks `--label` with it before sending anything, and the server checks
everything again). The rules are Kubernetes' (apimachinery `validation.IsQualifiedName` for keys,
`IsValidLabelValue` for values; the "Labels and Selectors" page of the Kubernetes docs):

- key: an optional prefix and a name separated by `/`. The prefix is a DNS subdomain (RFC 1123:
  lowercase alphanumerics, `-` and `.`, at most 253 characters); the name is at most 63
  characters, alphanumerics with `-`, `_` or `.` between them.
- value: empty, or at most 63 characters with the name's rule.

Selectors follow kubectl's equality-based syntax: `key=value` (or `key==value`) keeps the
experiments whose label `key` has that value, `key` alone those that have the label at all;
several selectors must all hold (AND), as in `kubectl get -l a=1,b`.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Kubernetes apimachinery pkg/util/validation: qualifiedNameFmt, dns1123SubdomainFmt.
NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
PREFIX_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_NAME_CHARS = 63
MAX_VALUE_CHARS = 63
MAX_PREFIX_CHARS = 253
MAX_KEY_CHARS = MAX_PREFIX_CHARS + 1 + MAX_NAME_CHARS  # 317: the column's size
MAX_LABELS = 64  # per experiment (docs/limits.md)

# The OpenAPI schema's patterns: every string they match is accepted by the rules above (a
# prefix of at most 3 DNS labels of at most 63 characters stays under 253), so generated valid
# requests are valid; a longer prefix is accepted by the server but not described.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
KEY_PATTERN = rf"({_DNS_LABEL}(\.{_DNS_LABEL}){{0,2}}/)?{_NAME}"
VALUE_PATTERN = rf"({_NAME})?"
SELECTOR_PATTERN = rf"{KEY_PATTERN}(==?{VALUE_PATTERN})?"
# A `label` query value: selectors separated by commas (the list filters' comma lists).
SELECTOR_LIST_PATTERN = rf"^ *({SELECTOR_PATTERN})? *(, *({SELECTOR_PATTERN})? *)*$"
# The same with at least one selector: a value of blanks only is empty, a 400.
NON_EMPTY_SELECTOR_LIST_PATTERN = (rf"^( *,)* *({SELECTOR_PATTERN}) *"
                                   rf"(, *({SELECTOR_PATTERN})? *)*$")

NAME_RULE = ("at most 63 characters: letters, digits, '-', '_' or '.', starting and ending "
             "with a letter or digit")


def _name_fault(text: str) -> str:
    """Which part of `NAME_RULE` `text` breaks: its length, or its first bad character."""
    if len(text) > MAX_NAME_CHARS:
        return f"is {len(text)} characters long; the limit is {MAX_NAME_CHARS}"
    bad = next((c for c in text if not (c.isascii() and (c.isalnum() or c in "-_."))), None)
    if bad is not None:
        return (f"holds {bad!r}; only letters, digits, '-', '_' and '.' are allowed")
    return "must start and end with a letter or digit"


def key_problem(key: Any) -> str | None:
    """Return why `key` is not a Kubernetes label key, with the fix, or None when it is one."""
    if not isinstance(key, str) or not key:
        return "a label key is required: [prefix/]name, e.g. team or example.com/baseline."
    if "\x00" in key:
        return f"label key {key[:80]!r} contains a NUL character; remove it."
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return (f"label key {key[:80]!r} has an empty prefix before '/'; write name or "
                    "prefix/name (e.g. example.com/team).")
        if len(prefix) > MAX_PREFIX_CHARS or not PREFIX_RE.fullmatch(prefix):
            return (f"label key {key[:80]!r}: the prefix {prefix[:80]!r} must be a DNS "
                    "subdomain (lowercase letters, digits, '-' and '.', at most 253 "
                    "characters), e.g. example.com.")
    if len(name) > MAX_NAME_CHARS or not NAME_RE.fullmatch(name):
        return (f"label key {key[:80]!r}: the name {name[:80]!r} {_name_fault(name)} (a name "
                f"is {NAME_RULE}).")
    return None


def value_problem(key: str, value: Any) -> str | None:
    """Return why `value` is not a valid value of label `key`, with the fix, or None."""
    if not isinstance(value, str):
        return (f"label {key[:80]!r}: the value must be a string (quote numbers and booleans); "
                f"got {type(value).__name__}.")
    if len(value) > MAX_VALUE_CHARS or not VALUE_RE.fullmatch(value):
        return (f"label {key[:80]!r}: the value {value[:80]!r} {_name_fault(value)} (a value "
                f"is empty or {NAME_RULE}).")
    return None


def label_problems(labels: Any) -> list[str]:
    """Return every problem of a `{key: value}` label map (empty when it is valid).

    Args:
        labels: the map as sent (JSON object, gRPC map): keys and values strings.
    """
    if not isinstance(labels, Mapping):
        return ["must be an object of label key to value, e.g. {\"baseline\": \"true\"}."]
    problems = [p for key, value in labels.items()
                for p in (key_problem(key) or value_problem(key, value),) if p]
    if len(labels) > MAX_LABELS:
        problems.append(f"has {len(labels)} labels; an experiment has at most {MAX_LABELS}.")
    return problems


def parse_label_args(args: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Parse kubectl-style label arguments: `key=value` sets, `key-` removes.

    Args:
        args: e.g. `["baseline=true", "team=infra", "stale-"]`.

    Returns:
        `(to_set, to_remove)`.

    Raises:
        ValueError: an argument is neither form, or names an invalid key or value; the message
            names the argument and the fix.
    """
    to_set: dict[str, str] = {}
    to_remove: list[str] = []
    for arg in args:
        if "=" in arg:
            key, _, value = arg.partition("=")
            problem = key_problem(key) or value_problem(key, value)
            if problem:
                raise ValueError(problem)
            to_set[key] = value
        elif arg.endswith("-"):
            key = arg[:-1]
            problem = key_problem(key)
            if problem:
                raise ValueError(problem)
            to_remove.append(key)
        else:
            raise ValueError(f"{arg[:80]!r} is neither key=value (set a label) nor key- (remove "
                             "it).")
    both = sorted(set(to_set) & set(to_remove))
    if both:
        raise ValueError(f"label {both[0]!r} is both set and removed; keep one of the two.")
    return to_set, to_remove


@dataclass(frozen=True)
class Selector:
    """One equality-based label selector: `key=value` (value set) or `key` (exists)."""

    key: str
    value: str | None = None

    def __str__(self) -> str:
        return self.key if self.value is None else f"{self.key}={self.value}"


def parse_selector(text: str) -> Selector:
    """Parse `key=value`, `key==value` or `key` into a `Selector`.

    Raises:
        ValueError: the key or value is not a valid label key or value; the message says why.
    """
    for operator in ("!=", " in ", " notin "):
        if operator in text or text.startswith("!"):
            raise ValueError(f"selector {text[:80]!r}: only key=value (that value) and key "
                             "(the label is set) are supported; no !=, !key, in or notin.")
    if "=" in text:
        key, _, value = text.partition("=")
        if value.startswith("="):
            value = value[1:]
        problem = key_problem(key) or value_problem(key, value)
        if problem:
            raise ValueError(problem)
        return Selector(key, value)
    problem = key_problem(text)
    if problem:
        raise ValueError(problem)
    return Selector(text)


def parse_selectors(text: str) -> list[Selector]:
    """Parse a comma list of selectors, as kubectl's `-l a=1,b`: all must hold (AND).

    Split as the server splits a `label` query value (`core.http.filters.MultiValueField`):
    on commas, each item stripped of blanks, empty items dropped; a label value cannot hold a
    comma in Kubernetes' syntax, so the split is never ambiguous.

    Raises:
        ValueError: an item is not a selector (`parse_selector`), or the text holds none.
    """
    from core.limits.text import strip_blank

    items = [item for item in (strip_blank(part) for part in text.split(",")) if item]
    if not items:
        raise ValueError(f"selector {text[:80]!r} holds no selector: give key=value or key, "
                         "several separated by commas (a=1,b).")
    return [parse_selector(item) for item in items]


def matches(labels: Mapping[str, str], selectors: Iterable[Selector]) -> bool:
    """True when `labels` satisfies every selector (the filter's rule, for tests and clients)."""
    return all(s.key in labels and (s.value is None or labels[s.key] == s.value)
               for s in selectors)
