"""hlo-stats: what trips naive HLO splitting, loops and collectives, and the real JAX dump set."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from plugins.hlo_stats import analyse_module, shape_bytes
from plugins.tests.conftest import FIXTURES, REAL, run_plugin

STEP = FIXTURES / "hlo" / "jit_step.txt"
TRAIN = FIXTURES / "hlo" / "jit_train.txt"


def kinds(records: list[dict], kind: str) -> list[dict]:
    return [r for r in records if r["kind"] == kind]


def test_nested_layout_braces_comments_and_a_tuple_custom_call(out):
    run = run_plugin("hlo-stats", "--input", STEP, output=out)
    assert run.returncode == 0, run.stderr
    module = kinds(run.records, "module")[0]
    assert module["module"] == "jit_step" and module["entry"] == "main.9"
    assert module["computations"] == 2
    assert module["entry_opcodes"] == {"parameter": 2, "constant": 1, "custom-call": 1,
                                       "get-tuple-element": 1, "fusion": 1}
    assert module["fusion_kinds"] == {"kLoop": 1}
    (fusion,) = kinds(run.records, "fusion")
    assert (fusion["calls"], fusion["instructions"]) == ("fused_scale", 4)
    (gemm,) = kinds(run.records, "custom_call")
    assert gemm["target"] == "__cublas$lt$matmul$f8"
    assert gemm["output_bytes"] == 32768 + 4 + 33554432 == 33587204
    assert gemm["operand_count"] == 6 and gemm["operands"][5] == "c1"
    assert module["custom_call_targets"] == {"__cublas$lt$matmul$f8": 1}
    params = kinds(run.records, "parameter")
    assert [(p["name"], p["bytes"]) for p in params] == [("p0", 64 * 128), ("p1", 128 * 256)]
    assert module["parameter_bytes"] == 64 * 128 + 128 * 256
    assert module["output_bytes"] == 64 * 256 * 2


def test_names_with_and_without_percent_give_identical_results():
    text = STEP.read_text()
    bare = re.sub(r"%(?=[\w.])", "", text)
    assert "%" not in bare.replace("$", "")
    assert analyse_module(text, "f", None) == analyse_module(bare, "f", None)


def test_loops_collectives_and_reductions(out):
    run = run_plugin("hlo-stats", "--input", TRAIN, output=out)
    assert run.returncode == 0, run.stderr
    module = kinds(run.records, "module")[0]
    assert module["static_opcodes"] == {"parameter": 5, "get-tuple-element": 4, "constant": 3,
                                        "add": 2, "tuple": 2, "compare": 1, "while": 1,
                                        "all-reduce-start": 1, "all-reduce-done": 1}
    assert module["instructions"] == 20
    # Executed: ENTRY once, body 8 times, condition 9 times (the trip count is known).
    assert module["executed_exact"] is True
    executed = module["executed_opcodes"]
    assert executed["all-reduce-start"] == 8 and executed["compare"] == 9
    assert executed["get-tuple-element"] == 1 + 2 * 8 + 9
    assert "add" in executed and executed["add"] == 8  # the to_apply combiner is not executed
    (loop,) = kinds(run.records, "while")
    assert (loop["trip_count"], loop["body"], loop["condition"]) == (8, "body", "cond")
    (collective,) = kinds(run.records, "collective")
    assert (collective["op"], collective["async"], collective["bytes"]) == ("all-reduce", True, 4096)
    assert (collective["executions"], collective["total_bytes"]) == (8, 8 * 4096)
    assert module["collectives"] == {"all-reduce": 1}
    roles = {c["name"]: c["roles"] for c in kinds(run.records, "computation")}
    assert roles == {"add.f": ["to_apply"], "cond": ["while_condition"],
                     "body": ["while_body"], "main": ["entry"]}
    assert module["fusions"] == 0
    executions = {c["name"]: c["executions"] for c in kinds(run.records, "computation")}
    assert executions == {"add.f": 0, "cond": 9, "body": 8, "main": 1}


def test_generic_async_wrapping_a_collective_is_one_logical_collective(tmp_path, out):
    path = tmp_path / "m.hlo"
    path.write_text("""HloModule async_ar

%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%wrapped (p: f32[1024]) -> f32[1024] {
  %p = f32[1024]{0} parameter(0)
  ROOT %ar = f32[1024]{0} all-reduce(%p), replica_groups={}, to_apply=%sum
}

