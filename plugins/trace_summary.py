"""trace-summary: where the time went in Chrome/Perfetto trace-event JSON.

Reads trace-event JSON as the JAX and PyTorch profilers write it (object form
``{"traceEvents": [...]}`` or array form ``[...]``), plain or gzipped (chosen by magic bytes), and
reports per device and thread the top operations by total and self time, per-op totals over all
groups, step times where steps are marked, and counts of every event phase.

Streaming: the document is read with ijson, never loaded whole. Each timed slice (``X`` events and
matched ``B``/``E`` pairs) is kept as 20 bytes (start, end, name id) in its thread's compact
arrays; at the end each thread's slices are sorted by (start ascending, longer first) and nested
with a stack, which gives self time (total minus children on the same thread) whatever the file
order. Memory is therefore ~20 bytes per slice plus one thread's sort, not the document's size.
Each input file is summarised on its own (a profile folder often holds the same trace in two
formats), every record carrying its ``input``.
"""
from __future__ import annotations

import io
import math
import re
import zlib
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from gzip import BadGzipFile
from pathlib import Path
from typing import Any, BinaryIO

import ijson
import numpy as np

from plugins.common import (EXIT_NO_INPUT, EXIT_OK, EXIT_PARSE_ERROR, InputFile, PluginError,
                            argument_parser, discover, is_gzip, meta_record, open_binary,
                            percentile, resolve_io, run, warn, write_jsonl)

PLUGIN = "trace-summary"
STEP_NAME_RE = re.compile(r"^(?:(?:train_)?step\b|ProfilerStep#\d+)|StepMarker", re.IGNORECASE)
STEP_ARGS = ("step_num", "step")
STEP_NAMES_KEPT = 10  # example step names reported per group
TIMED_PHASES = frozenset("XBE")
WHITESPACE = b" \t\r\n"
UTF8_BOM = b"\xef\xbb\xbf"
PRECISE_OFFSET_LIMIT = 64 * 1024 * 1024  # re-scan for an exact error offset below this size


def accepts(path: Path) -> bool:
    """True for the file names searched in directories: ``*.json`` and ``*.json.gz``."""
    name = path.name.lower()
    return name.endswith(".json") or name.endswith(".json.gz")


class TraceReader:
    """A byte stream for ijson that counts bytes and turns a cut-off gzip stream into EOF.

    ``offset`` is the number of (decompressed) bytes handed out; ``truncated`` is set when the
    compressed stream ended early or broke after some data was read (the data before it is used).
    """

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.offset = 0
        self.truncated = False
        self.truncation: str | None = None
        self._pending = b""

    def _read_raw(self, size: int) -> bytes:
        try:  # read1: one decompression step, so nothing decoded is lost when the next one fails
            read = getattr(self.raw, "read1", self.raw.read)
            return read(size)
        except (EOFError, zlib.error, BadGzipFile) as exc:
            if self.offset == 0 and not self._pending:
                raise PluginError(f"not a readable gzip stream: {exc}", EXIT_PARSE_ERROR) from exc
            self.truncated, self.truncation = True, f"{type(exc).__name__}: {exc}"
            return b""

    def first_byte(self) -> tuple[bytes, int]:
        """The first byte that is not whitespace (or a BOM) and its offset; b"" when empty."""
        skipped = 0
        while True:
            chunk = self._read_raw(65536)
            if not chunk:
                return b"", skipped
            if skipped == 0 and chunk.startswith(UTF8_BOM):
                chunk, skipped = chunk[3:], 3
            stripped = chunk.lstrip(WHITESPACE)
            if stripped:
                self._pending = stripped
                return stripped[:1], skipped + len(chunk) - len(stripped)
            skipped += len(chunk)

    def read(self, size: int = -1) -> bytes:
        """Read up to ``size`` bytes (ijson's interface; ``read(0)`` probes the type)."""
        if size == 0:
            return b""
        if self._pending:
            data, self._pending = self._pending, b""
        else:
            data = self._read_raw(size if size and size > 0 else 65536)
        self.offset += len(data)
        return data


@dataclass
class ThreadSlices:
    """The timed slices of one (pid, tid): parallel compact arrays of start, end and name id."""

    starts: array = field(default_factory=lambda: array("d"))
    ends: array = field(default_factory=lambda: array("d"))
    names: array = field(default_factory=lambda: array("i"))
    step_durations: array = field(default_factory=lambda: array("d"))
    step_names: set = field(default_factory=set)


