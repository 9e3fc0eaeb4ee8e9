"""The one rule for reading a user's YAML: no anchors or aliases, bounded depth and node count.

YAML aliases share a node, and anything that walks the result as a tree (a diff, a dump, a JSON
encoder) visits the shared node once per path to it: a 400-byte chain of lists of ten aliases of
the previous list is 10**9 leaves. So a reader of user YAML refuses every anchor and alias (a
config or a tasks file has no need for them; write the value out) and nesting deeper than
`MAX_DEPTH`, and stops after `MAX_NODES` nodes. Without aliases the tree has at most as many
nodes as the text has characters, so reading is linear in the input's size. The checks happen
while the document is composed, before anything is constructed.

`BoundedComposerMixin` is the rule, for a loader class; `load` reads with PyYAML's safe schema
(YAML 1.1, what `yaml.safe_load` gives) parsed by libyaml when it is installed. Every refusal is
one `YamlLimitError` naming the limit, its number and the line and column.

Django-free: the API server and the CLI both use it.
"""
from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import Node
from yaml.resolver import Resolver

MAX_DEPTH = 32  # nesting levels; a tasks file needs 4, a deep config rarely 10
MAX_NODES = 1_000_000  # scalars, lists and mappings of one document


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

        return PyBoundedLoader

    class CBoundedLoader(BoundedComposerMixin, Composer, CParser, SafeConstructor, Resolver):
        # Composer before CParser: CParser composes in C (no hook for the rule); here it only
        # hands out events.
        def __init__(self, stream):
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

        get_single_node = Composer.get_single_node

    return CBoundedLoader


BoundedSafeLoader = _loader_class()


def load(text: str) -> Any:
    """Read one YAML document by PyYAML's safe schema under the rule (module docstring).

    Returns the document's value (None for an empty document).

    Raises:
        YamlLimitError: an anchor or alias, too deep, too many nodes (`limit` says which), or
            not YAML at all (`limit` `syntax`).
    """
    loader = None
    try:
        loader = BoundedSafeLoader(text)  # the reader checks the characters here
        node = loader.get_single_node()
        return loader.construct_document(node) if node is not None else None
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
