"""Parsing the tasks file (`--role-to-task-spec`): YAML by the YAML 1.2 core schema, names and env
values taken as written.

PyYAML resolves plain scalars by YAML 1.1 rules, which turn what a user writes into something else:
`010` is octal 8, `on` / `yes` / `y` are booleans, `22:22` is sexagesimal 1342, `3.10` is the
float 3.1, `2024-01-01` a date, and anchors with aliases can expand a 700-byte file into a
gigabyte. This module reads the file so that what reaches the server is what the user wrote:

- Plain scalars resolve by the YAML 1.2 core schema only: null is `null|Null|NULL|~` or nothing,
  booleans are `true|True|TRUE|false|False|FALSE`, integers `[-+]?[0-9]+`, `0o[0-7]+`,
  `0x[0-9a-fA-F]+`, floats `[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?`, `.inf`, `.nan`
  (and their case variants). Anything else is a string.
- Mapping keys are names (roles, TaskSpec fields, env names) and are taken as written: `TRUE:`,
  `1:`, `null:` are the names "TRUE", "1", "null".
- Env values that are scalars are taken as written, as text: `on`, `3.10`, `0755`, `22:22`,
  `.inf` reach the task exactly so. An explicit tag other than `!!str` on one is refused.
- `replica` and `device_count` accept decimal integers only: a leading zero (`010`: octal 8 in
  YAML 1.1, ten in 1.2) or a `0o` / `0x` prefix is refused.
- Anchors and aliases are refused (a tasks file has no use for them), as is nesting deeper than
  `MAX_DEPTH`; so parsing never takes more than the file's size in memory.
- Non-finite numbers (`.inf`, `.nan`, `1e999`) are refused: JSON cannot carry them.
- Duplicate keys are refused (YAML 1.2 requires unique keys; PyYAML keeps the last one).
- Only values JSON can carry are accepted (an explicit `!!timestamp`, `!!binary`, `!!set` is not).

Every problem is one `CLIError(USAGE)` naming the file, the line and column, the field and the fix.
"""
from __future__ import annotations

import math
import re
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from core.limits.boundedyaml import (
    INT_TAG, MAP_TAG, MAX_DEPTH, SEQ_TAG, STR_TAG, BoundedComposerMixin, YamlLimitError,
    use_core_schema,
)

from .errors import CLIError
from .exit_codes import ExitCode

TASK_EXAMPLE = "main: {command: 'python run.py', replica: 1}"
INT_FIELDS = ("replica", "device_count")  # TaskSpec fields that are integers

ALIAS_TAG = "tag:falcon.cli,2024:alias"  # stands for an alias; never resolved, always refused
DECIMAL_RE = re.compile(r"[-+]?(?:0|[1-9][0-9]*)\Z")  # what an integer field accepts
LEADING_ZERO_RE = re.compile(r"[-+]?0[0-9]+\Z")


class _Problem(Exception):
    """One problem at a node (or a mark): becomes the CLIError line."""

    def __init__(self, where: Node | Any, field: str, text: str):
        super().__init__(text)
        self.mark = where.start_mark if isinstance(where, Node) else where
        self.field, self.text = field, text


@use_core_schema
class Yaml12Loader(BoundedComposerMixin, yaml.SafeLoader):
    """A SafeLoader whose implicit types are the YAML 1.2 core schema's, without anchors.

    The rule of every read of a user's YAML (`core.limits.boundedyaml`: depth, node count, no
    sharing), with one difference in where a refusal is reported: an alias is composed into a
    placeholder node (tag `ALIAS_TAG`) instead of the node it names, and an anchored node keeps
    its anchor in `.falcon_anchor`: nothing is ever shared, so nothing can expand, and the tree
    walk refuses both where it meets them, naming the field (a tasks file `MAX_DEPTH` levels
    deep needs 4: roles, a task spec, envs, a value). Scalar nodes record in
    `.falcon_explicit` whether the file gave them a tag.
    """

    what = "the file"

    def shared_node(self, event: Any) -> Node | None:
        if isinstance(event, AliasEvent):
            self.get_event()
            return ScalarNode(ALIAS_TAG, event.anchor, event.start_mark, event.end_mark)
        return None  # composed; `.falcon_anchor` makes the walk refuse it

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        node = super().compose_node(parent, index)
        node.falcon_anchor = None if node.tag == ALIAS_TAG else event.anchor
        return node

    def compose_scalar_node(self, anchor: str | None) -> ScalarNode:
        event = self.peek_event()
        node = super().compose_scalar_node(anchor)
        node.falcon_explicit = event.tag not in (None, "!")
        return node


