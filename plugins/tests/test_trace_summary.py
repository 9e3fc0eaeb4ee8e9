"""trace-summary end to end: real profiler output, damaged files, B/E matching, gzip, metadata."""
from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from plugins.tests.conftest import REAL_PROFILE, run_plugin
from plugins.trace_summary import TraceAggregator, summarise


def write_trace(path: Path, events: list[dict], *, form: str = "object", gz: bool = False) -> Path:
    doc = {"traceEvents": events} if form == "object" else events
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def by(records: list[dict], **match) -> list[dict]:
    return [r for r in records if all(r.get(k) == v for k, v in match.items())]


def one(records: list[dict], **match) -> dict:
    found = by(records, **match)
    assert len(found) == 1, (match, found)
    return found[0]


def X(name, ts, dur, tid=1, pid=1, **extra):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, **extra}


# --- the real JAX profiler output ---------------------------------------------------------

def reference_self_times(slices: list[tuple[float, float, str]]) -> dict[str, tuple[int, float, float]]:
    """name -> (count, total, self) by brute force: a slice's children are the slices it
    contains whose innermost container it is."""
    order = sorted(range(len(slices)), key=lambda i: (slices[i][0], -slices[i][1]))
    result: dict[str, list] = defaultdict(lambda: [0, 0.0, 0.0])
    for pos, i in enumerate(order):
        s, e, name = slices[i]
        children = 0.0
        for j in order[pos + 1:]:
            cs, ce, _ = slices[j]
            if cs >= e:
                break
            containers = [k for k in order if k != j and slices[k][0] <= cs and slices[k][1] >= ce
                          and (slices[k][0], -slices[k][1]) < (cs, -ce)]
            innermost = max(containers, key=lambda k: (slices[k][0], -slices[k][1]))
            if innermost == i:
                children += ce - cs
        acc = result[name]
        acc[0] += 1
        acc[1] += e - s
        acc[2] += max(e - s - children, 0.0)
    return {k: tuple(v) for k, v in result.items()}


def test_real_jax_trace_figures_match_an_independent_count(out):
    path = REAL_PROFILE / "vm.trace.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    run = run_plugin("trace-summary", "--input", path, "--top", "1000", output=out)
    assert run.returncode == 0, run.stderr
    meta = run.records[0]
    assert meta["kind"] == "meta" and meta["plugin"] == "trace-summary" and meta["version"] == 1
    assert meta["inputs"][0]["events"] == len(events) == 749
    assert meta["inputs"][0]["compressed"] is True and meta["incomplete"] is False
    phases = one(run.records, kind="phases")
    assert phases["by_phase"]["X"] == sum(e.get("ph") == "X" for e in events) == 736
    assert phases["by_phase"]["M"] == 12 and phases["timed_slices"] == 736
    # Groups are labelled from the M events: process "/host:CPU", thread names.
    groups = {g["tid"]: g for g in run.kind("group")}
    assert groups[1942079932]["group"] == "/host:CPU · python"
    per_tid = Counter(e["tid"] for e in events if e.get("ph") == "X")
    assert {tid: g["slices"] for tid, g in groups.items()} == dict(per_tid)
    # Totals and self times of every op on the python thread equal a brute-force computation.
    python = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
              if e.get("ph") == "X" and e["tid"] == 1942079932]
    expected = reference_self_times(python)
    ops = by(run.records, kind="op", group="/host:CPU · python")
    assert len(ops) == len(expected) == groups[1942079932]["ops"]
    for op in ops:
        count, total, self_us = expected[op["name"]]
        assert op["count"] == count
        assert op["total_us"] == pytest.approx(total, abs=1e-3)
        assert op["self_us"] == pytest.approx(self_us, abs=1e-3)
    # The jitted MLP ran 20 times: 20 ynn_fusion.1 executions over the two client threads.
    fusion = one(run.records, kind="op_total", name="ynn_fusion.1")
    assert fusion["count"] == 20 and fusion["groups"] == 2
    dur = sum(e["dur"] for e in events if e.get("name") == "ynn_fusion.1")
    assert fusion["total_us"] == pytest.approx(dur, abs=1e-3)


