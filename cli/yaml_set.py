"""Edit a YAML config by key path, keeping every other byte: `falcon exp clone --set`.

ruamel.yaml (a round-trip YAML library) parses the text into nodes that know where they start
and end; the value at the path is replaced in the original text, or a key is added to the
mapping that should hold it, and nothing else is touched, so comments, quoting, indentation and
trailing spaces elsewhere stay byte for byte. Values are typed as YAML reads them (`8` an
integer, `true` a boolean, `"8"` a string, `[1, 2]` a list; YAML 1.2 core schema, ruamel's
default). After each edit the result is parsed again, as YAML 1.2 and as YAML 1.1 (PyYAML, which
the server's diff uses), and the value at the path compared with the one asked for; a value the
two would read differently (`1e-3`, `yes`) is written as JSON (`0.001`, `"yes"`) instead, so an
edit never silently means something else.

Paths: keys joined by `.`, list positions as numbers (`layers.0.size` or `layers[0].size`); a
key holding a dot is written with `\\.` (`a\\.b`). ruamel is imported only by this module, which
only `falcon exp clone` imports.
"""
from __future__ import annotations

import json
import re
from typing import Any


class SetError(ValueError):
    """A `--set` that cannot be applied; the message names the path and the fix."""


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def split_path(path: str) -> list[str]:
    """Split `a.b[0].c` or `a.b.0.c` into `["a", "b", "0", "c"]` (`\\.` keeps a dot in a key).

    Raises:
        SetError: the path is empty or has an empty key (`a..b`).
    """
    normalised = re.sub(r"\[(\d+)\]", r".\1", path)
    parts = [part.replace("\\.", ".") for part in re.split(r"(?<!\\)\.", normalised)]
    if not path or any(part == "" for part in parts):
        raise SetError(f"--set path {path!r} is not valid: keys joined by '.', e.g. "
                       "model.layers.0.size")
    return parts


def parse_assignment(text: str) -> tuple[str, str]:
    """Split `path=value` (the value may contain `=`).

    Raises:
        SetError: there is no `=` or no path.
    """
    path, eq, value = text.partition("=")
    if not eq or not path:
        raise SetError(f"--set {text!r} is not path=value, e.g. --set optimizer.lr=0.001")
    split_path(path)
    return path, value


def _yaml(kind: str = "rt"):
    from ruamel.yaml import YAML

    return YAML(typ=kind, pure=kind == "rt")


def _load(text: str) -> Any:
    return _yaml("safe").load(text)


def _renderings(raw: str, value: Any) -> list[str]:
    """The texts to try for `raw`, in order: as typed (one line), then as a JSON flow value."""
    out = [raw.strip()] if "\n" not in raw and raw.strip() else []
    try:
        out.append(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError):  # a date or .inf: only the text as typed
        pass
    return out


def _key_text(key: str) -> str:
    return key if _PLAIN_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _lookup(tree: Any, keys: list[str]) -> tuple[bool, Any]:
    node = tree
    for key in keys:
        if isinstance(node, dict):
            match = [k for k in node if str(k) == key]
            if not match:
                return False, None
            node = node[match[0]]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return False, None
    return True, node