def _short_tag(tag: str) -> str:
    return "!!" + tag.rsplit(":", 1)[-1] if tag.startswith("tag:yaml.org,2002:") else tag


def _kind(value: Any) -> str:
    """Name a value's YAML kind for a message."""
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


class _Walker:
    """Turn the composed node tree into JSON-ready values, field by field."""

    def __init__(self, loader: Yaml12Loader):
        self.loader = loader

    def refuse_shared(self, node: Node, field: str) -> None:
        if node.tag == ALIAS_TAG:
            raise _Problem(node, field, f"the alias *{node.value} is not accepted: a tasks file "
                           "takes no anchors (&name) or aliases (*name); write the value out")
        anchor = getattr(node, "falcon_anchor", None)
        if anchor is not None:
            raise _Problem(node, field, f"the anchor &{anchor} is not accepted: a tasks file "
                           "takes no anchors (&name) or aliases (*name); write the value out")

    def name(self, node: Node, field: str, what: str) -> str:
        """A mapping key: a name, taken as written."""
        self.refuse_shared(node, field)
        if not isinstance(node, ScalarNode):
            raise _Problem(node, field, f"{what} must be a plain name, not a YAML "
                           f"{'list' if isinstance(node, SequenceNode) else 'mapping'}")
        return node.value

    def mapping(self, node: MappingNode, field: str, what: str, value_of) -> dict[str, Any]:
        """A mapping whose keys are names; `value_of(value_node, field, key)` builds each value."""
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = self.name(key_node, field, what)
            sub = f"{field}.{key}" if field else key
            if key in first_line:
                raise _Problem(key_node, field, f"found duplicate key {key!r} (first at line "
                               f"{first_line[key]}); YAML keeps only one of them, so remove or "
                               "rename one")
            first_line[key] = key_node.start_mark.line + 1
            out[key] = value_of(value_node, sub, key)
        return out

    def value(self, node: Node, field: str, _key: str = "") -> Any:
        """Any value, by the YAML 1.2 core schema; JSON-representable and finite."""
        self.refuse_shared(node, field)
        if isinstance(node, MappingNode) and node.tag == MAP_TAG:
            return self.mapping(node, field, "a key", self.value)
        if isinstance(node, SequenceNode) and node.tag == SEQ_TAG:
            return [self.value(sub, f"{field}[{index}]") for index, sub in enumerate(node.value)]
        if not isinstance(node, ScalarNode):
            raise _Problem(node, field, f"a YAML {_short_tag(node.tag)} cannot be sent; write a "
                           "plain mapping or list")
        try:
            value = self.loader.construct_object(node, deep=True)
        except ValueError:  # an integer of more than 4300 digits (Python's conversion limit)
            raise _Problem(node, field, f"the number of {len(node.value)} characters is too "
                           "long to read; write a number in range, or quote it to send it as "
                           "text") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise _Problem(node, field, f"{node.value} is not a finite number and cannot be sent "
                           "(JSON has no infinity or NaN); write a finite number")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise _Problem(node, field, f"the tag {_short_tag(node.tag)} makes a YAML "
                           f"{type(value).__name__}, which cannot be sent; remove the tag, or "
                           "quote the value to send it as text")
        return value

    def env_value(self, node: Node, field: str, _key: str = "") -> Any:
        """An env value: a scalar is taken as written (`on`, `3.10`, `0755` stay so)."""
        self.refuse_shared(node, field)
        if not isinstance(node, ScalarNode):
            return self.value(node, field)  # the server names a list or mapping as wrong
        if getattr(node, "falcon_explicit", False) and node.tag != STR_TAG:
            raise _Problem(node, field, f"the tag {_short_tag(node.tag)} is not accepted on an "
                           "env value: env values are sent as written, as text; remove the tag")
        return node.value

    def integer(self, node: Node, field: str) -> Any:
        """`replica` / `device_count`: decimal integers only; anything else goes to `value`."""
        self.refuse_shared(node, field)
        if isinstance(node, ScalarNode) and node.tag == INT_TAG:
            text = node.value
            if LEADING_ZERO_RE.match(text):
                sign = "-" if text.startswith("-") else ""
                decimal = sign + (text.lstrip("+-").lstrip("0") or "0")
                octal = f" octal ({int(text, 8)})" if re.fullmatch(r"[-+]?[0-7]+", text) else ""
                raise _Problem(node, field, f"{text} has a leading zero, which YAML 1.1 reads as"
                               f"{octal or ' octal'} and YAML 1.2 as decimal ({decimal}); write "
                               f"the number without leading zeros, e.g. {decimal}")
            if not DECIMAL_RE.match(text):
                raise _Problem(node, field, f"{text} is not a decimal integer; write it in "
                               f"decimal ({self.value(node, field)})")
        return self.value(node, field)

    def task_field(self, node: Node, field: str, key: str) -> Any:
        if key == "envs" and isinstance(node, MappingNode) and node.tag == MAP_TAG:
            self.refuse_shared(node, field)
            return self.mapping(node, field, "an env name", self.env_value)
        if key in INT_FIELDS:
            return self.integer(node, field)
        return self.value(node, field)

    def task_spec(self, node: Node, field: str, _key: str) -> Any:
        if isinstance(node, MappingNode) and node.tag == MAP_TAG:
            self.refuse_shared(node, field)
            return self.mapping(node, field, "a task spec field", self.task_field)
        spec = self.value(node, field)
        raise _Problem(node, "", f"role {field!r} must be a mapping of task spec fields (command, "
                       f"replica, image, ...); it is a YAML {_kind(spec)}")

    def root(self, node: Node) -> dict[str, Any]:
        if isinstance(node, MappingNode) and node.tag == MAP_TAG:
            self.refuse_shared(node, "")
            if node.value:
                return self.mapping(node, "", "a role name", self.task_spec)
            return {}
        data = self.value(node, "")
        if data is None:  # a document with nothing but `---` or `~`
            return {}
        raise _Problem(node, "", f"the file must be a mapping of role name to task spec (e.g. "
                       f"{TASK_EXAMPLE}); it is a YAML {_kind(data)}")