def test_a_profile_folder_yields_both_trace_files_each_summarised_on_its_own(out):
    run = run_plugin("trace-summary", "--input", REAL_PROFILE.parents[3], output=out)
    assert run.returncode == 0, run.stderr
    inputs = [i["path"] for i in run.records[0]["inputs"]]
    assert inputs == ["profile/plugins/profile/2026_11_29_07_24_09/perfetto_trace.json.gz",
                      "profile/plugins/profile/2026_11_29_07_24_09/vm.trace.json.gz"]
    a, b = (one(run.records, kind="op_total", name="ynn_fusion.1", input=i) for i in inputs)
    assert a["total_us"] == pytest.approx(b["total_us"], abs=1e-2)


def test_environment_variables_stand_in_for_input_and_output(tmp_path):
    result = tmp_path / "r.jsonl"
    run = run_plugin("trace-summary", env={"FALCON_INPUT_DIR": str(REAL_PROFILE),
                                           "FALCON_RESULT_FILE": str(result)})
    assert run.returncode == 0, run.stderr
    assert result.exists() and not Path(str(result) + ".tmp").exists()
    assert "reading vm.trace.json.gz" in run.stderr


def test_without_output_the_result_goes_to_stdout(tmp_path):
    path = write_trace(tmp_path / "t.json", [X("a", 0, 5)])
    run = run_plugin("trace-summary", "--input", path)
    assert run.returncode == 0
    assert one(run.records, kind="op")["total_us"] == 5


# --- files cut short, empty, or not JSON --------------------------------------------------

def test_an_array_never_closed_is_read_to_its_last_complete_event_and_flagged(tmp_path, out):
    path = tmp_path / "t.json"
    path.write_text('[{"ph":"X","name":"a","ts":0,"dur":4,"pid":1,"tid":1},\n'
                    '{"ph":"X","name":"b","ts":5,"dur":2,"pid":1,"tid":1},\n')
    run = run_plugin("trace-summary", "--input", path, output=out)
    assert run.returncode == 0, run.stderr
    assert run.records[0]["incomplete"] is True and run.records[0]["dropped_partial_events"] == 0
    assert {o["name"] for o in run.kind("op")} == {"a", "b"}


def test_an_object_cut_inside_its_last_event_drops_and_counts_that_event(tmp_path, out):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents":[{"ph":"X","name":"a","ts":0,"dur":4,"pid":1,"tid":1},'
                    '{"ph":"X","name":"b","ts":5,"du')
    run = run_plugin("trace-summary", "--input", path, output=out)
    assert run.returncode == 0, run.stderr
    meta = run.records[0]
    assert meta["incomplete"] is True and meta["dropped_partial_events"] == 1
    assert [o["name"] for o in run.kind("op")] == ["a"]


def test_an_opening_bracket_alone_is_no_usable_input(tmp_path, out):
    path = tmp_path / "t.json"
    path.write_text("[")
    run = run_plugin("trace-summary", "--input", path, output=out)
    assert run.returncode == 2
    assert "t.json: no events" in run.stderr
    assert not out.exists() and not list(out.parent.glob("*.tmp")) if out.parent.exists() else True


def test_random_bytes_are_a_parse_error_naming_the_byte_offset(tmp_path, out):
    path = tmp_path / "t.json"
    path.write_bytes(b"\n\x07\x93\xfa\x11garbage\x00\x01")
    run = run_plugin("trace-summary", "--input", path, output=out)
    assert run.returncode == 1
    assert "t.json: not trace-event JSON: at byte offset 1" in run.stderr
    assert run.output is None and not (out.parent / "out.jsonl.tmp").exists()


def test_a_syntax_error_after_the_first_byte_names_its_exact_offset(tmp_path, out):
    path = tmp_path / "t.json"
    path.write_text('[ oops]')
    run = run_plugin("trace-summary", "--input", path, output=out)
    assert run.returncode == 1 and "t.json: parse error at byte offset 2" in run.stderr
    assert run.output is None


