"""The one rule for reading a user's YAML: no anchors or aliases, bounded depth and node count.

YAML aliases share a node, and anything that walks the result as a tree (a diff, a dump, a JSON
encoder) visits the shared node once per path to it: a 400-byte chain of lists of ten aliases of
the previous list is 10**9 leaves. So a reader of user YAML refuses every anchor and alias (a
config or a tasks file has no need for them; write the value out) and nesting deeper than
`MAX_DEPTH`, and stops after `MAX_NODES` nodes. Without aliases the tree has at most as many
nodes as the text has characters, so reading is linear in the input's size. The checks happen
while the document is composed, before anything is constructed.

`BoundedComposerMixin` is the rule, for a loader class; `use_core_schema` makes a loader resolve
plain scalars by the YAML 1.2 core schema, and `load` reads with both (parsed by libyaml when it
is installed). PyYAML alone reads YAML 1.1, where `010` is octal 8, `on` a boolean and `22:22`
the number 1342: what the tasks file (`cli.tasks_yaml`) reads as 1.2 must read the same in a
config, or `exp diff` would call `workers: 010` and `workers: 8` equal. Every refusal is one
`YamlLimitError` naming the limit, its number and the line and column.

Django-free: the API server and the CLI both use it.
"""
from __future__ import annotations

import math
import re
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

MAX_DEPTH = 32  # nesting levels; a tasks file needs 4, a deep config rarely 10
MAX_NODES = 1_000_000  # scalars, lists and mappings of one document

NULL_TAG = "tag:yaml.org,2002:null"
BOOL_TAG = "tag:yaml.org,2002:bool"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
STR_TAG = "tag:yaml.org,2002:str"
MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"

# The YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution).
NULL_RE = re.compile(r"(?:~|null|Null|NULL|)\Z")
BOOL_RE = re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z")
INT_RE = re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z")
FLOAT_RE = re.compile(r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                      r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z")


class YamlLimitError(ValueError):
    """A YAML text that breaks the reading rule, or is not YAML.

    Attributes:
        limit: `aliases`, `depth`, `nodes` or `syntax`.
        line, column: 1-based position of the problem (0 when unknown).
        problem: the sentence without the position.
    """

    def __init__(self, limit: str, problem: str, mark: Any = None):
        self.limit, self.problem = limit, problem
        self.line = mark.line + 1 if mark is not None else 0
        self.column = mark.column + 1 if mark is not None else 0
        where = f"line {self.line}, column {self.column}: " if mark is not None else ""
        super().__init__(where + problem)


class BoundedComposerMixin:
    """Compose nodes under the rule; put it before the loader's Composer in the bases.

    Refuses an alias or an anchor, nesting deeper than `max_depth` and more than `max_nodes`
    nodes, each as a `YamlLimitError`. A loader that reports a shared node where it meets it
    (the tasks file names the field) overrides `shared_node`, which must then never return the
    aliased node itself: nothing may expand.
    """

    max_depth = MAX_DEPTH
    max_nodes = MAX_NODES
    what = "the YAML"  # how messages name the text

    def shared_node(self, event: Any) -> Node | None:
        """Handle an alias event (consume it and return a node that stands for it) or an
        anchored node's event (return None to compose it); by default refuse both."""
        kind = "alias *" if isinstance(event, AliasEvent) else "anchor &"
        raise YamlLimitError("aliases", f"the {kind}{event.anchor} is not accepted: YAML "
                             "anchors (&name) and aliases (*name) are refused, as an alias "
                             "chain expands a few hundred bytes into billions of values; "
                             "write the value out", event.start_mark)

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            return self.shared_node(event)
        if getattr(event, "anchor", None) is not None:
            self.shared_node(event)
        depth = getattr(self, "_bounded_depth", 0)
        if depth >= self.max_depth:
            raise YamlLimitError("depth", f"{self.what} nests deeper than {self.max_depth} "
                                 "levels; flatten it", event.start_mark)
        count = getattr(self, "_bounded_nodes", 0) + 1
        if count > self.max_nodes:
            raise YamlLimitError("nodes", f"{self.what} holds more than {self.max_nodes:,} "
                                 "values; make it smaller", event.start_mark)
        self._bounded_nodes = count
        self._bounded_depth = depth + 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._bounded_depth = depth


def _construct_null(loader: Any, node: ScalarNode) -> None:
    loader.construct_scalar(node)
    return None


def _construct_bool(loader: Any, node: ScalarNode) -> bool:
    text = loader.construct_scalar(node)
    if not BOOL_RE.match(text):
        raise ConstructorError(None, None, f"{text!r} is not a YAML 1.2 boolean (true or false)",
                               node.start_mark)
    return text.lower() == "true"


def _construct_int(loader: Any, node: ScalarNode) -> int:
    text = loader.construct_scalar(node)
    if not INT_RE.match(text):
        raise ConstructorError(None, None, f"{text!r} is not a YAML 1.2 integer", node.start_mark)
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)  # `010` is ten, as YAML 1.2 says


