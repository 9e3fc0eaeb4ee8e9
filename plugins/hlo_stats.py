"""hlo-stats: what an XLA HLO text dump holds, per module.

Reads ``HloModule ...`` text files (the ``*.txt`` / ``*.hlo`` files XLA dumps per compilation
stage) and reports per module: opcode counts of the ENTRY computation and static counts over all
computations, executed counts where loops have known trip counts, fusions by kind with the size
of their fused computations, custom-call targets, collectives (an async start/done pair is one
logical collective), while loops, ENTRY parameters and outputs with their bytes. Companion files
of a dump set (``-memory-usage-report``, ``-buffer-assignment``) add the module's allocation
bytes; other non-module files are skipped.

The text is split with a small tokenizer aware of (), [], {} depth and of quoted strings, so
layouts, ``backend_config={...JSON...}`` and ``/*index=5*/`` comments never cut an instruction.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plugins.common import (EXIT_NO_INPUT, EXIT_OK, EXIT_PARSE_ERROR, InputFile, PluginError,
                            argument_parser, discover, meta_record, open_text, resolve_io, run,
                            warn, write_jsonl)

PLUGIN = "hlo-stats"
OPEN, CLOSE = "([{", ")]}"
ELEMENT_BITS = {"pred": 8, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "f16": 16, "bf16": 16,
                "s32": 32, "u32": 32, "f32": 32, "s64": 64, "u64": 64, "f64": 64, "c64": 64,
                "c128": 128, "s4": 4, "u4": 4, "s2": 2, "u2": 2, "s1": 1, "u1": 1,
                "token": 0, "opaque": 0}
SYNC_COLLECTIVES = frozenset({"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                              "collective-permute", "collective-broadcast", "ragged-all-to-all"})
CONTROL_ROLES = frozenset({"entry", "while_body", "while_condition", "call", "async", "branch"})
COMPUTATION_RE = re.compile(r"(ENTRY\s+)?%?([^\s(%]+)\s*\(")
INSTRUCTION_RE = re.compile(r"\s*(ROOT\s+)?%?([^\s=]+)\s*=\s*")
OPCODE_RE = re.compile(r"\s*([A-Za-z][\w\-$.]*)\s*\(")
ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
FILE_STAGE_RE = re.compile(r"^module_(\d+)\.(.+)\.([^.]+)$")
COMPANIONS = {"-memory-usage-report": "memory_report_total_bytes",
              "-buffer-assignment": "allocation_bytes"}


class HloParseError(ValueError):
    """A module text the parser cannot read; ``offset`` is the character offset of the problem."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


# --- tokenizer ----------------------------------------------------------------------------

def scan(text: str, start: int, stops: str, end: int | None = None) -> int:
    """Index of the first character of ``stops`` at bracket depth 0 and outside strings, from
    ``start``; ``end`` (default len(text)) when there is none. Raises HloParseError on a closing
    bracket with nothing open."""
    end = len(text) if end is None else end
    depth, i = 0, start
    while i < end:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < end and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif depth == 0 and ch in stops:
            return i
        elif ch in OPEN:
            depth += 1
        elif ch in CLOSE:
            if depth == 0:
                raise HloParseError(f"unbalanced {ch!r}", i)
            depth -= 1
        i += 1
    return end


def matching(text: str, open_index: int) -> int:
    """Index of the bracket closing the one at ``open_index``; HloParseError when unclosed."""
    close = scan(text, open_index + 1, CLOSE)
    if close >= len(text):
        raise HloParseError(f"{text[open_index]!r} never closed", open_index)
    if CLOSE.index(text[close]) != OPEN.index(text[open_index]):
        raise HloParseError(f"{text[close]!r} closes {text[open_index]!r}", close)
    return close