@dataclass
class InputStats:
    """What reading one input produced: counters, flags, and the per-thread slices."""

    events: int = 0
    phases: Counter = field(default_factory=Counter)
    bad_events: int = 0
    unmatched_begin: int = 0
    unmatched_end: int = 0
    incomplete: bool = False
    truncated: bool = False
    dropped_partial_events: int = 0
    error: str | None = None
    form: str | None = None
    threads: dict = field(default_factory=dict)
    open_slices: dict = field(default_factory=dict)
    process_names: dict = field(default_factory=dict)
    thread_names: dict = field(default_factory=dict)
    name_ids: dict = field(default_factory=dict)
    step_name_ids: dict = field(default_factory=dict)


def _hashable(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, str, float)) else str(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


class TraceAggregator:
    """Feeds trace events one by one into an InputStats (the streaming part of the plugin)."""

    def __init__(self) -> None:
        self.stats = InputStats()

    def _name_id(self, name: str) -> int:
        ids = self.stats.name_ids
        nid = ids.get(name)
        if nid is None:
            nid = ids[name] = len(ids)
            self.stats.step_name_ids[nid] = bool(STEP_NAME_RE.search(name))
        return nid

    def _thread(self, key: tuple) -> ThreadSlices:
        thread = self.stats.threads.get(key)
        if thread is None:
            thread = self.stats.threads[key] = ThreadSlices()
        return thread

    def _add_slice(self, key: tuple, name: str, start: float, end: float, step: bool) -> None:
        thread = self._thread(key)
        nid = self._name_id(name)
        thread.starts.append(start)
        thread.ends.append(end)
        thread.names.append(nid)
        if step or self.stats.step_name_ids[nid]:
            thread.step_durations.append(end - start)
            if len(thread.step_names) < STEP_NAMES_KEPT:
                thread.step_names.add(name)

    @staticmethod
    def _has_step_args(event: dict) -> bool:
        args = event.get("args")
        return isinstance(args, dict) and any(k in args for k in STEP_ARGS)

    def add(self, event: Any) -> None:
        """Account one decoded trace event (anything that is not an object counts as bad)."""
        stats = self.stats
        stats.events += 1
        if not isinstance(event, dict):
            stats.bad_events += 1
            return
        ph = event.get("ph")
        stats.phases[ph if isinstance(ph, str) else "?"] += 1
        if ph == "X":
            self._complete(event)
        elif ph == "B" or ph == "E":
            self._begin_end(ph, event)
        elif ph == "M":
            self._metadata(event)

    def _complete(self, event: dict) -> None:
        ts, dur = _number(event.get("ts")), _number(event.get("dur"))
        if ts is None or dur is None or dur < 0:
            self.stats.bad_events += 1
            return
        key = (_hashable(event.get("pid")), _hashable(event.get("tid")))
        self._add_slice(key, str(event.get("name", "")), ts, ts + dur, self._has_step_args(event))

    def _begin_end(self, ph: str, event: dict) -> None:
        ts = _number(event.get("ts"))
        if ts is None:
            self.stats.bad_events += 1
            return
        key = (_hashable(event.get("pid")), _hashable(event.get("tid")))
        stack = self.stats.open_slices.setdefault(key, [])
        if ph == "B":
            stack.append((str(event.get("name", "")), ts, self._has_step_args(event)))
            return
        name = event.get("name")
        if name:  # a named E closes the most recent open B of that name
            index = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == name), None)
        else:     # an unnamed E closes the most recent open B
            index = len(stack) - 1 if stack else None
        if index is None:
            self.stats.unmatched_end += 1
            return
        self.stats.unmatched_begin += len(stack) - index - 1  # left open above it: unterminated
        begin_name, begin_ts, step = stack[index]
        del stack[index:]
        if ts < begin_ts:
            self.stats.bad_events += 1
            return
        self._add_slice(key, begin_name, begin_ts, ts, step or self._has_step_args(event))

    def _metadata(self, event: dict) -> None:
        args = event.get("args")
        label = args.get("name") if isinstance(args, dict) else None
        if not isinstance(label, str):
            return
        pid = _hashable(event.get("pid"))
        if event.get("name") == "process_name":
            self.stats.process_names[pid] = label
        elif event.get("name") == "thread_name":
            self.stats.thread_names[(pid, _hashable(event.get("tid")))] = label

    def finish(self) -> InputStats:
        """Close the stream: B slices still open are unterminated (never stretched to the end)."""
        for stack in self.stats.open_slices.values():
            self.stats.unmatched_begin += len(stack)
        self.stats.open_slices.clear()
        return self.stats