def _construct_float(loader: Any, node: ScalarNode) -> float:
    text = loader.construct_scalar(node)
    if not FLOAT_RE.match(text):
        raise ConstructorError(None, None, f"{text!r} is not a YAML 1.2 float", node.start_mark)
    bare = text.lstrip("+-").lower()
    if bare == ".inf":
        return -math.inf if text.startswith("-") else math.inf
    if bare == ".nan":
        return math.nan
    return float(text)


def use_core_schema(loader_class: type) -> type:
    """Make `loader_class` (a PyYAML loader) resolve plain scalars by the YAML 1.2 core schema.

    Null is `null|Null|NULL|~` or nothing, booleans `true|True|TRUE|false|False|FALSE`,
    integers `[-+]?[0-9]+`, `0o[0-7]+`, `0x[0-9a-fA-F]+`, floats as JSON writes them plus `.inf`
    and `.nan`; anything else is a string (`on`, `yes`, `22:22`, `2024-01-01`, `<<`: no merge
    keys). Explicit tags (`!!timestamp`) keep PyYAML's safe constructors.

    Returns:
        `loader_class`, changed in place (for use as a decorator).
    """
    loader_class.yaml_implicit_resolvers = {}
    loader_class.yaml_constructors = dict(SafeConstructor.yaml_constructors)
    for tag, regexp, first in (
            (NULL_TAG, NULL_RE, ["~", "n", "N", ""]),
            (BOOL_TAG, BOOL_RE, list("tTfF")),
            (INT_TAG, INT_RE, list("-+0123456789")),  # before floats: `10` is an int
            (FLOAT_TAG, FLOAT_RE, list("-+.0123456789"))):
        loader_class.add_implicit_resolver(tag, regexp, first)
    for tag, constructor in ((NULL_TAG, _construct_null), (BOOL_TAG, _construct_bool),
                             (INT_TAG, _construct_int), (FLOAT_TAG, _construct_float)):
        loader_class.add_constructor(tag, constructor)
    return loader_class


def _loader_class() -> type:
    """A safe loader with the rule: libyaml's parser when PyYAML was built with it, the
    composition (where the rule lives) in Python either way."""
    try:
        from yaml import CParser
    except ImportError:
        from yaml.parser import Parser
        from yaml.reader import Reader
        from yaml.scanner import Scanner

        class PyBoundedLoader(Reader, Scanner, Parser, BoundedComposerMixin, Composer,
                              SafeConstructor, Resolver):
            def __init__(self, stream):
                Reader.__init__(self, stream)
                Scanner.__init__(self)
                Parser.__init__(self)
                Composer.__init__(self)
                SafeConstructor.__init__(self)
                Resolver.__init__(self)

        return use_core_schema(PyBoundedLoader)

    class CBoundedLoader(BoundedComposerMixin, Composer, CParser, SafeConstructor, Resolver):
        # Composer before CParser: CParser composes in C (no hook for the rule); here it only
        # hands out events.
        def __init__(self, stream):
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

        get_single_node = Composer.get_single_node

    return use_core_schema(CBoundedLoader)


BoundedSafeLoader = _loader_class()


def load(text: str) -> Any:
    """Read one YAML document by the YAML 1.2 core schema under the rule (module docstring).

    Returns the document's value (None for an empty document).

    Raises:
        YamlLimitError: an anchor or alias, too deep, too many nodes (`limit` says which), or
            not YAML at all (`limit` `syntax`).
    """
    return _read(text, with_text=False)


def load_with_text(text: str) -> tuple[Any, Any]:
    """Read like `load`, and also say how each scalar was written.

    Returns:
        `(value, written)`: `written` has the shape of `value` where `value` is a plain mapping
        or list (the same keys, the same positions) and holds, in place of each scalar, its
        text as written (`3.10`, `0x10`, `True`; a quoted scalar's text without the quotes);
        None stands for anything else (a `!!set`, an `!!omap`).

    Raises:
        YamlLimitError: as `load`.
    """
    return _read(text, with_text=True)


def _written(loader: Any, node: Node) -> Any:
    """The text each scalar under `node` was written as, shaped as the constructed value."""
    if isinstance(node, ScalarNode):
        return node.value
    if isinstance(node, SequenceNode) and node.tag == SEQ_TAG:
        return [_written(loader, item) for item in node.value]
    if isinstance(node, MappingNode) and node.tag == MAP_TAG:
        # Keys as the constructor made them (a later duplicate wins, as in the value).
        return {loader.construct_object(key, deep=True): _written(loader, value)
                for key, value in node.value}
    return None


def _read(text: str, *, with_text: bool) -> Any:
    loader = None
    try:
        loader = BoundedSafeLoader(text)  # the reader checks the characters here
        node = loader.get_single_node()
        value = loader.construct_document(node) if node is not None else None
        if not with_text:
            return value
        return value, (_written(loader, node) if node is not None else None)
    except YamlLimitError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc) or type(exc).__name__
        raise YamlLimitError("syntax", f"not valid YAML: {problem}", mark) from None
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        # SafeConstructor raises these for odd scalars (a huge `!!int`, a bad `!!timestamp`).
        raise YamlLimitError("syntax", f"not valid YAML: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()
