"""The typed TaskSpec: built once by the validator, stored as the JSON object it always was."""
from __future__ import annotations

import json
import pickle

import pytest

from core.domain.taskspec import EMPTY, TaskSpec
from jobs.specs import task_spec_of, validate_task_spec


def checked(spec: dict) -> dict:
    errors: dict[str, list[str]] = {}
    out = validate_task_spec("main", spec, errors)
    assert errors == {}
    return out


@pytest.mark.parametrize("raw", [
    {"command": "echo hi"},
    {"command": "python t.py", "replica": 3, "image": "gcr.io/a/b:1", "device_type": "h100",
     "device_count": 8, "device_topo": "", "envs": {"A": 1, "B": True, "C": "x"}},
    {"command": "x", "image": None, "device_topo": "2x2x2", "envs": None},
])
def test_the_stored_json_is_the_validators_mapping(raw):
    """`to_json` writes the very object (keys and their order) CreateExp stored before."""
    before = checked(raw)
    spec = task_spec_of(before)
    assert json.dumps(spec.to_json()) == json.dumps(before)
    assert TaskSpec.from_json(spec.to_json()) == spec


def test_fields_are_typed_and_read_only():
    spec = task_spec_of(checked({"command": "c", "replica": 2, "envs": {"N": 5}}))
    assert (spec.command, spec.replica, spec.image, spec.device_count) == ("c", 2, "", None)
    assert spec.envs == {"N": "5"}
    with pytest.raises(TypeError):
        spec.envs["M"] = "1"  # type: ignore[index]
    with pytest.raises(AttributeError):
        spec.replica = 3  # type: ignore[misc]


def test_from_json_fills_defaults_for_absent_fields():
    assert TaskSpec.from_json({}) == EMPTY
    assert TaskSpec.from_json({"command": "c"}).to_json() == {
        "command": "c", "replica": 1, "image": "", "device_type": "", "device_topo": "",
        "device_count": None, "envs": {}}


@pytest.mark.parametrize("stored, field", [
    ([], "JSON object"), ({"command": 3}, "command"), ({"replica": "2"}, "replica"),
    ({"replica": True}, "replica"), ({"device_count": 1.5}, "device_count"),
    ({"envs": ["A"]}, "envs"), ({"image": {"name": "x"}}, "image"),
])
def test_from_json_names_the_field_a_changed_row_breaks(stored, field):
    with pytest.raises(ValueError, match=field):
        TaskSpec.from_json(stored)


def test_from_json_reads_env_values_as_the_text_a_process_sees():
    assert dict(TaskSpec.from_json({"envs": {"A": 1, "B": "x"}}).envs) == {"A": "1", "B": "x"}


def test_a_task_spec_pickles_whole_and_stays_read_only():
    # multiprocessing sends TaskSpecs between processes (bench/resources.py's fake cluster)
    spec = TaskSpec(command="python train.py", replica=2, image="img:1", device_type="tpu",
                    device_topo="2x2", device_count=4, envs={"A": "1", "B": "x y"})
    back = pickle.loads(pickle.dumps(spec))
    assert back == spec and back.to_json() == spec.to_json()
    with pytest.raises(TypeError):
        back.envs["A"] = "2"