def _partial_event_open(path: Path, prefix: str) -> bool:
    """Whether the stream of ``path`` ends inside an event (re-read event by event; rare path)."""
    reader = TraceReader(open_binary(path))
    depth_in_item = 0
    try:
        for pfx, event, _ in ijson.parse(reader, multiple_values=True):
            if pfx == prefix and event in ("start_map", "start_array"):
                depth_in_item = 1
            elif pfx == prefix and event in ("end_map", "end_array"):
                depth_in_item = 0
    except ijson.JSONError:
        pass
    finally:
        reader.raw.close()
    return depth_in_item == 1


def _exact_error_offset(path: Path) -> int | None:
    """The offset of a syntax error per ijson's pure-Python lexer (small documents only)."""
    from ijson.backends import python as python_backend

    reader = TraceReader(open_binary(path))
    try:
        for _ in python_backend.basic_parse(reader, multiple_values=True):
            pass
    except ijson.JSONError as exc:
        match = re.search(r" at (\d+)", str(exc))
        return int(match.group(1)) if match else None
    except (UnicodeDecodeError, ValueError):
        return None
    finally:
        reader.raw.close()
    return None


def read_trace(source: InputFile) -> InputStats:
    """Stream one trace file into an InputStats.

    A document cut short keeps every complete event (``incomplete``; an event cut in the middle
    is dropped and counted in ``dropped_partial_events``); a gzip stream cut short keeps what was
    decompressed (``truncated``). Raises PluginError(exit 1) when the file is not trace-event JSON
    at all, naming the file and the byte offset (of the decompressed stream).
    """
    aggregator = TraceAggregator()
    stats = aggregator.stats
    reader = TraceReader(open_binary(source.path))
    try:
        first, offset = reader.first_byte()
        if first == b"":
            stats.truncated = reader.truncated
            return aggregator.finish()
        if first not in (b"{", b"["):
            raise PluginError(f"{source.rel}: not trace-event JSON: at byte offset {offset} "
                              f"expected '{{' or '[', found {first!r}", EXIT_PARSE_ERROR)
        stats.form = "object" if first == b"{" else "array"
        prefix = "traceEvents.item" if first == b"{" else "item"
        try:
            for event in ijson.items(reader, prefix, use_float=True, multiple_values=True):
                aggregator.add(event)
        except ijson.JSONError as exc:
            _on_json_error(source, stats, prefix, reader, exc)
        stats.truncated = reader.truncated
        if reader.truncated:
            warn(f"{source.rel}: compressed stream cut short ({reader.truncation}); "
                 f"using the {stats.events} events before the cut")
        return aggregator.finish()
    finally:
        reader.raw.close()


def _on_json_error(source: InputFile, stats: InputStats, prefix: str, reader: TraceReader,
                   exc: Exception) -> None:
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "premature EOF" in message:
        stats.incomplete = True
        if _partial_event_open(source.path, prefix):
            stats.dropped_partial_events += 1
        warn(f"{source.rel}: document ends before it is closed; read {stats.events} complete "
             f"events, dropped {stats.dropped_partial_events} partial event(s)")
        return
    offset = _exact_error_offset(source.path) if reader.offset < PRECISE_OFFSET_LIMIT else None
    where = f"byte offset {offset}" if offset is not None else f"or before byte offset {reader.offset}"
    error = f"{source.rel}: parse error at {where}: {message}"
    if stats.events == 0:
        raise PluginError(error, EXIT_PARSE_ERROR) from exc
    stats.incomplete, stats.error = True, error
    warn(f"{error}; keeping the {stats.events} events before it")


@dataclass
class OpStats:
    """Per name: number of slices, total, self and longest duration in microseconds."""

    count: int
    total_us: float
    self_us: float
    max_us: float


@dataclass
class ThreadSummary:
    """What nesting one thread's slices gives: per name id its OpStats, and how many slices
    end after their enclosing slice (`improper_overlaps`: the input is malformed there)."""

    ops: dict[int, OpStats]
    improper_overlaps: int = 0


