"""`--set path=value` edits one value of a YAML config in place; every other byte stays."""
from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

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


ALIASED = """\
defaults: &d
  opt: {lr: 0.1}
baseline: *d
candidate: *d
other: {lr: 0.1}
"""


def _leaves(value, path=()):
    """Every leaf path of a parsed config with its value (aliases walked as often as named)."""
    if isinstance(value, dict):
        return {p: v for k, sub in value.items() for p, v in _leaves(sub, path + (str(k),)).items()}
    if isinstance(value, list):
        return {p: v for i, sub in enumerate(value) for p, v in _leaves(sub, path + (str(i),)).items()}
    return {path: value}


@pytest.mark.parametrize("path,words", [
    ("candidate.opt.lr", "candidate is an alias (*d) of the anchor &d written at defaults"),
    ("baseline", "baseline is an alias (*d) of the anchor &d"),
    ("defaults.opt.lr", "defaults is the anchor &d that baseline, candidate name again"),
])
def test_a_set_through_an_alias_or_its_anchor_is_refused_naming_both(path, words):
    with pytest.raises(SetError) as caught:
        set_path(ALIASED, path, "0.5")
    assert words in str(caught.value) and "copy" in str(caught.value)


def test_a_set_beside_the_aliases_changes_only_its_path():
    out = set_path(ALIASED, "other.lr", "0.5")
    before, after = _leaves(yaml.safe_load(ALIASED)), _leaves(yaml.safe_load(out))
    assert after.pop(("other", "lr")) == 0.5 and before.pop(("other", "lr")) == 0.1
    assert after == before and "&d" in out and out.count("*d") == 2


def test_an_alias_chain_is_bounded_not_expanded():
    chain = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n"
        for p, c in zip("abcdefghi", "bcdefghij"))  # 10**10 leaves if expanded
    out = set_path(chain + "x: 1\n", "x", "2")
    assert out == chain + "x: 2\n"
    with pytest.raises(SetError, match=r"b is the anchor &b that c\.0, c\.1, c\.2, \.\.\. name"):
        set_path(chain, "b.0", "2")


def test_a_config_deeper_than_the_readers_limit_is_refused():
    from core.limits.boundedyaml import MAX_DEPTH

    deep = "a: " + "[" * (MAX_DEPTH + 1) + "1" + "]" * (MAX_DEPTH + 1) + "\nx: 1\n"
    with pytest.raises(SetError, match="deeper than"):
        set_path(deep, "x", "2")



@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_only_the_named_path_changes_or_the_set_is_refused(data):
    """Configs with shared values (dumped as anchors and aliases), any leaf path: a refusal
    names an alias or an anchor exactly when the path meets a shared value; otherwise every
    other path keeps its value."""
    leaf = st.integers(-5, 5) | st.sampled_from(["x", "on", "3.10"])
    shared = data.draw(st.dictionaries(st.sampled_from("pq"), leaf, min_size=1, max_size=2))
    keys = data.draw(st.lists(st.sampled_from("abcde"), min_size=1, max_size=5, unique=True))
    config = {k: (shared if data.draw(st.booleans()) else data.draw(
        st.dictionaries(st.sampled_from("pq"), leaf, min_size=1, max_size=2)))
        for k in keys}
    text = yaml.safe_dump(config, default_flow_style=data.draw(st.sampled_from([False, None])),
                          sort_keys=False)
    before = _leaves(yaml.safe_load(text))
    path = data.draw(st.sampled_from(sorted(before)))
    through_shared = sum(v is config[path[0]] for v in config.values()) > 1
    try:
        out = set_path(text, ".".join(path), "12345")
    except SetError as exc:
        assert through_shared and ("alias" in str(exc) or "anchor" in str(exc)), str(exc)
        return
    assert not through_shared
    after = _leaves(yaml.safe_load(out))
    assert after.pop(path) == 12345
    before.pop(path)
    assert after == before