def parse_tasks(text: str, path: str, what: str = "tasks file") -> dict[str, dict[str, Any]]:
    """Parse the tasks file's text into `{role: {field: value}}` (see the module docstring).

    Args:
        text: the file's UTF-8 text.
        path: the file as the user named it, for messages.
        what: the file's name in messages.

    Raises:
        CLIError(USAGE): not YAML, or not a non-empty mapping of role to task spec, or one of the
            refusals listed in the module docstring.
    """
    loader = None
    try:
        loader = Yaml12Loader(text)  # the reader checks the characters here
        node = loader.get_single_node()
        data = _Walker(loader).root(node) if node is not None else {}
    except _Problem as problem:
        mark = problem.mark
        field = f"{problem.field}: " if problem.field else ""
        raise CLIError(f"{what} {path}, line {mark.line + 1}, column {mark.column + 1}: "
                       f"{field}{problem.text}", ExitCode.USAGE) from None
    except YamlLimitError as exc:
        raise CLIError(f"{what} {path}, line {exc.line}, column {exc.column}: {exc.problem}",
                       ExitCode.USAGE) from None
    except yaml.reader.ReaderError as exc:
        raise CLIError(f"{what} {path} is not valid YAML: character #x{exc.character:04x} at "
                       f"offset {exc.position} is not allowed in YAML ({exc.reason}); remove it",
                       ExitCode.USAGE) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise CLIError(f"{what} {path} is not valid YAML{where}: {problem}",
                       ExitCode.USAGE) from None
    finally:
        if loader is not None:
            loader.dispose()
    if not data:
        raise CLIError(f"{what} {path} is empty: it must map each role name to a task spec, "
                       f"e.g. {TASK_EXAMPLE}", ExitCode.USAGE)
    return data
