"""Edit a YAML config by key path, keeping every other byte: `falcon exp clone --set`.

ruamel.yaml (a round-trip YAML library) parses the text into nodes that know where they start
and end; the value at the path is replaced in the original text, or a key is added to the
mapping that should hold it, and nothing else is touched, so comments, quoting, indentation and
trailing spaces elsewhere stay byte for byte. Values are typed as YAML reads them (`8` an
integer, `true` a boolean, `"8"` a string, `[1, 2]` a list; YAML 1.2 core schema, ruamel's
default). After each edit the result is parsed again, by ruamel and by the server's reader
(`core.limits.boundedyaml`, the YAML 1.2 core schema `exp diff` uses), and the value at the path
compared with the one asked for; a value the two would read differently is written as JSON
instead, so an edit never silently means something else; and every other path must read as it
did before.

Anchors and aliases: a value written once (`defaults: &d {...}`) and named again (`baseline:
*d`) is one node, so an edit through any of its names would change all of them. A path that
passes through, or lands on, a node named more than once is refused, naming the alias and the
anchor: write the value out where it should differ. The composed text is first bounded as
every reader of a user's YAML is (`core.limits.boundedyaml`: depth, node count), counting shared nodes
once, so an alias chain cannot make the edit expand it.

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
    names = _names_of_nodes(root)
    node = root
    for depth, key in enumerate(keys):
        where = ".".join(keys[:depth]) or "the config's top level"
        if isinstance(node, MappingNode):
            found = [v for k, v in node.value if isinstance(k, ScalarNode) and k.value == key]
            if not found:
                if depth == len(keys) - 1:
                    return _first_checked([_insert(text, node, key, rendered)
                                           for rendered in _renderings(raw, value)],
                                          keys, value, path, text)
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
        _refuse_shared(path, keys[:depth + 1], node, names)
    return _first_checked([_replace(text, node, rendered)
                           for rendered in _renderings(raw, value)], keys, value, path, text)


def _names_of_nodes(root: Any) -> dict[int, list[str]]:
    """The paths naming each node of the composed document, by `id(node)` (the first is where
    it is written; an alias names it again), bounded as `core.limits.boundedyaml` bounds every read.

    Each node is entered once however many aliases name it, so an alias chain costs its size,
    not its expansion. Paths are recorded for the first few names only.

    Raises:
        SetError: deeper than `MAX_DEPTH` or more than `MAX_NODES` nodes.
    """
    from ruamel.yaml.nodes import MappingNode, SequenceNode

    from core.limits.boundedyaml import MAX_DEPTH, MAX_NODES

    names: dict[int, list[str]] = {id(root): [""]}
    stack = [(root, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SetError(f"the config nests deeper than {MAX_DEPTH} levels ({path}), so --set "
                           "does not edit it; give the new config with --config FILE")
        if isinstance(node, MappingNode):
            children = [(getattr(k, "value", "?"), v) for k, v in node.value]
        elif isinstance(node, SequenceNode):
            children = list(enumerate(node.value))
        else:
            continue
        for key, child in children:
            child_path = f"{path}.{key}" if path else str(key)
            seen = names.get(id(child))
            if seen is not None:
                if len(seen) < 4:
                    seen.append(child_path)
                elif len(seen) == 4:
                    seen.append("...")  # and more
                continue
            if len(names) >= MAX_NODES:
                raise SetError(f"the config holds more than {MAX_NODES:,} values, so --set does "
                               "not edit it; give the new config with --config FILE")
            names[id(child)] = [child_path]
            stack.append((child, child_path, depth + 1))
    return names


def _refuse_shared(path: str, keys: list[str], node: Any, names: dict[int, list[str]]) -> None:
    """Refuse a --set reaching `node` (at `keys`) when the document names it more than once."""
    paths = names.get(id(node), [])
    if len(paths) < 2:
        return
    here = ".".join(keys)
    anchor = getattr(node, "anchor", None)
    anchor = getattr(anchor, "value", anchor) or "?"
    others = ", ".join(p for p in paths if p != here) or paths[0]
    written = paths[0]
    if written == here:
        how = f"{here} is the anchor &{anchor} that {others} name again (*{anchor})"
        fix = f"replace each *{anchor} ({others}) by a copy of the value"
    else:
        how = f"{here} is an alias (*{anchor}) of the anchor &{anchor} written at {written}"
        fix = f"replace *{anchor} at {here} by a copy of the value"
    raise SetError(f"--set {path}: {how}; they are one value, so the edit would change "
                   f"{others} too. Only the named path may change: {fix} and set it there, "
                   "or give the new config with --config FILE")


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


def _reads_back(before: str, result: str, keys: list[str], value: Any) -> bool:
    """True when `result` holds `value` at `keys` for ruamel (YAML 1.2), the server's reader
    (`core.limits.boundedyaml`, YAML 1.2 core, which `exp diff` uses; it refuses a config with anchors
    whole, so there it has no say) AND PyYAML's `safe_load` (YAML 1.1, what a task most likely
    reads its config with: `1e-3` is a number only in 1.2, `yes` a boolean only in 1.1, so such
    a value is written as JSON instead); and every other path of `result` reads as in `before`.
    """
    import yaml
    from ruamel.yaml.error import YAMLError

    from core.limits.boundedyaml import YamlLimitError, load

    try:
        old, new = _load(before), _load(result)
    except YAMLError:
        return False
    found, got = _lookup(new, keys)
    if not found or not _same(got, value, set()) or not _unchanged_elsewhere(old, new, keys):
        return False
    try:
        found, got = _lookup(yaml.safe_load(result), keys)
    except yaml.YAMLError:
        return False
    if not found or not _same(got, value, set()):
        return False
    try:
        found, got = _lookup(load(result), keys)
    except YamlLimitError as exc:
        return exc.limit == "aliases"
    return found and _same(got, value, set())


def _same(a: Any, b: Any, seen: set[tuple[int, int]]) -> bool:
    """Equal values of the same types (1, 1.0 and True differ; a NaN equals a NaN), walking
    a pair of shared objects (an alias) once."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (dict, list)):
        if (id(a), id(b)) in seen:
            return True
        seen.add((id(a), id(b)))
        if isinstance(a, dict):
            return list(a) == list(b) and all(_same(a[k], b[k], seen) for k in a)
        return len(a) == len(b) and all(_same(x, y, seen) for x, y in zip(a, b))
    if isinstance(a, float) and a != a and b != b:
        return True
    return a == b


def _unchanged_elsewhere(old: Any, new: Any, keys: list[str]) -> bool:
    """True when every path of `new` but `keys` (and the keys under it) reads as in `old`; a
    new last key may have been added."""
    if not keys:
        return True
    head, rest = keys[0], keys[1:]
    if isinstance(old, dict) and isinstance(new, dict):
        added = [k for k in new if k not in old]
        if added != ([k for k in added if str(k) == head] if not rest else []) or \
                any(k not in new for k in old):
            return False
        return all(_unchanged_elsewhere(old[k], new[k], rest) if str(k) == head
                   else _same(old[k], new[k], set()) for k in old)
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return all(_unchanged_elsewhere(o, n, rest) if str(i) == head else _same(o, n, set())
                   for i, (o, n) in enumerate(zip(old, new)))
    return False


def _first_checked(results: list[str], keys: list[str], value: Any, path: str,
                   before: str) -> str:
    for result in results:
        if _reads_back(before, result, keys, value):
            return result
    raise SetError(f"--set {path}: the value could not be written in place so that it "
                   "reads back the same; quote it, or give the new config with --config FILE")


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