ENTRY %main (a: f32[1024]) -> f32[1024] {
  %a = f32[1024]{0} parameter(0)
  %st = ((f32[1024]{0}), f32[1024]{0}) async-start(%a), calls=%wrapped, backend_config={"note":"a } in a string","x":{"y":[1,{"z":2}]}}
  ROOT %dn = f32[1024]{0} async-done(%st), calls=%wrapped
}
""")
    run = run_plugin("hlo-stats", "--input", path, output=out)
    assert run.returncode == 0, run.stderr
    (collective,) = kinds(run.records, "collective")
    assert (collective["op"], collective["name"], collective["bytes"]) == ("all-reduce", "st", 4096)
    assert kinds(run.records, "module")[0]["entry_opcodes"] == {
        "parameter": 1, "async-start": 1, "async-done": 1}


def test_integer_pred_and_tuple_results_are_never_skipped():
    records = analyse_module(TRAIN.read_text(), "f", None)
    cond = [c for c in records if c["kind"] == "computation" and c["name"] == "cond"][0]
    assert cond["opcodes"] == {"parameter": 1, "get-tuple-element": 1, "constant": 1,
                               "compare": 1}


@pytest.mark.parametrize("shape, size", [
    ("f32[]", 4), ("pred[]", 1), ("bf16[64,256]{1,0}", 32768), ("s4[3]", 2), ("u4[4]{0}", 2),
    ("c128[2]", 32), ("f8e5m2[10]", 10), ("token[]", 0), ("(s32[], f32[1024]{0})", 4100),
    ("((f32[2]), s8[3])", 11), ("f32[<=8]", 32)])
def test_shape_bytes(shape, size):
    assert shape_bytes(shape) == size


def test_the_real_jax_dump_set(out):
    run = run_plugin("hlo-stats", "--input", REAL / "hlo", output=out)
    assert run.returncode == 0, run.stderr
    meta = run.records[0]
    roles = {i["path"]: i["role"] for i in meta["inputs"]}
    assert roles["module_0010.jit_mlp.cpu_after_optimizations-memory-usage-report.txt"] == \
        "memory-usage-report"
    assert meta["modules"] == 5 and meta["skipped_files"] == 1  # the live-range report
    modules = {m["file"]: m for m in kinds(run.records, "module")}
    after = modules["module_0010.jit_mlp.cpu_after_optimizations.txt"]
    before = modules["module_0010.jit_mlp.before_optimizations.txt"]
    assert (after["stage"], before["stage"]) == ("cpu_after_optimizations", "before_optimizations")
    # x f32[256,512], w1 f32[512,1024], w2 f32[1024,256] -> softmax output f32[256,256].
    assert after["parameter_bytes"] == before["parameter_bytes"] == 4 * (256 * 512 + 512 * 1024
                                                                         + 1024 * 256)
    assert after["output_bytes"] == 4 * 256 * 256
    assert after["entry_opcodes"] == {"fusion": 4, "parameter": 3, "constant": 1}
    assert after["fusion_kinds"] == {"kCustom": 2, "kLoop": 2}
    assert before["entry_opcodes"]["dot"] == 2 and before["fusions"] == 0
    # Counted independently: every "= shape opcode(" line in the file is one instruction.
    text = (REAL / "hlo" / "module_0010.jit_mlp.cpu_after_optimizations.txt").read_text()
    assert after["instructions"] == len(re.findall(r"^\s+(ROOT )?%\S+ = ", text, re.MULTILINE))
    fusions = {f["name"]: f for f in kinds(run.records, "fusion") if f["file"] == after["file"]}
    fused = text.split("%fused_computation.1 (")[1].split("\n}")[0]
    assert fusions["ynn_fusion.1"]["instructions"] == fused.count(" = ") == 27
    assert fusions["ynn_fusion.1"]["fusion_kind"] == "kCustom"
    # The memory report and the buffer assignment of this module agree: 3933212 bytes.
    assert after["memory_report_total_bytes"] == after["allocation_bytes"] == 3933212
    roles_by_name = {c["name"]: c["roles"] for c in kinds(run.records, "computation")
                     if c["file"] == after["file"]}
    assert roles_by_name["region_1.2"] == ["to_apply"] and roles_by_name["main.3"] == ["entry"]
    normal = modules["module_0004.jit__normal.cpu_after_optimizations.txt"]
    assert normal["while_loops"] == 1 and normal["fusion_kinds"] == {"kLoop": 10}


def test_no_module_files_is_no_usable_input(tmp_path, out):
    (tmp_path / "notes.txt").write_text("hello")
    run = run_plugin("hlo-stats", "--input", tmp_path, output=out)
    assert run.returncode == 2 and "no HLO modules" in run.stderr and run.output is None


def test_a_module_that_cannot_be_parsed_names_file_and_byte_offset(tmp_path, out):
    (tmp_path / "bad.txt").write_text("HloModule bad\n\nENTRY %main () -> f32[] {\n"
                                      "  ROOT %c = f32[] constant(1))\n}\n")
    run = run_plugin("hlo-stats", "--input", tmp_path, output=out)
    assert run.returncode == 1 and run.output is None
    assert "bad.txt: byte offset" in run.stderr