def test_events_before_a_syntax_error_are_kept_and_the_error_reported(tmp_path, out):
    path = tmp_path / "t.json"
    path.write_text('[{"ph": "X", "name": "a", "ts": 0, "dur": 3} oops]')
    run = run_plugin("trace-summary", "--input", path, output=out)
    assert run.returncode == 0
    meta = run.records[0]
    assert meta["incomplete"] is True
    assert "parse error at byte offset 45" in meta["inputs"][0]["error"]
    assert one(run.records, kind="op")["total_us"] == 3


def test_one_bad_file_among_good_ones_is_reported_not_fatal(tmp_path, out):
    write_trace(tmp_path / "good.json", [X("a", 0, 1)])
    (tmp_path / "bad.json").write_bytes(b"\x00\x01\x02")
    run = run_plugin("trace-summary", "--input", tmp_path, output=out)
    assert run.returncode == 0
    bad = [i for i in run.records[0]["inputs"] if i["path"] == "bad.json"][0]
    assert "byte offset 0" in bad["error"]


def test_a_folder_without_trace_files_is_no_usable_input(tmp_path, out):
    (tmp_path / "notes.txt").write_text("x")
    run = run_plugin("trace-summary", "--input", tmp_path, output=out)
    assert run.returncode == 2 and "no *.json or *.json.gz trace files" in run.stderr


# --- B/E pairs and nesting ----------------------------------------------------------------

def test_a_named_end_closes_its_begin_and_leaves_the_slices_above_it_unterminated(tmp_path, out):
    events = [{"ph": "B", "name": "step", "ts": 0, "pid": 1, "tid": 3},
              {"ph": "B", "name": "fwd", "ts": 10, "pid": 1, "tid": 3},
              {"ph": "B", "name": "oops", "ts": 20, "pid": 1, "tid": 3},
              {"ph": "E", "name": "fwd", "ts": 50, "pid": 1, "tid": 3},
              {"ph": "E", "name": "step", "ts": 90, "pid": 1, "tid": 3}]
    run = run_plugin("trace-summary", "--input", write_trace(tmp_path / "t.json", events),
                     output=out)
    assert run.returncode == 0, run.stderr
    ops = {o["name"]: o for o in run.kind("op")}
    assert set(ops) == {"step", "fwd"}
    assert (ops["fwd"]["total_us"], ops["fwd"]["self_us"]) == (40, 40)
    assert (ops["step"]["total_us"], ops["step"]["self_us"]) == (90, 50)
    phases = one(run.records, kind="phases")
    assert (phases["unmatched_begin"], phases["unmatched_end"]) == (1, 0)
    assert run.records[0]["unmatched_begin"] == 1


def test_unnamed_ends_pair_lifo_and_stray_ends_and_open_begins_are_counted(tmp_path, out):
    events = [{"ph": "E", "ts": 1, "pid": 1, "tid": 1},             # stray: nothing open
              {"ph": "B", "name": "outer", "ts": 10, "pid": 1, "tid": 1},
              {"ph": "B", "name": "inner", "ts": 20, "pid": 1, "tid": 1},
              {"ph": "E", "ts": 30, "pid": 1, "tid": 1},             # closes inner
              {"ph": "E", "ts": 60, "pid": 1, "tid": 1},             # closes outer
              {"ph": "E", "name": "nope", "ts": 70, "pid": 1, "tid": 1},  # no open "nope"
              {"ph": "B", "name": "never", "ts": 80, "pid": 1, "tid": 1},  # open at the end
              X("late", 1000, 5)]
    run = run_plugin("trace-summary", "--input", write_trace(tmp_path / "t.json", events),
                     output=out)
    ops = {o["name"]: o for o in run.kind("op")}
    assert (ops["inner"]["total_us"], ops["outer"]["total_us"], ops["outer"]["self_us"]) == (
        10, 50, 40)
    assert "never" not in ops  # not stretched to the end of the trace
    phases = one(run.records, kind="phases")
    assert (phases["unmatched_begin"], phases["unmatched_end"]) == (1, 2)