def split_top(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` at depth 0 outside strings, parts stripped, empty parts dropped."""
    parts, i = [], 0
    while i <= len(text):
        j = scan(text, i, sep)
        part = text[i:j].strip()
        if part:
            parts.append(part)
        i = j + 1
    return parts


def strip_comments(text: str) -> str:
    """``text`` without ``/* ... */`` comments (those inside strings are kept)."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = len(text) if j < 0 else j + 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


# --- shapes -------------------------------------------------------------------------------

def element_bits(dtype: str) -> int | None:
    """Bits per element of an HLO element type (f8e4m3fn: 8, s4: 4, token: 0), None if unknown."""
    if dtype in ELEMENT_BITS:
        return ELEMENT_BITS[dtype]
    for prefix, bits in (("f8", 8), ("f6", 6), ("f4", 4)):
        if dtype.startswith(prefix):
            return bits
    return None


def shape_bytes(shape: str) -> int | None:
    """Bytes of an HLO shape: an array (rounded up per array), or a tuple (sum of its leaves).

    ``f32[]`` is one element; layouts (``{1,0}``) are ignored; None when an element type is
    unknown.
    """
    shape = shape.strip()
    if shape.startswith("("):
        inner = shape[1:matching(shape, 0)]
        sizes = [shape_bytes(part) for part in split_top(inner)]
        return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[misc]
    match = ARRAY_RE.match(shape)
    if not match:
        return 0 if shape in ("token", "opaque", "token[]", "opaque[]") else None
    bits = element_bits(match.group(1))
    if bits is None:
        return None
    elements = 1
    for dim in filter(None, (d.strip().lstrip("<=") for d in match.group(2).split(","))):
        elements *= int(dim) if dim.isdigit() else 0
    return math.ceil(elements * bits / 8)


# --- instructions and computations --------------------------------------------------------

@dataclass
class Instruction:
    """One HLO instruction: result shape text and bytes, operand names (no ``%``), attributes."""

    name: str
    shape: str
    opcode: str
    operands: list[str]
    attrs: dict[str, str]
    root: bool = False

    @property
    def bytes(self) -> int | None:
        """Bytes of the result shape (tuple: sum of its leaves)."""
        return shape_bytes(self.shape)

    def target(self, attr: str) -> str | None:
        """A computation named by attribute ``attr`` (``calls=%f`` -> ``f``)."""
        value = self.attrs.get(attr)
        return value.strip().lstrip("%") if value else None


@dataclass
class Computation:
    """A named computation and its instructions in order."""

    name: str
    entry: bool
    signature: str
    instructions: list[Instruction] = field(default_factory=list)

    def by_name(self) -> dict[str, Instruction]:
        """Instruction name -> instruction."""
        return {i.name: i for i in self.instructions}


def operand_name(operand: str) -> str:
    """The instruction an operand refers to: ``%c1``, ``c1`` and ``f32[] %c1`` all give ``c1``."""
    return operand.split()[-1].lstrip("%") if operand.split() else operand


def parse_instruction(text: str, offset: int) -> Instruction:
    """Parse one instruction line (``[ROOT] %name = shape opcode(operands), attr=value, ...``)."""
    text = strip_comments(text)
    head = INSTRUCTION_RE.match(text)
    if not head:
        raise HloParseError(f"not an instruction: {text.strip()[:80]!r}", offset)
    i = head.end()
    if text.startswith("(", i):
        shape_end = matching(text, i) + 1
    else:
        shape_end = scan(text, i, " \t")
    shape = text[i:shape_end]
    op = OPCODE_RE.match(text, shape_end)
    if not op:
        raise HloParseError(f"instruction {head.group(2)!r}: no opcode after its shape", offset)
    open_paren = op.end() - 1
    close_paren = matching(text, open_paren)
    operands = [operand_name(o) for o in split_top(text[open_paren + 1:close_paren])]
    attrs: dict[str, str] = {}
    for part in split_top(text[close_paren + 1:]):
        key, _, value = part.partition("=")
        attrs[key.strip()] = value.strip()
    return Instruction(head.group(2).lstrip("%"), shape, op.group(1), operands, attrs,
                       root=bool(head.group(1)))


def parse_body(text: str, start: int, end: int) -> list[Instruction]:
    """The instructions between the braces of a computation body (``start``..``end``)."""
    instructions, i = [], start
    while i < end:
        j = scan(text, i, "\n", end)
        line = text[i:j]
        if line.strip():
            instructions.append(parse_instruction(line, i))
        i = j + 1
    return instructions


def parse_module(text: str) -> tuple[str, dict[str, Computation]]:
    """Split a module text into its header line and its computations (name -> Computation).

    Lines that are neither the header nor a computation (the FileNames / StackFrames tables of
    recent dumps) are skipped. Raises HloParseError with the offset of the problem.
    """
    header, computations, i = "", {}, 0
    stripped = text.lstrip()
    if not stripped.startswith("HloModule"):
        raise HloParseError("does not start with 'HloModule'", 0)
    while i < len(text):
        line_end = text.find("\n", i)  # top-level lines: header, computation heads, tables
        line_end = len(text) if line_end < 0 else line_end
        line = text[i:line_end]
        if line.startswith("HloModule") and not header:
            header = line
        elif COMPUTATION_RE.match(line):
            brace = _body_brace(text, i, line_end)
            if brace is not None:
                close = matching(text, brace)
                comp = _computation(text, i, brace, close)
                if comp.name in computations:
                    raise HloParseError(f"computation {comp.name!r} defined twice", i)
                computations[comp.name] = comp
                line_end = close + 1
        i = line_end + 1
    return header, computations


def _body_brace(text: str, start: int, line_end: int) -> int | None:
    """The ``{`` opening a computation body: the last non-blank character of the header line."""
    brace = None
    stripped_end = len(text[start:line_end].rstrip())
    if stripped_end and text[start + stripped_end - 1] == "{":
        brace = start + stripped_end - 1
    return brace


def _computation(text: str, start: int, brace: int, close: int) -> Computation:
    match = COMPUTATION_RE.match(text, start)
    assert match is not None
    signature = text[match.end() - 1:brace].strip()
    return Computation(match.group(2).lstrip("%"), bool(match.group(1)), signature,
                       parse_body(text, brace + 1, close))


# --- analysis -----------------------------------------------------------------------------

def trip_count(instruction: Instruction) -> int | None:
    """``known_trip_count.n`` from a while's ``backend_config`` JSON, None when absent."""
    raw = instruction.attrs.get("backend_config")
    if not raw:
        return None
    try:
        config = json.loads(raw)
        if isinstance(config, str):
            config = json.loads(config)
        return int(config["known_trip_count"]["n"])
    except (ValueError, TypeError, KeyError):
        return None


@dataclass
class Call:
    """An edge of the call graph: ``caller`` runs ``callee`` ``factor`` times per execution."""

    caller: str
    callee: str
    role: str
    factor: int
    exact: bool = True


def _branches(value: str) -> list[str]:
    return [b.lstrip("%") for b in split_top(value.strip()[1:-1])] if value.startswith("{") else []


def calls_of(comp: Computation) -> Iterator[Call]:
    """The computations ``comp`` calls, each with its role and how often per execution."""
    for ins in comp.instructions:
        if ins.opcode == "while":
            n = trip_count(ins)
            body, cond = ins.target("body"), ins.target("condition")
            if body:
                yield Call(comp.name, body, "while_body", n if n is not None else 1, n is not None)
            if cond:
                yield Call(comp.name, cond, "while_condition", n + 1 if n is not None else 1,
                           n is not None)
            continue
        if ins.opcode == "fusion" and ins.target("calls"):
            yield Call(comp.name, ins.target("calls") or "", "fusion", 1)
        elif ins.target("calls"):
            role = "async" if ins.opcode.endswith("-start") else "call"
            yield Call(comp.name, ins.target("calls") or "", role, 1)
        if ins.target("to_apply"):
            yield Call(comp.name, ins.target("to_apply") or "",
                       "call" if ins.opcode == "call" else "to_apply", 1)
        for attr in ("branch_computations", "called_computations"):
            for callee in _branches(ins.attrs.get(attr, "")):
                yield Call(comp.name, callee, "branch" if attr.startswith("branch") else "call",
                           1, attr.startswith("branch") is False)
        for attr in ("true_computation", "false_computation"):
            if ins.target(attr):
                yield Call(comp.name, ins.target(attr) or "", "branch", 1, False)


@dataclass
class CallGraph:
    """Roles of each computation and how often it runs per execution of the module."""

    roles: dict[str, set[str]]
    executions: dict[str, int]
    exact: bool


def call_graph(computations: dict[str, Computation], entry: str) -> CallGraph:
    """Walk the calls from ``entry`` (in topological order) multiplying execution counts.

    A to_apply computation (a reduction's combiner) runs per element and is not counted as
    executed; a loop without a known trip count and conditional branches count once and make
    the counts inexact.
    """
    edges = [c for comp in computations.values() for c in calls_of(comp)
             if c.callee in computations]
    roles: dict[str, set[str]] = {name: set() for name in computations}
    roles[entry].add("entry")
    for c in edges:
        roles[c.callee].add(c.role)
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for c in edges:
            if c.caller == name:
                visit(c.callee)
        order.append(name)

    visit(entry)
    executions = {name: 0 for name in computations}
    executions[entry] = 1
    exact = True
    for name in reversed(order):
        for c in edges:
            if c.caller == name and c.role != "to_apply":
                executions[c.callee] += executions[name] * c.factor
                exact = exact and (c.exact or executions[name] == 0)
    return CallGraph(roles, executions, exact)


def _opcodes(instructions: Sequence[Instruction]) -> dict[str, int]:
    return dict(Counter(i.opcode for i in instructions).most_common())


def _collective(ins: Instruction, computations: dict[str, Computation]) -> tuple[str, bool] | None:
    """(logical collective, async?) of an instruction that starts a collective, else None."""
    if ins.opcode in SYNC_COLLECTIVES:
        return ins.opcode, False
    if ins.opcode.endswith("-start") and ins.opcode[:-len("-start")] in SYNC_COLLECTIVES:
        return ins.opcode[:-len("-start")], True
    if ins.opcode == "async-start":
        wrapped = computations.get(ins.target("calls") or "")
        for inner in wrapped.instructions if wrapped else []:
            if inner.opcode in SYNC_COLLECTIVES:
                return inner.opcode, True
    return None


def analyse_module(text: str, file: str, stage: str | None) -> list[dict[str, Any]]:
    """The records of one module text (the module record first). Raises HloParseError."""
    header, computations = parse_module(text)
    name = header.split(",")[0].split()[1] if len(header.split()) > 1 else None
    entries = [c for c in computations.values() if c.entry]
    if len(entries) != 1:
        raise HloParseError(f"expected one ENTRY computation, found {len(entries)}", 0)
    entry = entries[0]
    graph = call_graph(computations, entry.name)
    where = {"file": file, "module": name}
    records: list[dict[str, Any]] = []
    static = Counter(i.opcode for c in computations.values() for i in c.instructions)
    executed: Counter = Counter()
    for comp in computations.values():
        if graph.roles[comp.name] & CONTROL_ROLES:
            for ins in comp.instructions:
                executed[ins.opcode] += graph.executions[comp.name]
    params = sorted((i for i in entry.instructions if i.opcode == "parameter"),
                    key=lambda i: int(i.operands[0]) if i.operands and i.operands[0].isdigit() else 0)
    root = next((i for i in entry.instructions if i.root), entry.instructions[-1]
                if entry.instructions else None)
    fusions, customs, collectives, loops = [], [], [], []
    for comp in computations.values():
        operands = comp.by_name()
        wrapped = "async" in graph.roles[comp.name]
        for ins in comp.instructions:
            runs = graph.executions[comp.name]
            if ins.opcode == "fusion":
                called = computations.get(ins.target("calls") or "")
                fusions.append({"kind": "fusion", **where, "computation": comp.name,
                                "name": ins.name, "fusion_kind": ins.attrs.get("kind"),
                                "calls": ins.target("calls"),
                                "instructions": len(called.instructions) if called else None,
                                "output_bytes": ins.bytes})
            elif ins.opcode == "custom-call":
                customs.append({"kind": "custom_call", **where, "computation": comp.name,
                                "name": ins.name,
                                "target": ins.attrs.get("custom_call_target", "").strip('"'),
                                "operands": ins.operands, "operand_count": len(ins.operands),
                                "output_shape": ins.shape, "output_bytes": ins.bytes})
            elif ins.opcode == "while":
                loops.append({"kind": "while", **where, "computation": comp.name,
                              "name": ins.name, "body": ins.target("body"),
                              "condition": ins.target("condition"), "trip_count": trip_count(ins),
                              "executions": runs})
            logical = None if wrapped else _collective(ins, computations)
            if logical:
                sizes = [operands[o].bytes if o in operands else None for o in ins.operands]
                size = None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[misc]
                collectives.append({"kind": "collective", **where, "computation": comp.name,
                                    "name": ins.name, "op": logical[0], "async": logical[1],
                                    "bytes": size, "executions": runs,
                                    "total_bytes": None if size is None else size * runs})
    records.append({
        "kind": "module", **where, "stage": stage, "entry": entry.name,
        "computations": len(computations), "instructions": sum(static.values()),
        "entry_opcodes": _opcodes(entry.instructions), "static_opcodes": dict(static.most_common()),
        "executed_opcodes": dict(executed.most_common()), "executed_exact": graph.exact,
        "parameter_count": len(params),
        "parameter_bytes": _sum(p.bytes for p in params),
        "output_shape": root.shape if root else None, "output_bytes": root.bytes if root else None,
        "fusions": len(fusions), "fusion_kinds": dict(Counter(f["fusion_kind"] for f in fusions)),
        "custom_call_targets": dict(Counter(c["target"] for c in customs)),
        "collectives": dict(Counter(c["op"] for c in collectives)), "while_loops": len(loops)})
    for index, p in enumerate(params):
        records.append({"kind": "parameter", **where, "index": index, "name": p.name,  # by number
                        "shape": p.shape, "bytes": p.bytes})
    for comp in computations.values():
        records.append({"kind": "computation", **where, "name": comp.name,
                        "roles": sorted(graph.roles[comp.name]),
                        "instructions": len(comp.instructions),
                        "opcodes": _opcodes(comp.instructions),
                        "executions": graph.executions[comp.name]})
    return records + fusions + customs + collectives + loops


def _sum(values: Iterator[int | None]) -> int | None:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


# --- files --------------------------------------------------------------------------------

def accepts(path: Path) -> bool:
    """True for the file names searched in directories: ``*.txt`` and ``*.hlo``."""
    return path.suffix.lower() in (".txt", ".hlo")


def file_stage(path: Path) -> tuple[str, str | None]:
    """(base, stage) of a dump file name: ``module_0004.jit__normal.cpu_after_optimizations.txt``
    gives (``module_0004.jit__normal.cpu_after_optimizations``, ``cpu_after_optimizations``)."""
    base = path.name[:-len(path.suffix)] if path.suffix else path.name
    match = FILE_STAGE_RE.match(base)
    return base, (match.group(3) if match else None)


def read_text(path: Path) -> str:
    """The file's text (gunzipped by magic bytes)."""
    with open_text(path) as f:
        return f.read()


def companion_figure(kind: str, text: str) -> int | None:
    """Total bytes from a memory-usage report or summed allocations of a buffer assignment."""
    if kind == "memory_report_total_bytes":
        match = re.search(r"^Total bytes:\s*(\d+)", text, re.MULTILINE)
        return int(match.group(1)) if match else None
    sizes = re.findall(r"^allocation \d+: size (\d+)", text, re.MULTILINE)
    return sum(map(int, sizes)) if sizes else None


def _byte_offset(text: str, offset: int) -> int:
    return len(text[:offset].encode("utf-8"))


def analyse(sources: Sequence[InputFile]) -> list[dict[str, Any]]:
    """Read every source and build the result records (meta first).

    Raises PluginError: exit 2 when no source is an HLO module text, exit 1 when every module
    failed to parse (the message names the file and the byte offset).
    """
    modules: list[tuple[InputFile, str]] = []
    companions: dict[str, dict[str, int]] = {}
    inputs: list[dict[str, Any]] = []
    skipped = 0
    for source in sources:
        text = read_text(source.path)
        base, stage = file_stage(source.path)
        if text.lstrip().startswith("HloModule"):
            modules.append((source, text))
            continue
        suffix = next((s for s in COMPANIONS if base.endswith(s)), None)
        figure = companion_figure(COMPANIONS[suffix], text) if suffix else None
        if suffix and figure is not None:
            companions.setdefault(base[:-len(suffix)], {})[COMPANIONS[suffix]] = figure
            inputs.append({"path": source.rel, "bytes": source.size_bytes, "role": suffix[1:]})
        else:
            skipped += 1
    if not modules:
        raise PluginError(f"{', '.join(s.rel for s in sources) or 'input'}: no HLO modules "
                          f"(expected text files starting with 'HloModule')", EXIT_NO_INPUT)
    records, errors = [], []
    for source, text in modules:
        base, stage = file_stage(source.path)
        entry: dict[str, Any] = {"path": source.rel, "bytes": source.size_bytes, "role": "module"}
        try:
            module_records = analyse_module(text, source.rel, stage)
            module_records[0].update(companions.get(base, {}))
            records.extend(module_records)
        except HloParseError as exc:
            entry["error"] = (f"{source.rel}: byte offset {_byte_offset(text, exc.offset)}: "
                              f"{exc}")
            errors.append(entry["error"])
            warn(f"error: {entry['error']}")
        inputs.append(entry)
    if len(errors) == len(modules):
        raise PluginError("; ".join(errors), EXIT_PARSE_ERROR)
    return [meta_record(PLUGIN, inputs, modules=len(modules) - len(errors),
                        failed=len(errors), skipped_files=skipped)] + records


def main(argv: Sequence[str] | None = None) -> int:
    """Run hlo-stats with command-line arguments ``argv``; returns the exit status."""
    parser = argument_parser(PLUGIN, "Statistics of XLA HLO text dumps, per module.")
    args = parser.parse_args(argv)

    def body() -> int:
        inputs, output = resolve_io(args)
        sources = discover(inputs, accepts)
        if not sources:
            raise PluginError(f"{', '.join(map(str, inputs))}: no *.txt or *.hlo files",
                              EXIT_NO_INPUT)
        warn(f"{PLUGIN}: reading {len(sources)} file(s)")
        write_jsonl(output, analyse(sources))
        return EXIT_OK

    return run(body)
