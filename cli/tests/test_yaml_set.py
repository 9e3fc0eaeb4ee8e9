"""`--set path=value` edits one value of a YAML config in place; every other byte stays."""
from __future__ import annotations

import pytest
import yaml

from cli.yaml_set import SetError, set_path, split_path

CONFIG = """\
# top comment
model: qwen/qwen3-32b   # the model
random_input_len: 16384 
opt:
  lr: 0.001  # learning rate
  betas: [0.9, 0.99]
  sched:
    kind: cosine

layers:
  - size: 8
  - size: 16
flow: {a: 1}
"a.b": 3
text: |
  hello
  world
last: x
"""


@pytest.mark.parametrize("path,raw,old_line,new_line", [
    ("opt.lr", "0.01", "  lr: 0.001  # learning rate\n", "  lr: 0.01  # learning rate\n"),
    ("random_input_len", "8", "random_input_len: 16384 \n", "random_input_len: 8 \n"),
    ("opt.betas.1", "0.999", "  betas: [0.9, 0.99]\n", "  betas: [0.9, 0.999]\n"),
    ("layers[1].size", "'32'", "  - size: 16\n", "  - size: '32'\n"),
    ("flow.b", "2", "flow: {a: 1}\n", "flow: {a: 1, b: 2}\n"),
    ("a\\.b", "4", '"a.b": 3\n', '"a.b": 4\n'),
    ("opt.sched.kind", "linear", "    kind: cosine\n", "    kind: linear\n"),
])
def test_one_line_changes_and_no_other(path, raw, old_line, new_line):
    after = set_path(CONFIG, path, raw)
    assert after == CONFIG.replace(old_line, new_line, 1)


def test_values_are_typed_as_yaml_reads_them():
    for raw, expected in [("8", 8), ("'8'", "8"), ("true", True), ("null", None),
                          ("[1, 2]", [1, 2]), ("{k: v}", {"k": "v"}), ("1e-3", 0.001), ("yes", "yes")]:
        assert yaml.safe_load(set_path(CONFIG, "opt.lr", raw))["opt"]["lr"] == expected


def test_a_new_key_is_added_to_its_mapping_before_the_blank_line():
    after = set_path(CONFIG, "opt.wd", "0.1")
    assert after == CONFIG.replace("    kind: cosine\n\n", "    kind: cosine\n  wd: 0.1\n\n")
    after = set_path(CONFIG, "new", "[1, 2]")
    assert after == CONFIG + "new: [1, 2]\n"


def test_a_block_scalar_is_replaced_whole():
    after = set_path(CONFIG, "text", "short")
    assert after == CONFIG.replace("text: |\n  hello\n  world\n", "text: short\n")


@pytest.mark.parametrize("text,path,words", [
    (CONFIG, "x.y", "x is not in the config"),
    (CONFIG, "model.a", "single value"),
    (CONFIG, "layers.5.size", "list of 2 items"),
    ("not: [yaml", "a", "not YAML"),
    ("", "a", "top level is a mapping"),
    ("- a\n- b\n", "0", "top level is a mapping"),
    (CONFIG, "a..b", "not valid"),
])
def test_errors_name_the_path_and_the_fix(text, path, words):
    with pytest.raises(SetError, match=words.replace("[", r"\[")):
        set_path(text, path, "1")


def test_a_value_that_is_not_yaml_is_refused():
    with pytest.raises(SetError, match="not a YAML value"):
        set_path(CONFIG, "opt.lr", "[1, 2")


def test_split_path():
    assert split_path("a.b[0].c") == ["a", "b", "0", "c"] == split_path("a.b.0.c")
    assert split_path("a\\.b.c") == ["a.b", "c"]
