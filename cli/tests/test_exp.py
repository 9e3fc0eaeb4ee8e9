"""`falcon exp` over the wire against the real Django app (live_server)."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from cli import exp as exp_module
from cli.exit_codes import ExitCode
from experiments.models import Experiment
from experiments.services import exp_update_status

from .conftest import CONFIG_YAML, EMAIL, TASKS_YAML, one_line

pytestmark = pytest.mark.django_db(transaction=True)


def _create(cli, files, *extra, name="model-profiling-001", tasks=TASKS_YAML,
            config=CONFIG_YAML):
    args = ["exp", "create", "--name", name, "--cluster", "tpu-v5p-cluster-a",
            "--type", "profiling", "--role-to-task-spec", files(f"{name}-tasks.yaml", tasks)]
    if config is not None:
        args += ["--config", files(f"{name}-config.yaml", config)]
    return cli(*args, *extra)


def test_login_then_create_get_list_abort_delete(falcon_cli, files):
    falcon_cli.login()

    result = _create(falcon_cli, files, "--priority", "5", "-o", "json")
    assert result.exit_code == 0, result.output
    created = json.loads(result.stdout)
    exp_id = created["id"]
    assert created["status"] == "Created" and created["priority"] == 5
    assert created["creator"] == EMAIL
    assert [j["role"] for j in created["jobs"]] == ["main"]
    assert created["jobs"][0]["task_spec"]["envs"] == {"JAX_PLATFORMS": "tpu",
                                                       "LOG_LEVEL": "info"}
    assert created["artifact"]["status"] == "Created"

    result = falcon_cli("exp", "get", str(exp_id))
    assert result.exit_code == 0, result.output
    for text in ("model-profiling-001", "Created", "jobs", "artifact", "Pending",
                 "random_range_ratio: 1.0"):
        assert text in result.stdout
    got = yaml.safe_load(falcon_cli("exp", "get", str(exp_id), "-o", "yaml").stdout)
    assert got["id"] == exp_id and got["config"] == CONFIG_YAML and got["jobs"][0]["id"]

    listed = json.loads(falcon_cli("exp", "list", "-o", "json").stdout)
    assert [e["id"] for e in listed] == [exp_id]
    result = falcon_cli("exp", "list")
    assert result.exit_code == 0 and "model-profiling-001" in result.stdout
    assert "main:Pending" in result.stdout

    # Deleting needs a terminal experiment: a conflict is one line and exit code 4.
    result = falcon_cli("exp", "delete", "--yes", str(exp_id))
    assert result.exit_code == ExitCode.CONFLICT
    assert one_line(result.stderr).startswith(f"error: Experiment {exp_id} is Created")

    result = falcon_cli("exp", "abort", str(exp_id))
    assert result.exit_code == 0, result.output
    assert f"experiment {exp_id} (model-profiling-001) is Aborting" in result.stdout
    again = json.loads(falcon_cli("exp", "abort", str(exp_id), "-o", "json").stdout)
    assert again["status"] == "Aborting"  # idempotent

    exp_update_status(exp_id=exp_id, status="Aborted")
    result = falcon_cli("exp", "delete", "--yes", str(exp_id))
    assert result.exit_code == 0, result.output
    assert f"deleted experiment {exp_id}" in result.stdout
    assert not Experiment.objects.filter(pk=exp_id).exists()
    assert falcon_cli("exp", "get", str(exp_id)).exit_code == ExitCode.NOT_FOUND
    assert all(r.headers["authorization"].startswith("Bearer ")
               for r in falcon_cli.transport.requests
               if r.url.path not in ("/api/v1/auth/token", "/api/v1/auth/config"))


def test_delete_asks_for_confirmation(logged_in, files):
    exp_id = json.loads(_create(logged_in, files, "-o", "json").stdout)["id"]
    exp_update_status(exp_id=exp_id, status="Failed")
    result = logged_in("exp", "delete", str(exp_id), input="y\n")  # no terminal: refused
    assert result.exit_code == ExitCode.USAGE
    assert "without a terminal to confirm it, pass --yes" in " ".join(
        result.stderr.replace("│", " ").split())
    assert Experiment.objects.filter(pk=exp_id).exists()
    logged_in.interactive = lambda: True
    result = logged_in("exp", "delete", str(exp_id), input="n\n")
    assert result.exit_code == ExitCode.ERROR
    assert "was not deleted" in result.stderr
    assert Experiment.objects.filter(pk=exp_id).exists()
    result = logged_in("exp", "delete", str(exp_id), input="y\n")
    assert result.exit_code == 0, result.output
    assert not Experiment.objects.filter(pk=exp_id).exists()


@pytest.mark.parametrize("tasks,problem", [
    ("main: [unclosed\n", "is not valid YAML at line"),
    ("main: {command: a}\nmain: {command: b}\n", "line 2, column 1: found duplicate key 'main'"),
    ("main: {command: a, command: b}\n", "found duplicate key 'command'"),
    ("- command: echo\n- command: ls\n", "must be a mapping of role name to task spec"),
    ("", "is empty"),
    ("# only a comment\n", "is empty"),
    ("{}\n", "is empty"),
    ("main: echo hello\n", "role 'main' must be a mapping of task spec fields"),
    ("[a, b]: {command: echo}\n", "a role name must be a plain name, not a YAML list"),
    ("main: {command: echo, image: !!timestamp 2024-01-01}\n",
     "main.image: the tag !!timestamp makes a YAML date, which cannot be sent"),
    (b"main: {command: \xff}\n", "is not UTF-8 text"),
])
def test_a_bad_tasks_file_is_one_line_and_nothing_is_sent(logged_in, files, tasks, problem):
    path = files("tasks.yaml", tasks)
    result = logged_in("exp", "create", "--name", "x", "--cluster", "c", "--type", "profiling",
                       "--role-to-task-spec", path)
    assert result.exit_code == ExitCode.USAGE, result.output
    line = one_line(result.stderr)
    assert line.startswith(f"error: tasks file {path}")
    assert problem in line
    assert logged_in.transport.requests == []
    assert not Experiment.objects.exists()


def test_missing_files_are_one_line(logged_in, files, tmp_path):
    missing = str(tmp_path / "nope.yaml")
    result = logged_in("exp", "create", "--name", "x", "--cluster", "c", "--type", "profiling",
                       "--role-to-task-spec", missing)
    assert result.exit_code == ExitCode.USAGE
    assert one_line(result.stderr) == f"error: tasks file {missing}: no such file"
    result = logged_in("exp", "create", "--name", "x", "--cluster", "c", "--type", "profiling",
                       "--role-to-task-spec", files("t.yaml", TASKS_YAML), "--config", missing)
    assert result.exit_code == ExitCode.USAGE
    assert one_line(result.stderr) == f"error: config file {missing}: no such file"
    assert logged_in.transport.requests == []


def test_a_non_utf8_config_is_one_line_and_nothing_is_sent(logged_in, files):
    result = _create(logged_in, files, config="model: caf\xe9\n".encode("latin-1"))
    assert result.exit_code == ExitCode.USAGE
    line = one_line(result.stderr)
    assert "config file" in line and "is not UTF-8 text (byte 0xe9 at offset 10)" in line
    assert logged_in.transport.requests == []


def test_a_server_side_field_error_names_the_field(logged_in, files):
    result = _create(logged_in, files, tasks="main:\n  command: echo\n  replica: 0\n")
    assert result.exit_code == ExitCode.INVALID
    line = one_line(result.stderr)
    assert line.startswith("error: role_to_task_spec.main.replica: ")
    assert "got 0" in line
    assert not Experiment.objects.exists()


def test_unknown_id_is_one_line_and_not_found(logged_in):
    for args in (["exp", "get", "987654"], ["exp", "abort", "987654"],
                 ["exp", "delete", "--yes", "987654"], ["exp", "wait", "987654"]):
        result = logged_in(*args)
        assert result.exit_code == ExitCode.NOT_FOUND, (args, result.output)
        assert one_line(result.stderr).startswith("error: ")
        assert "Traceback" not in result.output


def test_the_config_is_sent_and_stored_verbatim(logged_in, files):
    config = ("# comment kept\r\nmodel: qwen/qwen3-32b   \r\n\tweird:  [1,2]\n"
              "name: \u6a21\u578b \U0001f985\n\n\n  trailing spaces  ")
    result = _create(logged_in, files, "-o", "json", config=config)
    assert result.exit_code == 0, result.output
    exp_id = json.loads(result.stdout)["id"]
    got = json.loads(logged_in("exp", "get", str(exp_id), "-o", "json").stdout)
    assert got["config"] == config
    assert Experiment.objects.get(pk=exp_id).config == config


def test_without_config_the_config_is_empty(logged_in, files):
    result = _create(logged_in, files, "-o", "json", config=None)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["config"] == ""


def test_list_filters_and_follows_pages(logged_in, files, monkeypatch):
    ids = {}
    for name, exp_type, cluster in (("alpha-1", "profiling", "a"), ("alpha-2", "benchmark", "a"),
                                    ("beta-1", "profiling", "b"), ("beta-2", "profiling", "b"),
                                    ("gamma-1", "benchmark", "b")):
        result = logged_in("exp", "create", "--name", name, "--cluster", cluster, "--type",
                           exp_type, "--role-to-task-spec", files(f"{name}.yaml", TASKS_YAML),
                           "-o", "json")
        assert result.exit_code == 0, result.output
        ids[name] = json.loads(result.stdout)["id"]
    exp_update_status(exp_id=ids["beta-1"], status="Running")
    exp_update_status(exp_id=ids["gamma-1"], status="Failed")

    def names(*args):
        result = logged_in("exp", "list", "-o", "json", *args)
        assert result.exit_code == 0, result.output
        return [e["name"] for e in json.loads(result.stdout)]

    assert names() == ["gamma-1", "beta-2", "beta-1", "alpha-2", "alpha-1"]  # newest first
    assert names("--status", "running", "--status", "Failed") == ["gamma-1", "beta-1"]
    assert names("--type", "benchmark") == ["gamma-1", "alpha-2"]
    assert names("--cluster", "a") == ["alpha-2", "alpha-1"]
    assert names("--search", "beta") == ["beta-2", "beta-1"]
    assert names("--creator", EMAIL, "--type", "profiling", "--cluster", "b") == \
        ["beta-2", "beta-1"]
    assert names("--creator", "nobody@example.com") == []
    empty = logged_in("exp", "list", "--search", "zzz")
    assert empty.stdout == "" and "No experiments match." in empty.stderr

    # Pages of 2: the cursor links are followed, and --limit stops in the middle of a page.
    monkeypatch.setattr(exp_module.read, "PAGE_SIZE", 2)
    logged_in.transport.requests.clear()
    assert names("--limit", "50") == ["gamma-1", "beta-2", "beta-1", "alpha-2", "alpha-1"]
    assert len(logged_in.transport.requests) == 3
    assert all(r.url.host == logged_in.transport.requests[0].url.host
               for r in logged_in.transport.requests)
    logged_in.transport.requests.clear()
    assert names("--limit", "3") == ["gamma-1", "beta-2", "beta-1"]
    assert len(logged_in.transport.requests) == 2

    result = logged_in("exp", "list", "--status", "Bogus")
    assert result.exit_code == ExitCode.USAGE


def test_env_values_are_stored_as_written_and_a_leading_zero_replica_is_refused(logged_in,
                                                                                files):
    tasks = ("main:\n  command: echo\n  replica: 2\n"
             "  envs: {FLAG: on, VERSION: 3.10, PORTS: 22:22, MODE: 0755, LR: .inf}\n")
    result = _create(logged_in, files, "-o", "json", tasks=tasks)
    assert result.exit_code == 0, result.output
    spec = json.loads(result.stdout)["jobs"][0]["task_spec"]
    assert spec["replica"] == 2
    assert spec["envs"] == {"FLAG": "on", "VERSION": "3.10", "PORTS": "22:22", "MODE": "0755",
                            "LR": ".inf"}
    assert Experiment.objects.get().jobs.get().task_spec["envs"]["MODE"] == "0755"

    logged_in.transport.requests.clear()
    path = files("zero.yaml", "main:\n  command: echo\n  replica: 010\n")
    result = logged_in("exp", "create", "--name", "y", "--cluster", "c", "--type", "t",
                       "--role-to-task-spec", path)
    assert result.exit_code == ExitCode.USAGE
    assert one_line(result.stderr) == (
        f"error: tasks file {path}, line 3, column 12: main.replica: 010 has a leading zero, "
        "which YAML 1.1 reads as octal (8) and YAML 1.2 as decimal (10); write the number "
        "without leading zeros, e.g. 10")
    assert logged_in.transport.requests == []


def test_another_users_experiment_is_forbidden_not_a_login_problem(logged_in, files, tmp_path):
    from .conftest import Falcon

    exp_id = json.loads(_create(logged_in, files, "-o", "json").stdout)["id"]
    bob = Falcon(server=logged_in.server, config_dir=tmp_path / "bob-config")
    bob.login("bob@example.com")
    result = bob("exp", "abort", str(exp_id))
    assert result.exit_code == ExitCode.FORBIDDEN == 10, result.output
    assert one_line(result.stderr).startswith("error: ")
    assert "falcon auth login" not in result.stderr
    assert Experiment.objects.get(pk=exp_id).status == "Created"


@pytest.mark.parametrize("exp_id", ["-1", "0", "+5", "1_000", "1.0", "abc", "", " 7",
                                    "\u0663", "9223372036854775808"])
@pytest.mark.parametrize("command", [["get"], ["abort"], ["delete", "--yes"], ["wait"]])
def test_ids_are_positive_integers_checked_before_any_request(logged_in, command, exp_id):
    result = logged_in("exp", *command, "--", exp_id)
    assert result.exit_code == ExitCode.USAGE, result.output
    text = re.sub(r"[\s│]+", " ", result.stderr)  # the error box of rich-click, unwrapped
    assert (f"{exp_id!r} is not an experiment id: ids are whole numbers from 1 to "
            "9223372036854775807 (see `falcon exp list`)") in text
    assert "No API endpoint" not in result.output
    assert logged_in.transport.requests == []