def nest_thread(thread: ThreadSlices, n_names: int) -> ThreadSummary:
    """Nest one thread's slices: per name id the OpStats, and the improper overlaps.

    Slices nest by time: sorted by start ascending, longer first on equal starts; a slice's
    enclosing slice is the latest one before it in that order that is still open at its start,
    and its self time is its duration minus the part of its children that lies inside it. A
    child that ends after its enclosing slice is an improper overlap (trace-event slices on one
    thread must nest): only its part inside the parent is subtracted, so self times stay right,
    and it is counted, so the output says the input was malformed.
    """
    n = len(thread.starts)
    if n == 0:
        return ThreadSummary({})
    starts = np.frombuffer(thread.starts, dtype=np.float64)
    ends = np.frombuffer(thread.ends, dtype=np.float64)
    names = np.frombuffer(thread.names, dtype=np.int32)
    order = np.lexsort((-ends, starts))
    s_list, e_list = starts[order].tolist(), ends[order].tolist()
    children = [0.0] * n
    improper = 0
    stack: list[int] = []
    for i in range(n):
        start = s_list[i]
        while stack and e_list[stack[-1]] <= start:
            stack.pop()
        if stack:
            parent = stack[-1]
            if e_list[i] > e_list[parent]:
                improper += 1
            children[parent] += min(e_list[i], e_list[parent]) - start
        stack.append(i)
    durations = ends[order] - starts[order]
    self_times = np.maximum(durations - np.asarray(children), 0.0)
    sorted_names = names[order]
    counts = np.bincount(sorted_names, minlength=n_names)
    totals = np.bincount(sorted_names, weights=durations, minlength=n_names)
    selfs = np.bincount(sorted_names, weights=self_times, minlength=n_names)
    maxima = np.zeros(n_names)
    np.maximum.at(maxima, sorted_names, durations)
    return ThreadSummary({int(nid): OpStats(int(counts[nid]), float(totals[nid]),
                                            float(selfs[nid]), float(maxima[nid]))
                          for nid in np.flatnonzero(counts)}, improper)


def _us(value: float) -> float:
    return round(value, 3)


def _ranked(ops: dict[str, OpStats], top: int) -> list[tuple[str, OpStats, int, int]]:
    """The names in the top ``top`` by total or by self time, with both ranks, by total desc."""
    by_total = sorted(ops, key=lambda n: (-ops[n].total_us, n))
    by_self = sorted(ops, key=lambda n: (-ops[n].self_us, n))
    rank_total = {n: i + 1 for i, n in enumerate(by_total)}
    rank_self = {n: i + 1 for i, n in enumerate(by_self)}
    chosen = set(by_total[:top]) | set(by_self[:top])
    return [(n, ops[n], rank_total[n], rank_self[n]) for n in by_total if n in chosen]


def _op_fields(op: OpStats) -> dict[str, Any]:
    return {"count": op.count, "total_us": _us(op.total_us), "self_us": _us(op.self_us),
            "mean_us": _us(op.total_us / op.count), "max_us": _us(op.max_us)}


def group_label(stats: InputStats, pid: Any, tid: Any) -> tuple[str, str, str | None]:
    """(label, process, thread) of a (pid, tid) from the metadata, else ``pid N`` / ``tid N``."""
    process = stats.process_names.get(pid, f"pid {pid}")
    if tid is None:
        return process, process, None
    thread = stats.thread_names.get((pid, tid), f"tid {tid}")
    return f"{process} · {thread}", process, thread


def summarise(rel: str, stats: InputStats, top: int) -> Iterator[dict[str, Any]]:
    """The result records of one input (everything but the meta record).

    The threads are nested before the first record is yielded, because the input's `phases`
    record carries the sum of their improper overlaps.
    """
    names = list(stats.name_ids)
    nested = [(key, thread, nest_thread(thread, len(names))) for key, thread in
              sorted(stats.threads.items(), key=lambda kv: str(kv[0]))]
    untimed = {ph: n for ph, n in sorted(stats.phases.items()) if ph not in TIMED_PHASES and ph != "M"}
    yield {"kind": "phases", "input": rel, "events": stats.events,
           "by_phase": dict(sorted(stats.phases.items())), "untimed": untimed,
           "timed_slices": sum(len(t.starts) for t in stats.threads.values()),
           "unmatched_begin": stats.unmatched_begin, "unmatched_end": stats.unmatched_end,
           "bad_events": stats.bad_events,
           "improper_overlaps": sum(summary.improper_overlaps for _, _, summary in nested)}
    overall: dict[str, OpStats] = {}
    groups: Counter = Counter()
    for (pid, tid), thread, summary in nested:
        ops = {names[nid]: op for nid, op in summary.ops.items()}
        label, process, thread_label = group_label(stats, pid, tid)
        yield {"kind": "group", "input": rel, "group": label, "pid": pid, "tid": tid,
               "process": process, "thread": thread_label, "slices": len(thread.starts),
               "ops": len(ops), "busy_us": _us(sum(op.self_us for op in ops.values())),
               "improper_overlaps": summary.improper_overlaps}
        for name, op, rank_total, rank_self in _ranked(ops, top):
            yield {"kind": "op", "input": rel, "group": label, "name": name, **_op_fields(op),
                   "rank_total": rank_total, "rank_self": rank_self}
        if thread.step_durations:
            yield _steps_record(rel, label, thread)
        for name, op in ops.items():
            groups[name] += 1
            acc = overall.get(name)
            overall[name] = op if acc is None else OpStats(
                acc.count + op.count, acc.total_us + op.total_us, acc.self_us + op.self_us,
                max(acc.max_us, op.max_us))
    for name, op, rank_total, rank_self in _ranked(overall, top):
        yield {"kind": "op_total", "input": rel, "name": name, **_op_fields(op),
               "groups": groups[name], "rank_total": rank_total, "rank_self": rank_self}