def test_slices_nest_by_time_not_by_file_order(tmp_path, out):
    # Children written before their parent, an X inside a B/E pair, equal starts.
    events = [X("child", 10, 20), X("grandchild", 12, 5),
              {"ph": "E", "ts": 100, "pid": 1, "tid": 1},
              X("parent", 0, 100)]
    events.insert(2, {"ph": "B", "name": "be", "ts": 0, "pid": 1, "tid": 1})
    events.append(X("same_start_shorter", 0, 50))
    run = run_plugin("trace-summary", "--input", write_trace(tmp_path / "t.json", events),
                     output=out)
    ops = {o["name"]: (o["total_us"], o["self_us"]) for o in run.kind("op")}
    # be [0,100] and parent [0,100] tie: one nests in the other; same_start_shorter [0,50]
    # holds child [10,30] which holds grandchild [12,17].
    assert ops["grandchild"] == (5, 5)
    assert ops["child"] == (20, 15)
    assert ops["same_start_shorter"] == (50, 30)
    assert sorted([ops["be"][1], ops["parent"][1]]) == [0, 50]
    assert one(run.records, kind="group")["busy_us"] == 100


def test_slices_that_cross_their_parents_end_are_counted_per_thread_and_input(tmp_path, out):
    # Thread 1: child [50,150] crosses the end of parent [0,100]; inner [60,70] nests in it.
    # Thread 2: b [5,20] crosses a [0,10], and c [15,30] crosses b. The other input is proper.
    write_trace(tmp_path / "bad.json", [
        X("parent", 0, 100), X("child", 50, 100), X("inner", 60, 10),
        X("a", 0, 10, tid=2), X("b", 5, 15, tid=2), X("c", 15, 15, tid=2)])
    write_trace(tmp_path / "good.json", [X("parent", 0, 100), X("child", 10, 20)])
    run = run_plugin("trace-summary", "--input", tmp_path, output=out)
    assert run.returncode == 0, run.stderr
    groups = {(g["input"], g["tid"]): g["improper_overlaps"] for g in run.kind("group")}
    assert groups == {("bad.json", 1): 1, ("bad.json", 2): 2, ("good.json", 1): 0}
    phases = {p["input"]: p["improper_overlaps"] for p in run.kind("phases")}
    assert phases == {"bad.json": 3, "good.json": 0}
    # Self times stay right: only the part of a crossing child inside its parent is subtracted.
    ops = {o["name"]: o["self_us"] for o in run.kind("op") if o["input"] == "bad.json"}
    assert (ops["parent"], ops["child"], ops["inner"]) == (50, 90, 10)


def reference_improper_overlaps(slices: list[tuple[float, float]]) -> int:
    """The improper overlaps of one thread by brute force, O(n^2): in (start ascending, longer
    first) order, a slice's enclosing slice is the latest one before it still running at its
    start; the slice is improper when it ends after that one."""
    order = sorted(slices, key=lambda se: (se[0], -se[1]))
    count = 0
    for pos, (start, end) in enumerate(order):
        enclosing = [e for s, e in order[:pos] if e > start]
        if enclosing and end > enclosing[-1]:
            count += 1
    return count


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 30), st.sampled_from([1, 2])),
                max_size=40))
def test_improper_overlaps_equal_a_brute_force_count(events):
    aggregator = TraceAggregator()
    for start, dur, tid in events:
        aggregator.add(X("op", start, dur, tid=tid))
    records = list(summarise("t.json", aggregator.finish(), 20))
    got = {g["tid"]: g["improper_overlaps"] for g in records if g["kind"] == "group"}
    want = {tid: reference_improper_overlaps([(s, s + d) for s, d, t in events if t == tid])
            for tid in {t for _, _, t in events}}
    assert got == want
    assert records[0]["improper_overlaps"] == sum(want.values())


# --- gzip ---------------------------------------------------------------------------------