def set_path(text: str, path: str, raw: str) -> str:
    """Return `text` with the value at `path` set to `raw` (a YAML value), all else unchanged.

    An existing value is replaced where it stands; a missing last key is added at the end of
    its mapping (a new line with the mapping's indentation, or `, key: value` in a flow
    mapping). Missing intermediate keys are not created.

    Args:
        text: the config, a YAML document whose top level is a mapping.
        path: the key path (`split_path`).
        raw: the new value as YAML text (`0.001`, `true`, `"8"`, `[1, 2]`).

    Raises:
        SetError: the config is not YAML or not a mapping, a key on the way is missing or not a
            mapping or list, an index is out of range, or `raw` is not a YAML value.
    """
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

    keys = split_path(path)
    try:
        value = _load(raw) if raw.strip() else None
    except YAMLError as exc:
        raise SetError(f"--set {path}: {raw!r} is not a YAML value ({_first_line(exc)}); "
                       "quote it as a string, e.g. --set 'name=\"a: b\"'") from None
    try:
        root = _yaml().compose(text)
    except YAMLError as exc:
        raise SetError(f"the config is not YAML ({_first_line(exc)}), so --set cannot edit it; "
                       "give the whole new config with --config FILE") from None
    if not isinstance(root, MappingNode):
        raise SetError("--set edits a config whose top level is a mapping (key: value lines); "
                       "this one is empty or not a mapping: give the new config with --config "
                       "FILE")
    node = root
    for depth, key in enumerate(keys):
        where = ".".join(keys[:depth]) or "the config's top level"
        if isinstance(node, MappingNode):
            found = [v for k, v in node.value if isinstance(k, ScalarNode) and k.value == key]
            if not found:
                if depth == len(keys) - 1:
                    return _first_checked([_insert(text, node, key, rendered)
                                           for rendered in _renderings(raw, value)],
                                          keys, value, path)
                raise SetError(f"--set {path}: {'.'.join(keys[:depth + 1])} is not in the "
                               "config; --set replaces a value or adds a key to an existing "
                               "mapping")
            node = found[-1]
        elif isinstance(node, SequenceNode):
            if not key.isdigit() or int(key) >= len(node.value):
                raise SetError(f"--set {path}: {where} is a list of {len(node.value)} items; "
                               f"{key!r} is not a position in it (0 to {len(node.value) - 1})")
            node = node.value[int(key)]
        else:
            raise SetError(f"--set {path}: {where} is a single value, not a mapping or list, "
                           f"so it has no {key!r}")
    return _first_checked([_replace(text, node, rendered)
                           for rendered in _renderings(raw, value)], keys, value, path)


def _replace(text: str, node: Any, rendered: str) -> str:
    start, end = node.start_mark.index, node.end_mark.index
    old = text[start:end]
    # A block scalar or block collection ends at the next line: keep its line break.
    trailing = old[len(old.rstrip("\n")):] if "\n" in old else ""
    if "\n" in old.rstrip("\n") and not old.lstrip().startswith(("{", "[", '"', "'")):
        trailing = trailing or "\n"
    return text[:start] + rendered + trailing + text[end:]


def _insert(text: str, mapping: Any, key: str, rendered: str) -> str:
    line = f"{_key_text(key)}: {rendered}"
    if mapping.flow_style:
        close = mapping.end_mark.index - 1  # the closing brace
        separator = ", " if mapping.value else ""
        return text[:close] + separator + line + text[close:]
    indent = mapping.value[0][0].start_mark.column
    end = mapping.value[-1][1].end_mark.index
    if end > 0 and text[end - 1] == "\n":
        at = end
    else:
        newline = text.find("\n", end)
        at = len(text) if newline < 0 else newline + 1
    # Blank lines closing the mapping stay after the new key, as they separated it from the next.
    while at > 0 and text[at - 1] == "\n":
        previous = text.rfind("\n", 0, at - 1) + 1
        if text[previous:at].strip():
            break
        at = previous
    prefix = "" if at == 0 or text[at - 1] == "\n" else "\n"
    return text[:at] + prefix + " " * indent + line + "\n" + text[at:]


def _reads_back(result: str, keys: list[str], value: Any) -> bool:
    """True when `result` holds `value` at `keys` for YAML 1.2 (ruamel) AND YAML 1.1 (PyYAML,
    which the server's `exp diff` reads configs with): `1e-3` is a number only in 1.2, `yes` a
    boolean only in 1.1, so such a value is written as JSON instead."""
    import yaml
    from ruamel.yaml.error import YAMLError

    for load in (_load, yaml.safe_load):
        try:
            found, got = _lookup(load(result), keys)
        except (YAMLError, yaml.YAMLError):
            return False
        if not found or got != value or type(got) is not type(value):
            return False
    return True


def _first_checked(results: list[str], keys: list[str], value: Any, path: str) -> str:
    for result in results:
        if _reads_back(result, keys, value):
            return result
    raise SetError(f"--set {path}: the value could not be written in place so that it "
                   "reads back the same; quote it, or give the new config with --config FILE")


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
