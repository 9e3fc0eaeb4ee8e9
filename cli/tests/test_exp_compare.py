"""`falcon exp diff`, `label`, `clone`, `list --label/--watch` and the safe retry of create,
over the wire against the real Django app (live_server)."""
from __future__ import annotations

import json
import re

import pytest
import urllib3

from cli.exp import diff as exp_diff
from cli.exit_codes import ExitCode
from experiments import diff as server_diff
from experiments.models import Experiment
from experiments.services import exp_update_status

from .conftest import CONFIG_YAML, RecordingTransport
from .test_exp import _create

pytestmark = pytest.mark.django_db(transaction=True)

COMMENTED = """\
# training run
model: qwen/qwen3-32b   # the model
optimizer:
  lr: 0.001  # peak
  betas: [0.9, 0.99]
random_input_len: 16384 
layers:
  - size: 8
  - size: 16
"""


def _json(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_cli_and_the_server_agree_on_the_most_experiments():
    assert exp_diff.MAX_EXPERIMENTS == server_diff.MAX_EXPERIMENTS


def test_create_with_labels_then_label_list_and_get(logged_in, files):
    exp = _json(_create(logged_in, files, "--label", "baseline=true", "--label",
                        "example.com/team=infra", "-o", "json"))
    other = _json(_create(logged_in, files, "--label", "team=x", "-o", "json", name="other"))
    assert exp["labels"] == {"baseline": "true", "example.com/team": "infra"}

    listed = _json(logged_in("exp", "list", "--label", "baseline=true", "-o", "json"))
    assert [e["id"] for e in listed] == [exp["id"]]
    listed = _json(logged_in("exp", "list", "--label", "team", "-o", "json"))
    assert [e["id"] for e in listed] == [other["id"]]

    result = logged_in("exp", "label", str(exp["id"]), "baseline-", "stage=candidate")
    assert result.exit_code == 0, result.output
    assert "example.com/team=infra,stage=candidate" in result.stdout
    got = _json(logged_in("exp", "get", str(exp["id"]), "-o", "json"))
    assert got["labels"] == {"example.com/team": "infra", "stage": "candidate"}
    assert "stage=candidate" in logged_in("exp", "get", str(exp["id"])).stdout
    assert "stage=candidate" in logged_in("exp", "list", "-o", "wide").stdout


@pytest.mark.parametrize("args,words", [
    (("--label", "Bad Key=1"), "'Bad Key'"), (("--label", "novalue"), "key=value"),
    (("--label", "k=" + "v" * 64), "at most 63")])
def test_a_bad_label_is_refused_before_sending(logged_in, files, args, words):
    result = _create(logged_in, files, *args)
    assert result.exit_code == ExitCode.USAGE and words in result.stderr
    assert not logged_in.transport.requests


def test_label_arguments_are_checked(logged_in, files):
    exp = _json(_create(logged_in, files, "-o", "json"))
    result = logged_in("exp", "label", str(exp["id"]), "justakey")
    assert result.exit_code == ExitCode.USAGE and "key=value" in result.stderr


def test_diff_three_experiments_by_key_path(logged_in, files):
    a = _json(_create(logged_in, files, "-o", "json", name="a",
                      config="model: m\nlr: 0.1\nsteps: 10\n"))
    b = _json(_create(logged_in, files, "-o", "json", name="b",
                      config="steps: 10\nwarmup: 5\nmodel: m\nlr: 0.2\n"))
    c = _json(_create(logged_in, files, "-o", "json", name="c", config="not: [yaml\n"))
    result = logged_in("exp", "diff", str(a["id"]), str(b["id"]), "-o", "json")
    assert result.exit_code == 1, result.output  # they differ, as `diff` says
    body = json.loads(result.stdout)
    paths = {row["path"]: row["values"] for row in body["differences"]}
    assert paths["config.lr"] == [0.1, 0.2] and paths["config.warmup"] == [None, 5]
    assert "config.steps" not in paths and "config.model" not in paths
    result = logged_in("exp", "diff", str(a["id"]), str(b["id"]), str(c["id"]))
    assert result.exit_code == 1, result.output
    assert "config is not YAML" in result.stdout and "+not: [yaml" in result.stdout
    result = logged_in("exp", "diff", str(a["id"]), str(b["id"]))
    assert "config.warmup" in result.stdout and "<absent>" in result.stdout
    result = logged_in("exp", "diff", str(a["id"]), str(b["id"]), "--all")
    assert "config.model" in result.stdout
    result = logged_in("exp", "diff", str(a["id"]))
    assert result.exit_code == ExitCode.USAGE
    result = logged_in("exp", "diff", str(a["id"]), str(b["id"]), str(a["id"]))
    assert result.exit_code == ExitCode.USAGE
    assert f"experiment {a['id']} is given more than once" in result.stderr


def test_diff_reads_configs_as_yaml_1_2_and_exits_as_diff_does(logged_in, files):
    """`010`/`8`, `on`/`true`, `0755`/`493` differ by YAML 1.2 (the tasks file's reader);
    `3.10`/`3.1` are equal floats written differently, shown with their text; a NaN equals
    a NaN. Exit 1 when they differ, 0 when not, 3 for an unknown id."""
    a = _json(_create(logged_in, files, "-o", "json", name="a", config=(
        "workers: 010\nflag: on\nversion: 3.10\nmode: 0755\nloss_floor: .nan\n")))
    b = _json(_create(logged_in, files, "-o", "json", name="b", config=(
        "workers: 8\nflag: true\nversion: 3.1\nmode: 493\nloss_floor: .nan\n")))
    result = logged_in("exp", "diff", str(a["id"]), str(b["id"]), "-o", "json")
    assert result.exit_code == 1, result.output
    rows = {row["path"]: row for row in json.loads(result.stdout)["differences"]
            if row["path"].startswith("config")}
    assert {p: r["values"] for p, r in rows.items()} == {
        "config.workers": [10, 8], "config.flag": ["on", True], "config.version": [3.1, 3.1],
        "config.mode": [755, 493]}
    assert rows["config.version"]["written"] == ["3.10", "3.1"]
    assert rows["config.version"]["equal"] is False
    table = logged_in("exp", "diff", str(a["id"]), str(b["id"]))
    assert table.exit_code == 1 and "3.1 (written 3.10)" in table.stdout, table.output
    assert "loss_floor" not in table.stdout

    c = _json(_create(logged_in, files, "-o", "json", name="a", config=(
        "workers: 010\nflag: on\nversion: 3.10\nmode: 0755\nloss_floor: .nan\n")))
    same = logged_in("exp", "diff", str(a["id"]), str(c["id"]))
    assert same.exit_code == 0 and "No differences." in same.stdout, same.output
    missing = logged_in("exp", "diff", str(a["id"]), "999999")
    assert missing.exit_code == ExitCode.NOT_FOUND, missing.output


def test_diff_failures_never_exit_1(logged_in, files, monkeypatch):
    from cli import output

    a = _json(_create(logged_in, files, "-o", "json", name="a"))
    b = _json(_create(logged_in, files, "-o", "json", name="b"))

    def broken(console, diff):
        raise KeyError("differences")

    monkeypatch.setattr(output, "exp_diff_table", broken)
    result = logged_in("exp", "diff", str(a["id"]), str(b["id"]))
    assert result.exit_code == ExitCode.DIFF_FAILED and "unexpected KeyError" in result.stderr


def test_clone_with_set_keeps_every_other_byte(logged_in, files):
    src = _json(_create(logged_in, files, "--label", "baseline=true", "-o", "json",
                        config=COMMENTED))
    result = logged_in("exp", "clone", str(src["id"]), "--name", "clone-1",
                       "--set", "optimizer.lr=0.01", "--set", "layers.1.size=32",
                       "--set", "optimizer.warmup=true", "--label", "stage=b", "-o", "json")
    clone = _json(result)
    assert clone["name"] == "clone-1" and clone["cloned_from"] == src["id"]
    assert clone["labels"] == {"baseline": "true", "stage": "b"}
    assert clone["cluster_name"] == src["cluster_name"]
    assert clone["role_to_task_spec"] == src["role_to_task_spec"]
    assert clone["config"] == COMMENTED.replace("lr: 0.001  # peak", "lr: 0.01  # peak").replace(
        "  - size: 16", "  - size: 32").replace(
        "  betas: [0.9, 0.99]\n", "  betas: [0.9, 0.99]\n  warmup: true\n")
    shown = logged_in("exp", "get", str(clone["id"])).stdout
    assert re.search(rf"cloned from +{src['id']}\b", shown), shown


def test_clone_set_through_an_alias_is_refused_and_beside_it_changes_one_path(logged_in, files):
    import yaml

    aliased = ("defaults: &d\n  opt: {lr: 0.1}\nbaseline: *d\ncandidate: *d\n"
               "other:\n  lr: 0.1\n")
    src = _json(_create(logged_in, files, "-o", "json", config=aliased))
    before = Experiment.objects.count()
    result = logged_in("exp", "clone", str(src["id"]), "--set", "candidate.opt.lr=0.5")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "candidate is an alias (*d) of the anchor &d written at defaults" in result.stderr
    assert Experiment.objects.count() == before
    clone = _json(logged_in("exp", "clone", str(src["id"]), "--set", "other.lr=0.5",
                            "-o", "json"))
    assert yaml.safe_load(clone["config"]) == {**yaml.safe_load(aliased), "other": {"lr": 0.5}}


def test_clone_with_a_new_config_and_tasks(logged_in, files):
    src = _json(_create(logged_in, files, "-o", "json"))
    tasks = "main:\n  command: python other.py\n  replica: 1\n"
    clone = _json(logged_in("exp", "clone", str(src["id"]), "--config",
                            files("new.yaml", "a: 1\n"), "--role-to-task-spec",
                            files("t2.yaml", tasks), "--set", "a=2", "-o", "json"))
    assert clone["config"] == "a: 2\n" and clone["name"] == src["name"]
    assert clone["role_to_task_spec"]["main"]["command"] == "python other.py"


@pytest.mark.parametrize("assignment,words", [
    ("nothere.x=1", "nothere is not in the config"),
    ("model.x=1", "single value"),
    ("noequals", "path=value")])
def test_clone_set_errors_name_the_path(logged_in, files, assignment, words):
    src = _json(_create(logged_in, files, "-o", "json"))
    before = Experiment.objects.count()
    result = logged_in("exp", "clone", str(src["id"]), "--set", assignment)
    assert result.exit_code == ExitCode.USAGE and words in result.stderr, result.output
    assert Experiment.objects.count() == before


def test_clone_set_on_a_given_config_that_is_not_yaml_says_to_edit_the_file(logged_in, files):
    src = _json(_create(logged_in, files, "-o", "json"))
    before = Experiment.objects.count()
    result = logged_in("exp", "clone", str(src["id"]), "--config",
                       files("bad.cfg", "not: [yaml\n"), "--set", "a=1")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "(the --config file)" in result.stderr and "drop --set" in result.stderr
    assert "give the whole new config" not in result.stderr
    assert Experiment.objects.count() == before


class DroppingTransport(RecordingTransport):
    """Sends each request to the server, then loses the answer of the first `drops` POSTs:
    the server made the experiment, the client saw a dropped connection."""

    def __init__(self, drops: int):
        super().__init__()
        self.drops = drops

    def urlopen(self, method, url, redirect=True, **kw):
        response = super().urlopen(method, url, redirect=redirect, **kw)
        if method == "POST" and self.requests[-1].url.path == "/api/v1/exps" and self.drops:
            self.drops -= 1
            raise urllib3.exceptions.ProtocolError(
                "Connection aborted.", ConnectionResetError(104, "connection reset by peer"))
        return response


def test_create_retries_a_dropped_answer_without_a_second_experiment(logged_in, files):
    logged_in.transport = DroppingTransport(drops=2)
    slept = []
    logged_in.sleep = slept.append
    exp = _json(_create(logged_in, files, "-o", "json"))
    posts = [r for r in logged_in.transport.requests if r.method == "POST"]
    keys = {r.headers["idempotency-key"] for r in posts}
    assert len(posts) == 3 and len(keys) == 1 and len(next(iter(keys))) == 36
    assert Experiment.objects.count() == 1 and Experiment.objects.get().pk == exp["id"]
    assert len(slept) == 2
    # A new invocation is a new key: a second experiment, as asked.
    logged_in.transport = RecordingTransport()
    _json(_create(logged_in, files, "-o", "json"))
    assert Experiment.objects.count() == 2


def test_create_gives_up_after_its_attempts(logged_in, files):
    logged_in.transport = DroppingTransport(drops=10)
    logged_in.sleep = lambda seconds: None
    result = _create(logged_in, files)
    assert result.exit_code == ExitCode.UNAVAILABLE
    assert len([r for r in logged_in.transport.requests if r.method == "POST"]) == 4
    assert Experiment.objects.count() == 1  # every try carried the same key


def test_list_shows_age_duration_and_the_reason_of_a_failure(logged_in, files):
    exp = _json(_create(logged_in, files, "-o", "json"))
    exp_update_status(exp_id=exp["id"], status="Running")
    exp_update_status(exp_id=exp["id"], status="Failed", reason="JobFailed")
    result = logged_in("exp", "list")
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0]
    assert all(word in header for word in ("AGE", "DURATION", "JOBS"))
    assert "LABELS" not in header  # at any width: -o wide adds it
    assert "Failed" in result.stdout and "(JobFailed)" in result.stdout


def test_list_watch_prints_changed_rows_and_ctrl_c_exits_0(logged_in, files):
    exp = _json(_create(logged_in, files, "-o", "json"))
    steps = [lambda: None,  # no change: no new table
             lambda: exp_update_status(exp_id=exp["id"], status="Running"),
             lambda: exp_update_status(exp_id=exp["id"], status="Succeeded")]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        if not steps:
            raise KeyboardInterrupt
        steps.pop(0)()

    logged_in.sleep = sleep
    result = logged_in("exp", "list", "--watch", "--interval", "0.5")
    assert result.exit_code == 0, result.output
    out = result.stdout
    # One table, then one line per change (kubectl get -w): Created, Running, Succeeded.
    lines = out.splitlines()
    assert out.count("DURATION") == 1 and len(lines) == 4, out
    assert ["Created" in lines[1], "Running" in lines[2], "Succeeded" in lines[3]] == [True] * 3, out
    assert slept == [0.5] * 4
    result = logged_in("exp", "list", "--watch", "-o", "json")
    assert result.exit_code == ExitCode.USAGE