def test_two_gzip_members_back_to_back_are_both_read(tmp_path, out):
    split = tmp_path / "split.json.gz"
    split.write_bytes(gzip.compress(b'{"traceEvents":[{"ph":"X","name":"a","ts":0,"dur":1},')
                      + gzip.compress(b'{"ph":"X","name":"b","ts":2,"dur":1}]}'))
    twice = tmp_path / "twice.json.gz"
    twice.write_bytes(gzip.compress(b'[{"ph":"X","name":"a","ts":0,"dur":1}]')
                      + gzip.compress(b'[{"ph":"X","name":"b","ts":2,"dur":1}]'))
    for path in (split, twice):
        run = run_plugin("trace-summary", "--input", path, output=out)
        assert run.returncode == 0, run.stderr
        assert one(run.records, kind="phases")["timed_slices"] == 2
        assert run.records[0]["incomplete"] is False


def test_a_truncated_gzip_keeps_the_events_before_the_cut_and_is_flagged(tmp_path, out):
    events = [X(f"op{i % 7}", i * 10, 5) for i in range(2000)]
    data = gzip.compress(json.dumps({"traceEvents": events}).encode())
    for cut in (6, len(data) // 2):
        path = tmp_path / "t.json.gz"
        path.write_bytes(data[:-cut])
        run = run_plugin("trace-summary", "--input", path, output=out)
        assert run.returncode == 0, run.stderr
        assert "Traceback" not in run.stderr and "EOFError" in run.stderr
        meta = run.records[0]
        assert meta["truncated"] is True
        read = meta["inputs"][0]["events"]
        assert (read == 2000) if cut == 6 else (0 < read < 2000)
        assert one(run.records, kind="phases")["timed_slices"] == read


def test_compression_is_chosen_by_magic_bytes_not_by_extension(tmp_path, out):
    write_trace(tmp_path / "plain.json.gz", [X("a", 0, 1)])
    write_trace(tmp_path / "packed.json", [X("b", 0, 1)], gz=True)
    run = run_plugin("trace-summary", "--input", tmp_path, output=out)
    assert run.returncode == 0, run.stderr
    inputs = {i["path"]: i["compressed"] for i in run.records[0]["inputs"]}
    assert inputs == {"packed.json": True, "plain.json.gz": False}
    assert {o["name"] for o in run.kind("op")} == {"a", "b"}


# --- metadata, devices, phases, steps -----------------------------------------------------

def test_metadata_labels_groups_wherever_it_appears_and_is_never_an_op(tmp_path, out):
    events = [X("matmul", 0, 10, pid=7, tid=2), X("matmul", 0, 30, pid="gpu1", tid=5),
              X("copy", 20, 5, pid=7, tid=9),
              {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "/device:GPU:0"}},
              {"ph": "M", "name": "thread_name", "pid": 7, "tid": 2, "ts": -5,
               "args": {"name": "Stream #12"}},
              {"ph": "M", "name": "process_name", "pid": "gpu1", "args": {"name": "/device:GPU:1"}}]
    run = run_plugin("trace-summary", "--input",
                     write_trace(tmp_path / "t.json", events, form="array"), output=out)
    assert run.returncode == 0, run.stderr
    labels = {g["group"] for g in run.kind("group")}
    assert labels == {"/device:GPU:0 · Stream #12", "/device:GPU:1 · tid 5",
                      "/device:GPU:0 · tid 9"}
    matmul = by(run.records, kind="op", name="matmul")
    assert sorted((m["group"], m["total_us"]) for m in matmul) == [
        ("/device:GPU:0 · Stream #12", 10), ("/device:GPU:1 · tid 5", 30)]
    total = one(run.records, kind="op_total", name="matmul")
    assert (total["count"], total["total_us"], total["groups"]) == (2, 40, 2)
    assert not by(run.records, name="process_name") and not by(run.records, name="thread_name")


def test_unlabelled_groups_fall_back_to_pid_and_tid(tmp_path, out):
    run = run_plugin("trace-summary", "--input",
                     write_trace(tmp_path / "t.json", [X("a", 0, 1, pid=3, tid=4)]), output=out)
    assert one(run.records, kind="group")["group"] == "pid 3 · tid 4"