def _steps_record(rel: str, label: str, thread: ThreadSlices) -> dict[str, Any]:
    durations = sorted(thread.step_durations)
    return {"kind": "steps", "input": rel, "group": label, "names": sorted(thread.step_names),
            "count": len(durations), "mean_us": _us(sum(durations) / len(durations)),
            "min_us": _us(durations[0]), "max_us": _us(durations[-1]),
            "p50_us": _us(percentile(durations, 50))}


def _input_entry(source: InputFile, stats: InputStats | None, error: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": source.rel, "bytes": source.size_bytes,
                             "compressed": is_gzip(source.path)}
    if stats is not None:
        entry.update(form=stats.form, events=stats.events, incomplete=stats.incomplete,
                     truncated=stats.truncated, dropped_partial_events=stats.dropped_partial_events)
        error = error or stats.error
    if error:
        entry["error"] = error
    return entry


def analyse(sources: Sequence[InputFile], top: int) -> list[dict[str, Any]]:
    """Read every source and build the result records (meta first).

    Raises PluginError: exit 1 when every source failed to parse, exit 2 when no source held a
    single trace event.
    """
    results: list[tuple[InputFile, InputStats | None, str | None]] = []
    for source in sources:
        warn(f"{PLUGIN}: reading {source.rel} ({source.size_bytes} bytes)")
        try:
            results.append((source, read_trace(source), None))
        except PluginError as exc:
            warn(f"error: {exc}")
            results.append((source, None, str(exc)))
    read = [(s, st) for s, st, _ in results if st is not None and st.events > 0]
    if not read:
        errors = [e for _, _, e in results if e]
        if errors and len(errors) == len(results):
            raise PluginError("; ".join(errors), EXIT_PARSE_ERROR)
        paths = ", ".join(s.rel for s in sources)
        raise PluginError(f"{paths}: no events (expected Chrome/Perfetto trace-event JSON)",
                          EXIT_NO_INPUT)
    stats_list = [st for _, st, _ in results if st is not None]
    records: list[dict[str, Any]] = [meta_record(
        PLUGIN, [_input_entry(s, st, e) for s, st, e in results], top=top,
        incomplete=any(st.incomplete for st in stats_list),
        truncated=any(st.truncated for st in stats_list),
        dropped_partial_events=sum(st.dropped_partial_events for st in stats_list),
        unmatched_begin=sum(st.unmatched_begin for st in stats_list),
        unmatched_end=sum(st.unmatched_end for st in stats_list))]
    for source, stats in read:
        records.extend(summarise(source.rel, stats, top))
    return records


def main(argv: Sequence[str] | None = None) -> int:
    """Run trace-summary with command-line arguments ``argv``; returns the exit status."""
    parser = argument_parser(PLUGIN, "Summarise Chrome/Perfetto trace-event JSON (plain or gzip).")
    parser.add_argument("--top", type=int, default=20,
                        help="operations reported per group, by total and by self time")
    args = parser.parse_args(argv)

    def body() -> int:
        inputs, output = resolve_io(args)
        sources = discover(inputs, accepts)
        if not sources:
            raise PluginError(f"{', '.join(map(str, inputs))}: no *.json or *.json.gz trace "
                              f"files", EXIT_NO_INPUT)
        write_jsonl(output, analyse(sources, max(args.top, 1)))
        return EXIT_OK

    return run(body)
