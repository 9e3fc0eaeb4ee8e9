"""`falcon exp diff`'s comparison: by key path, N-way, over HTTP as `GET /api/v1/exps/diff`."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from experiments.diff import diff_experiments, key_path
from experiments.services import exp_update_labels, exp_update_status
from experiments.tests.factories import make_exp

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)


def exp(i: int, config: str = "", **fields) -> dict:
    base = {"id": i, "name": f"e{i}", "cluster_name": "local", "exp_type": "profiling",
            "priority": -1, "labels": {}, "status": "Succeeded", "reason": "", "cloned_from": None,
            "started_at": NOW - timedelta(seconds=100), "finished_at": NOW,
            "role_to_task_spec": {"main": {"command": "python x.py", "replica": 1,
                                           "envs": {"A": "1"}}},
            "config": config}
    base.update(fields)
    return base


def rows(result: dict) -> dict[str, list]:
    return {row["path"]: row["values"] for row in result["differences"]}


def test_reordered_keys_are_no_difference():
    a = "model: m\nlr: 0.1\nopt:\n  beta: 1\n  eps: 2\n"
    b = "opt:\n  eps: 2\n  beta: 1\nlr: 0.1\nmodel: m\n"
    result = diff_experiments([exp(1, a), exp(2, b)], now=NOW)
    assert result["config_format"] == "yaml"
    assert not [p for p in rows(result) if p.startswith("config")]


def test_an_inserted_key_is_one_row_and_does_not_misalign_the_rest():
    a = "model: m\nlr: 0.1\nsteps: 10\n"
    b = "model: m\nwarmup: 5\nlr: 0.1\nsteps: 20\n"
    result = diff_experiments([exp(1, a), exp(2, b)], now=NOW)
    config = {p: v for p, v in rows(result).items() if p.startswith("config")}
    assert config == {"config.warmup": [None, 5], "config.steps": [10, 20]}
    warmup = next(r for r in result["differences"] if r["path"] == "config.warmup")
    assert warmup["absent"] == [0]  # absent, not null


def test_nested_lists_compare_by_position():
    a = "layers:\n  - {size: 8, acts: [relu, gelu]}\n  - {size: 16}\n"
    b = "layers:\n  - {size: 8, acts: [relu, silu]}\n  - {size: 32}\n  - {size: 64}\n"
    config = {p: v for p, v in rows(diff_experiments([exp(1, a), exp(2, b)], now=NOW)).items()
              if p.startswith("config")}
    assert config == {"config.layers[0].acts[1]": ["gelu", "silu"],
                      "config.layers[1].size": [16, 32], "config.layers[2].size": [None, 64]}


def test_a_key_that_changes_type_is_one_row_with_each_whole_value():
    a = "batch: 8\nsched: cosine\nflag: 1\n"
    b = "batch: '8'\nsched: {kind: cosine, warmup: 3}\nflag: true\n"
    config = {p: v for p, v in rows(diff_experiments([exp(1, a), exp(2, b)], now=NOW)).items()
              if p.startswith("config")}
    assert config == {"config.batch": [8, "8"],
                      "config.sched": ["cosine", {"kind": "cosine", "warmup": 3}],
                      "config.flag": [1, True]}


def test_a_config_that_is_not_yaml_is_compared_as_text():
    a = "model: m\nlr: 0.1\n"
    b = "--lr=0.1 --model m: [\n"  # not YAML
    result = diff_experiments([exp(1, a), exp(2, b)], now=NOW)
    assert result["config_format"] == "text"
    assert rows(result)["config"] == [a, b]
    (text,) = result["config_text_diffs"]
    assert text["id"] == 2 and "-model: m\n" in text["diff"] and "+--lr=0.1" in text["diff"]


def test_three_way_with_task_specs_labels_and_durations():
    specs = [{"main": {"command": "python x.py", "replica": 1, "image": "img:1",
                       "envs": {"A": "1"}}},
             {"main": {"command": "python x.py", "replica": 2, "image": "img:1",
                       "envs": {"A": "1", "B": "2"}}},
             {"main": {"command": "python x.py", "replica": 1, "image": "img:2",
                       "envs": {"A": "1"}},
              "worker": {"command": "w", "replica": 1}}]
    exps = [exp(1, "a: 1\n", role_to_task_spec=specs[0], labels={"baseline": "true"}),
            exp(2, "a: 1\n", role_to_task_spec=specs[1], status="Failed",
                started_at=NOW - timedelta(seconds=50)),
            exp(3, "a: 2\n", role_to_task_spec=specs[2], finished_at=None,
                status="Running")]
    result = diff_experiments(exps, now=NOW)
    got = rows(result)
    assert got["tasks.main.replica"] == [1, 2, 1]
    assert got["tasks.main.image"] == ["img:1", "img:1", "img:2"]
    assert got["tasks.main.envs.B"] == [None, "2", None]
    assert got["tasks.worker.command"] == [None, None, "w"]
    assert got["labels.baseline"] == ["true", None, None]
    assert got["status"] == ["Succeeded", "Failed", "Running"]
    assert got["duration_seconds"] == [100.0, 50.0, 100.0]
    assert got["config.a"] == [1, 1, 2]
    assert "tasks.main.command" not in got and "cluster_name" not in got
    everything = rows(diff_experiments(exps, now=NOW, include_equal=True))
    assert everything["tasks.main.command"] == ["python x.py"] * 3
    assert everything["cluster_name"] == ["local"] * 3


def test_key_paths_quote_what_is_not_a_plain_key():
    assert key_path("config", "a.b") == 'config["a.b"]'
    assert key_path("config", 3) == "config[3]"
    assert key_path("", "lr") == "lr"


def test_fewer_than_two_experiments_is_refused():
    with pytest.raises(ValueError, match="2 to"):
        diff_experiments([exp(1)], now=NOW)


# -- HTTP ---------------------------------------------------------------------------------------

def test_diff_endpoint_compares_in_the_order_given(auth_api, user):
    a = make_exp(creator=user, name="a", config="model: m\nlr: 0.1\n", replica=1)
    b = make_exp(creator=user, name="b", config="lr: 0.2\nmodel: m\n", replica=2)
    exp_update_labels(exp_id=b.pk, actor=user, set_labels={"baseline": "true"})
    exp_update_status(exp_id=b.pk, status="Running")
    res = auth_api.get(f"/api/v1/exps/diff?ids={b.pk},{a.pk}")
    assert res.status_code == 200, res.content
    body = res.json()
    assert [e["id"] for e in body["experiments"]] == [b.pk, a.pk]
    got = rows(body)
    assert got["name"] == ["b", "a"] and got["config.lr"] == [0.2, 0.1]
    assert got["tasks.main.replica"] == [2, 1] and got["labels.baseline"] == ["true", None]
    assert got["status"] == ["Running", "Created"]
    assert "config.model" not in got
    assert "config.model" in rows(auth_api.get(
        f"/api/v1/exps/diff?ids={a.pk}&ids={b.pk}&all=true").json())


def test_diff_endpoint_names_bad_ids(auth_api, user):
    a = make_exp(creator=user)
    assert auth_api.get(f"/api/v1/exps/diff?ids={a.pk}").status_code == 400
    res = auth_api.get(f"/api/v1/exps/diff?ids={a.pk},{a.pk}")
    assert res.status_code == 400 and "twice" in res.json()["ids"][0]
    res = auth_api.get(f"/api/v1/exps/diff?ids={a.pk},abc")
    assert res.status_code == 400 and "ids" in res.json()
    res = auth_api.get(f"/api/v1/exps/diff?ids={a.pk},{a.pk + 1000}")
    assert res.status_code == 404 and str(a.pk + 1000) in res.json()["detail"]


def test_diff_is_in_the_openapi_schema(auth_api):
    schema = auth_api.get("/api/schema/?format=json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/exps/diff" in paths and "/api/v1/exps/{exp_id}/labels" in paths


@pytest.mark.parametrize("a,b,values", [
    ("workers: 010", "workers: 8", [10, 8]),  # YAML 1.1 read both as 8
    ("flag: on", "flag: true", ["on", True]),  # 1.1: both booleans
    ("mode: 0755", "mode: 493", [755, 493]),  # 1.1: octal 493
    ("at: 22:22", "at: 1342", ["22:22", 1342]),  # 1.1: sexagesimal
    ("version: 3.10", "version: 3.1", [3.1, 3.1]),  # equal floats, written differently
])
def test_configs_compare_as_yaml_1_2_reads_them_with_the_text_where_spellings_differ(a, b,
                                                                                     values):
    (row,) = [r for r in diff_experiments([exp(1, a), exp(2, b)], now=NOW)["differences"]
              if r["path"].startswith("config")]
    assert row["values"] == values and row["equal"] is False
    assert row["written"] == [a.split(": ")[1], b.split(": ")[1]]


def test_nan_equals_nan_and_one_spelling_is_no_difference():
    a = "loss_floor: .nan\nlr: 0.1\nmeta: {floor: .nan}\n"
    result = diff_experiments([exp(1, a), exp(2, a)], now=NOW)
    assert not [p for p in rows(result) if p.startswith("config")]
    everything = diff_experiments([exp(1, a), exp(2, a)], now=NOW, include_equal=True)
    nan_row = next(r for r in everything["differences"] if r["path"] == "config.loss_floor")
    assert nan_row["equal"] is True and "written" not in nan_row
    other = diff_experiments([exp(1, a), exp(2, a.replace(".nan\nlr", ".NaN\nlr"))], now=NOW)
    (row,) = [r for r in other["differences"] if r["path"].startswith("config")]
    assert row["path"] == "config.loss_floor" and row["written"] == [".nan", ".NaN"]


def test_a_repeated_id_among_others_is_refused_not_dropped(auth_api, user):
    """`ids=1,2,1` was quietly read as `1,2`: a filter's de-duplication applied to operands."""
    a, b = make_exp(creator=user), make_exp(creator=user)
    for query in (f"ids={a.pk},{b.pk},{a.pk}", f"ids={a.pk}&ids={b.pk}&ids={a.pk}"):
        res = auth_api.get(f"/api/v1/exps/diff?{query}")
        assert res.status_code == 400, res.json()
        assert res.json()["ids"] == ["lists an experiment twice; give each id once."]


def test_a_yaml_escape_of_a_lone_surrogate_is_compared_as_text_not_a_500(auth_api, user):
    """`x: "\\ud800"` is valid YAML whose value no JSON answer can encode: the diff (and the
    compare, which shares it) answered 500. Such a config is compared as its text."""
    a = make_exp(creator=user, config="x: 1\n")
    b = make_exp(creator=user, config='x: "\\ud800"\n')
    for url in (f"/api/v1/exps/diff?ids={a.pk},{b.pk}", f"/api/v1/exps/compare?ids={a.pk},{b.pk}"):
        res = auth_api.get(url)
        assert res.status_code == 200, res.content[:300]
        assert res.json()["config_format"] == "text"
        [config] = [d for d in res.json()["differences"] if d["path"] == "config"]
        assert config["values"] == ["x: 1\n", 'x: "\\ud800"\n']