def test_other_phases_are_counted_but_not_timed(tmp_path, out):
    events = [X("a", 0, 10), {"ph": "C", "name": "mem", "ts": 1, "pid": 1, "args": {"v": 3}},
              {"ph": "i", "name": "mark", "ts": 2, "pid": 1, "tid": 1},
              {"ph": "s", "name": "flow", "ts": 3, "pid": 1, "tid": 1, "id": 1},
              {"ph": "f", "name": "flow", "ts": 4, "pid": 1, "tid": 1, "id": 1},
              {"ph": "b", "name": "async", "ts": 5, "pid": 1, "id": 2, "cat": "x"},
              {"ph": "e", "name": "async", "ts": 9, "pid": 1, "id": 2, "cat": "x"}]
    run = run_plugin("trace-summary", "--input", write_trace(tmp_path / "t.json", events),
                     output=out)
    phases = one(run.records, kind="phases")
    assert phases["untimed"] == {"C": 1, "b": 1, "e": 1, "f": 1, "i": 1, "s": 1}
    assert [o["name"] for o in run.kind("op")] == ["a"]


def test_marked_steps_give_step_time_statistics(tmp_path, out):
    events = [X(f"ProfilerStep#{i}", i * 100, d) for i, d in enumerate([10, 20, 30, 40])]
    events += [X("train_step", 1000, 7, tid=2), X("inner", 1001, 2, tid=2, args={"step_num": 1}),
               X("step_fn", 2000, 99, tid=3)]
    run = run_plugin("trace-summary", "--input", write_trace(tmp_path / "t.json", events),
                     output=out)
    steps = {s["group"]: s for s in run.kind("steps")}
    assert set(steps) == {"pid 1 · tid 1", "pid 1 · tid 2"}  # "step_fn" is not a step marker
    s = steps["pid 1 · tid 1"]
    assert (s["count"], s["mean_us"], s["min_us"], s["max_us"], s["p50_us"]) == (4, 25, 10, 40, 25)
    assert steps["pid 1 · tid 2"]["count"] == 2


# --- a large trace in bounded memory ------------------------------------------------------

def test_a_million_events_stream_through_in_bounded_memory(tmp_path, out):
    import subprocess
    import sys

    from plugins.tests.conftest import BIN, Run, plugin_env
    from plugins.tests.synthetic import CHILDREN, write_synthetic_trace

    n = 1_000_000
    path = tmp_path / "big.trace.json.gz"
    uncompressed = write_synthetic_trace(path, n)
    # The plugin runs under a fresh interpreter whose only child it is, so RUSAGE_CHILDREN's
    # ru_maxrss is the plugin's own peak, whatever other processes this test session started.
    probe = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
             "sys.stderr.write(f'PEAK_KIB={resource.getrusage(resource.RUSAGE_CHILDREN)"
             ".ru_maxrss}\\n'); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", probe, str(BIN / "trace-summary"), "--input",
                           str(path), "--output", str(out)], capture_output=True, text=True,
                          env=plugin_env(None), timeout=300)
    assert proc.returncode == 0, proc.stderr
    peak_mib = int(proc.stderr.rsplit("PEAK_KIB=", 1)[1].split()[0]) / 1024
    # The document is ~145 MB of JSON text; json.load would build ~1M dicts (well over 1 GiB).
    assert uncompressed > 140_000_000
    assert peak_mib < 200, f"peak RSS {peak_mib:.0f} MiB"
    run = Run(proc.returncode, proc.stderr, proc.stdout, out)
    assert one(run.records, kind="phases")["timed_slices"] == n
    op0 = one(run.records, kind="op_total", name="op0")
    assert op0["count"] == n // (CHILDREN + 1) and op0["self_us"] == 20 * op0["count"]
    steps = run.kind("steps")
    assert sum(s["count"] for s in steps) == n // (CHILDREN + 1)
    assert all(s["mean_us"] == 100 for s in steps)
