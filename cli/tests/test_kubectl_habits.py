"""kubectl habits, second round (issue 28 review): what `-o name` prints is taken back, several
ids and `-l` on get/abort/delete, comma selectors, jsonpath on kubectl's shape, `label
--overwrite`, log flags, `--sort-by` errors, get's `-o name`/jsonpath, contexts deleted and
renamed, and completion by prefix; then the last leftovers: `exp describe` and `exp wait` with
several ids, `wait -l`, and `-l` refused on analyses. Each tried on the installed `falcon` run
as a subprocess (`test_ergonomics.run`), logged in once in-process."""
from __future__ import annotations

import json
import sys

import pytest

from cli.exit_codes import ExitCode
from cli.tests.signals import interruptible

from .conftest import TASKS_YAML
from .test_ergonomics import _failed_exp, flat, run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def falcon_run(logged_in):
    """`falcon ARGS` as a subprocess, logged in as alice against the live server."""
    def call(*args: str, **kwargs):
        return run(*args, config_dir=logged_in.config_dir, server=logged_in.server, **kwargs)
    return call


def _label(logged_in, exp_id: int, *changes: str) -> None:
    result = logged_in("exp", "label", str(exp_id), *changes)
    assert result.exit_code == 0, result.output


# --- 1. -o name fed back; several ids; -l on abort/delete ------------------------------------

def test_names_printed_by_list_are_taken_back_by_delete(logged_in, files, falcon_run):
    from experiments.models import Experiment

    data = [_failed_exp(logged_in, files, f"data-{i}") for i in range(2)]
    other = _failed_exp(logged_in, files, "other")
    for exp_id in data:
        _label(logged_in, exp_id, "team=data")
    names = falcon_run("exp", "list", "-o", "name", "-l", "team=data")
    assert sorted(names.stdout.split()) == sorted(f"exp/{i}" for i in data), names.stderr
    done = falcon_run("exp", "get", *names.stdout.split(), "-o", "json")
    assert done.returncode == 0, done.stderr
    assert sorted(exp["id"] for exp in json.loads(done.stdout)) == sorted(data)
    done = falcon_run("exp", "delete", "--yes", *names.stdout.split())
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split("\n")[:-1]) == sorted(f"deleted experiment {i}"
                                                          for i in data)
    assert list(Experiment.objects.values_list("pk", flat=True)) == [other]
    assert falcon_run("analysis", "get", "analysis/an-1").returncode == ExitCode.NOT_FOUND
    done = falcon_run("exp", "get", "exps/1")
    assert done.returncode == ExitCode.USAGE and "'exps/1' is not an experiment id" in done.stderr


def test_several_ids_act_on_each_and_exit_non_zero_if_any_failed(logged_in, files, falcon_run):
    from experiments.models import Experiment

    first, second = (_failed_exp(logged_in, files, name) for name in ("one", "two"))
    missing = second + 1000
    done = falcon_run("exp", "get", str(first), str(missing), f"exp/{second}", "-o", "json")
    assert done.returncode == ExitCode.NOT_FOUND, done.stderr
    assert [exp["id"] for exp in json.loads(done.stdout)] == [first, second]
    assert len(done.stderr.strip().splitlines()) == 1 and str(missing) in done.stderr
    done = falcon_run("exp", "abort", str(missing), str(first))
    assert done.returncode == ExitCode.NOT_FOUND
    done = falcon_run("exp", "delete", "--yes", str(missing), str(first), str(second))
    assert done.returncode == ExitCode.NOT_FOUND, done.stderr
    assert f"deleted experiment {first}\ndeleted experiment {second}\n" == done.stdout
    assert not Experiment.objects.filter(pk__in=[first, second]).exists()
    for args in (["exp", "get"], ["exp", "delete", "--yes"], ["exp", "abort"],
                 ["exp", "delete", "1", "-l", "a=b", "--yes"]):
        done = falcon_run(*args)
        assert done.returncode == ExitCode.USAGE, (args, done.stderr)


def test_abort_and_delete_by_selector_list_what_they_act_on(logged_in, files):
    from experiments.models import Experiment
    from experiments.services import exp_update_status

    keep = _failed_exp(logged_in, files, "keep")
    created = logged_in("exp", "create", "--name", "scratch-0", "--cluster", "c", "--type", "t",
                        "--role-to-task-spec", files("tasks.yaml", TASKS_YAML), "-o", "json")
    doomed = [json.loads(created.stdout)["id"], _failed_exp(logged_in, files, "scratch-1")]
    for exp_id in doomed:
        _label(logged_in, exp_id, "stage=scratch")
    result = logged_in("exp", "abort", "-l", "stage=scratch")
    assert f"experiment {doomed[0]} (scratch-0) is Abort" in result.output
    assert result.exit_code in (0, ExitCode.CONFLICT), result.output
    logged_in.interactive = lambda: True
    result = logged_in("exp", "delete", "-l", "stage=scratch", input="n\n")
    assert result.exit_code == ExitCode.ERROR
    assert all(f"exp/{i}  scratch-" in result.output for i in doomed), result.output
    assert "Delete these 2 experiments?" in result.output
    assert Experiment.objects.count() == 3
    if Experiment.objects.get(pk=doomed[0]).status != "Aborted":
        exp_update_status(exp_id=doomed[0], status="Aborted")
    result = logged_in("exp", "delete", "-l", "stage=scratch", input="y\n")
    assert result.exit_code == 0, result.output
    assert list(Experiment.objects.values_list("pk", flat=True)) == [keep]
    result = logged_in("exp", "delete", "-l", "stage=scratch", "--yes")
    assert result.exit_code == 0 and "No experiments match." in result.output
    assert flat(result.output)


# --- 2. comma selectors are an AND, as kubectl's -l a=1,b ------------------------------------

def test_a_comma_selector_is_every_selector(logged_in, files, falcon_run):
    both, infra = (_failed_exp(logged_in, files, name) for name in ("both", "infra"))
    _label(logged_in, both, "team=infra", "batch=1")
    _label(logged_in, infra, "team=infra")
    done = falcon_run("exp", "list", "-o", "name", "-l", "team=infra,batch=1")
    assert done.returncode == 0 and done.stdout == f"exp/{both}\n", done.stderr
    done = falcon_run("exp", "list", "-o", "name", "-l", "team=infra, batch")
    assert done.stdout == f"exp/{both}\n", done.stderr
    done = falcon_run("exp", "list", "-o", "name", "-l", "team=infra,batch=1", "-l", "nope")
    assert done.returncode == 0 and done.stdout == "", done.stderr
    done = falcon_run("exp", "list", "-l", "team=infra,batch!=1")
    assert done.returncode == ExitCode.USAGE and "!=" in done.stderr
    done = falcon_run("exp", "delete", "-l", "team=infra,batch=1", "--yes")
    assert done.stdout == f"deleted experiment {both}\n", done.stderr


# --- 4. label refuses to change a value without --overwrite ---------------------------------

def test_label_changes_an_existing_value_only_with_overwrite(logged_in, files, falcon_run):
    from experiments.models import Experiment

    exp_id = _failed_exp(logged_in, files, "labelled")
    assert falcon_run("exp", "label", f"exp/{exp_id}", "team=ml", "a=1").returncode == 0
    done = falcon_run("exp", "label", str(exp_id), "team=ml2", "b=2")
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert "'team'" in done.stderr and "--overwrite" in done.stderr, done.stderr
    assert Experiment.objects.get(pk=exp_id).labels == {"a": "1", "team": "ml"}  # nothing set
    assert falcon_run("exp", "label", str(exp_id), "team=ml", "b=2").returncode == 0  # same value
    done = falcon_run("exp", "label", str(exp_id), "team=ml2", "--overwrite", "a-")
    assert done.returncode == 0, done.stderr
    assert Experiment.objects.get(pk=exp_id).labels == {"b": "2", "team": "ml2"}


# --- 3. jsonpath sees kubectl's list shape, and refuses what it cannot do ---------------------

def test_list_jsonpath_reads_items_and_refuses_range(logged_in, files, falcon_run):
    first, second = (_failed_exp(logged_in, files, name) for name in ("a", "b"))
    done = falcon_run("exp", "list", "-o", "jsonpath={.items[*].id}", "--sort-by", ".id")
    assert done.returncode == 0 and done.stdout == f"{first} {second}", done.stderr
    done = falcon_run("exp", "list", "-o", "jsonpath={[*].id}", "--sort-by", ".id")
    assert done.stdout == f"{first} {second}", done.stderr  # the documented older form
    done = falcon_run("exp", "list", "-o", 'jsonpath={$.items[0].name}{"\\n"}', "--sort-by",
                      ".name")
    assert done.stdout == "a\n", done.stderr
    for template in ('{range [*]}{.id}{"\\n"}{end}', '{range .items[*]}{.id}{end}'):
        done = falcon_run("exp", "list", "-o", f"jsonpath={template}")
        assert done.returncode == ExitCode.USAGE, done.stdout
        assert "{range} is not supported" in done.stderr and done.stdout == ""


# --- 6. --sort-by a field no row has is an error ----------------------------------------------

def test_sort_by_a_field_no_row_has_is_a_usage_error(logged_in, files, falcon_run):
    _failed_exp(logged_in, files, "one")
    for args in (["exp", "list"], ["exp", "list", "-o", "name"], ["analysis", "list"]):
        done = falcon_run(*args, "--sort-by", ".nosuch")
        if args[0] == "analysis":  # no analyses: an empty list is never an error
            assert done.returncode == 0, done.stderr
            continue
        assert done.returncode == ExitCode.USAGE and done.stdout == "", done.stderr
        assert "'.nosuch': no row has this field" in done.stderr and ".name" in done.stderr
    assert falcon_run("exp", "list", "--sort-by", ".reason").returncode == 0  # null: a field


# --- 7. get and create take -o name and -o jsonpath ----------------------------------------

def test_get_and_create_print_names_and_templates(logged_in, files, falcon_run):
    exp_id = _failed_exp(logged_in, files, "one")
    done = falcon_run("exp", "get", str(exp_id), "-o", "jsonpath={.status}")
    assert done.returncode == 0 and done.stdout == "Failed", done.stderr
    done = falcon_run("exp", "get", f"exp/{exp_id}", "-o", "name")
    assert done.returncode == 0 and done.stdout == f"exp/{exp_id}\n", done.stderr
    done = falcon_run("exp", "get", str(exp_id), str(exp_id), "-o", "jsonpath={.items[*].name}")
    assert done.stdout == "one one", done.stderr
    done = falcon_run("exp", "get", str(exp_id), "-o", "wide")  # the row of `exp list -o wide`
    assert done.returncode == 0 and done.stdout.splitlines()[0].split()[:2] == ["ID", "NAME"]
    assert done.stdout.splitlines()[1].split()[:2] == [str(exp_id), "one"], done.stdout
    done = falcon_run("exp", "create", "--name", "x", "--cluster", "c", "--type", "t",
                      "--role-to-task-spec", files("tasks.yaml", TASKS_YAML), "-o", "wide")
    assert done.returncode == ExitCode.USAGE, done.stderr  # as kubectl create: no wide
    done = falcon_run("exp", "create", "--name", "made", "--cluster", "c", "--type", "t",
                      "--role-to-task-spec", files("tasks.yaml", TASKS_YAML), "-o", "name")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"exp/{exp_id + 1}\n"
    assert falcon_run("analysis", "get", "an-1", "-o", "name").returncode == ExitCode.NOT_FOUND


# --- 8. contexts are deleted and renamed, the file kept private --------------------------------

def test_contexts_are_renamed_and_deleted_keeping_the_file_private(tmp_path):
    import stat

    from .test_ergonomics import _complete

    config = tmp_path / "config"

    def falcon(*args: str):
        return run(*args, config_dir=config)

    for name in ("prod", "staging", "local"):
        assert falcon("config", "set-context", name, "--server", f"http://{name}").returncode == 0
    assert falcon("config", "use-context", "prod").returncode == 0
    done = falcon("config", "rename-context", "prod", "production")
    assert done.returncode == 0 and done.stdout == "context prod renamed to production\n"
    assert falcon("config", "current-context").stdout == "production\n"
    done = falcon("config", "rename-context", "production", "staging")
    assert done.returncode == ExitCode.CONFLICT and "'staging' exists already" in done.stderr
    done = falcon("config", "rename-context", "nope", "x")
    assert done.returncode == ExitCode.NOT_FOUND and "production" in done.stderr
    assert falcon("config", "rename-context", "local", "bad name").returncode == ExitCode.USAGE
    assert falcon("config", "delete-context", "staging").stdout == "deleted context staging\n"
    done = falcon("config", "delete-context", "production")
    assert done.returncode == 0 and "none is current now" in done.stderr
    assert falcon("config", "current-context").returncode == ExitCode.NOT_FOUND
    rows = json.loads(falcon("config", "get-contexts", "-o", "json").stdout)
    assert rows == [{"name": "local", "server": "http://local", "current": False}]
    assert falcon("config", "delete-context", "production").returncode == ExitCode.NOT_FOUND
    assert stat.S_IMODE((config / "config.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(config.stat().st_mode) == 0o700
    assert sorted(p.name for p in config.iterdir()) == ["config.json"]  # no temporary left
    assert falcon("config", "set-context", "lab", "--server", "http://lab").returncode == 0
    assert _complete("falcon config use-context l", config) == ["lab", "local"]
    assert _complete("falcon config delete-context la", config) == ["lab"]


# --- 5. log flags: --replica with --all-replicas, --tail -1, a role to choose -------------------

def test_log_flags_refuse_contradictions_and_name_the_roles(logged_in, tmp_path, falcon_run):
    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory
    from artifacts.store import replica_log_url
    from experiments.services import exp_update_status
    from experiments.tests.factories import make_exp
    from jobs.services import job_update_status

    from .conftest import EMAIL
    from .test_exp_files import put

    alice = UserFactory(user_id=local_subject(EMAIL), email=EMAIL)
    exp = make_exp(creator=alice, name="two", roles=("main", "worker"), replica=2)
    for role in ("main", "worker"):
        for index in (0, 1):
            put(replica_log_url(exp.artifact_path, role, index),
                "".join(f"{role} {index} {n}\n" for n in range(15)).encode(), tmp_path)
    for job in exp.jobs.all():
        for status in ("Running", "Succeeded"):
            job_update_status(job_id=job.pk, status=status)
    exp_update_status(exp_id=exp.pk, status="Running")
    exp_update_status(exp_id=exp.pk, status="Succeeded")
    exp_id = str(exp.pk)

    done = falcon_run("exp", "logs", exp_id, "--role", "worker", "--replica", "1",
                      "--all-replicas")
    assert done.returncode == ExitCode.USAGE and done.stdout == "", done.stderr
    assert "--replica" in done.stderr and "--all-replicas" in done.stderr
    done = falcon_run("exp", "logs", exp_id)
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert "main, worker" in done.stderr and "--role" in done.stderr
    done = falcon_run("exp", "logs", exp_id, "--role", "worker", "--replica", "1", "--tail", "-1")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 15, done.stderr
    done = falcon_run("exp", "logs", exp_id, "--role", "main", "--tail", "2")
    assert done.stdout.splitlines() == ["main 0 13", "main 0 14"]
    done = falcon_run("exp", "logs", exp_id, "--all-replicas", "--tail", "-1")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 60, done.stderr
    assert falcon_run("exp", "logs", exp_id, "--tail", "-2").returncode == ExitCode.USAGE


# --- 9. completion: ids by prefix beyond the newest 50, roles -----------------------------------

def test_completion_finds_old_ids_by_prefix_and_roles(logged_in):
    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory
    from cli.completion import COMPLETION_LIMIT, EXTRA_DIGITS
    from experiments.tests.factories import make_exp

    from .conftest import EMAIL
    from .test_ergonomics import _complete

    alice = UserFactory(user_id=local_subject(EMAIL), email=EMAIL)
    exps = [make_exp(creator=alice, name=f"e{i}", roles=("main", "worker"))
            for i in range(COMPLETION_LIMIT + 5)]
    ids = [exp.pk for exp in exps]
    newest = set(ids[-COMPLETION_LIMIT:])
    prefix = str(ids[0])  # the oldest: not among the newest 50

    def complete(words: str) -> list[str]:
        return _complete(words, logged_in.config_dir, server=logged_in.server)

    want = sorted((i for i in ids if str(i).startswith(prefix)
                   and (i in newest or len(str(i)) <= len(prefix) + EXTRA_DIGITS)), reverse=True)
    offered = complete(f"falcon exp get {prefix}")
    assert offered == [str(i) for i in want] and prefix in offered
    assert complete(f"falcon exp delete {ids[-1]} {prefix}") == offered  # each id of several
    assert complete(f"falcon exp logs {ids[0]} --role w") == ["worker"]
    assert complete(f"falcon exp logs {ids[0]} --role ") == ["main", "worker"]
    assert complete("falcon exp logs --role ") == []  # no id yet: nothing to ask


# --- 1b. analyses: analysis/ID and several ids on get/cancel/delete -----------------------------

def test_several_analysis_ids_act_on_each(logged_in, falcon_run):
    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory
    from analysis.models import AnalysisRecord
    from analysis.tests.factories import make_analysis, make_finished_exp

    from .conftest import EMAIL

    alice = UserFactory(user_id=local_subject(EMAIL), email=EMAIL)
    first, second = (make_analysis(exp=make_finished_exp(creator=alice)).pk for _ in range(2))
    AnalysisRecord.objects.filter(pk__in=[first, second]).update(status="failed")
    done = falcon_run("analysis", "get", first, f"analysis/{second}", "an-nope", "-o", "name")
    assert done.returncode == ExitCode.NOT_FOUND, done.stderr
    assert done.stdout == f"analysis/{first}\nanalysis/{second}\n"
    assert "no analysis an-nope" in done.stderr
    done = falcon_run("analysis", "delete", first, second)  # no terminal: refused, nothing gone
    assert done.returncode == ExitCode.USAGE and AnalysisRecord.objects.count() == 2
    done = falcon_run("analysis", "delete", "--yes", f"analysis/{first}", "an-nope", second)
    assert done.returncode == ExitCode.NOT_FOUND, done.stderr
    assert done.stdout == f"deleted analysis {first}\ndeleted analysis {second}\n"
    assert not AnalysisRecord.objects.exists()


# --- 10. describe and wait take several ids; -l on wait; analyses have no labels ---------------

def test_describe_several_ids_shows_each_as_get_does(logged_in, files, falcon_run):
    first, gone = (_failed_exp(logged_in, files, name) for name in ("first", "gone"))
    assert falcon_run("exp", "delete", "--yes", str(gone)).returncode == 0
    missing = gone + 1000
    done = falcon_run("exp", "describe", str(first), str(missing), f"exp/{gone}", "-o", "json")
    assert done.returncode == ExitCode.NOT_FOUND, done.stderr
    described = json.loads(done.stdout)
    assert [(d["id"], d.get("deleted", False)) for d in described] == [(first, False),
                                                                      (gone, True)]
    assert [e["to_status"] for e in described[0]["events"]][-1] == "Failed"
    assert [e["to_status"] for e in described[1]["events"]][-1] == "Failed"
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(missing) in errors[0], done.stderr
    assert f"experiment {gone} was deleted" in done.stderr

    done = falcon_run("exp", "describe", f"exp/{first}", str(gone))  # tables, one after the other
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("first") < out.index("\nevents") < out.index(
        f"\nexperiment {gone} (deleted): events"), out
    done = falcon_run("exp", "describe", str(first), str(missing), str(gone), "-o", "name")
    assert done.returncode == ExitCode.NOT_FOUND and done.stdout == f"exp/{first}\nexp/{gone}\n"
    done = falcon_run("exp", "describe", str(first), str(first), "-o", "jsonpath={.items[*].name}")
    assert done.returncode == 0 and done.stdout == "first first", done.stderr
    done = falcon_run("exp", "describe", str(first), "-o", "yaml")  # one id: its object
    assert done.returncode == 0 and done.stdout.startswith("id: "), done.stdout
    assert falcon_run("exp", "describe").returncode == ExitCode.USAGE
    done = falcon_run("exp", "describe", str(missing))
    assert done.returncode == ExitCode.NOT_FOUND and done.stdout == "", done.stderr


def _end(exp_id: int, status: str) -> None:
    """Move an experiment and its jobs to `status`, as the controllers would."""
    from experiments.models import Experiment
    from experiments.services import exp_update_status
    from jobs.services import job_update_status

    for job in Experiment.objects.get(pk=exp_id).jobs.all():
        job_update_status(job_id=job.pk, status=status)
    exp_update_status(exp_id=exp_id, status=status)


def _created(logged_in, files, name: str) -> int:
    result = logged_in("exp", "create", "--name", name, "--cluster", "c", "--type", "t",
                       "--role-to-task-spec", files("tasks.yaml", TASKS_YAML), "-o", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["id"]


def _popen_falcon(logged_in, *args: str):
    """Start the installed `falcon ARGS` against the live server, its output in pipes."""
    import os
    import subprocess

    from .test_ergonomics import ROOT, SCRIPT

    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "cli"]
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "FALCON_CONFIG_DIR":
               str(logged_in.config_dir), "FALCON_SERVER": logged_in.server}
    return subprocess.Popen(interruptible(cmd + list(args)), cwd=ROOT, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _first_line(proc) -> str:
    """The process's first stdout line, waited for with a deadline."""
    import select

    assert select.select([proc.stdout], [], [], 60)[0], "no progress line within 60 s"
    return proc.stdout.readline()


def test_wait_several_follows_each_until_all_ended(logged_in, files):
    first, second = (_created(logged_in, files, name) for name in ("w-1", "w-2"))
    proc = _popen_falcon(logged_in, "exp", "wait", str(first), f"exp/{second}",
                         "--interval", "0.1")
    try:
        # Following the first: the second fails meanwhile, then the first succeeds.
        assert _first_line(proc).startswith(f"[0s] experiment {first} Created")
        _end(second, "Failed")
        _end(first, "Succeeded")
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == ExitCode.EXP_FAILED, err
    assert f"experiment {first} Succeeded\n" in out
    assert f"experiment {second} Failed (jobs main:Failed" in out  # read when its turn came
    assert err == f"error: experiment {second} ended Failed\n"


def test_ctrl_c_stops_waiting_for_all_of_them(logged_in, files):
    import signal

    first, second = (_created(logged_in, files, name) for name in ("c-1", "c-2"))
    proc = _popen_falcon(logged_in, "exp", "wait", str(first), str(second), "--interval", "0.1")
    try:
        assert _first_line(proc).startswith(f"[0s] experiment {first} Created")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert err.startswith(f"error: stopped waiting; experiment {first} is still Created")
    assert len(err.splitlines()) == 1 and f"experiment {second}" not in out + err


def test_wait_several_exit_code_is_the_first_failures(logged_in, files, falcon_run):
    import yaml

    ok, failed = (_created(logged_in, files, name) for name in ("ok", "bad"))
    _end(ok, "Succeeded")
    _end(failed, "Failed")
    missing = failed + 1000
    done = falcon_run("exp", "wait", str(ok), str(missing), str(failed), "-o", "json")
    assert done.returncode == ExitCode.NOT_FOUND, done.stderr
    assert [(e["id"], e["status"]) for e in json.loads(done.stdout)] == [
        (ok, "Succeeded"), (failed, "Failed")]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and str(missing) in errors[0], done.stderr
    assert errors[1] == f"error: experiment {failed} ended Failed"
    done = falcon_run("exp", "wait", str(ok), str(failed), "-o", "yaml")
    assert done.returncode == ExitCode.EXP_FAILED, done.stderr
    assert [e["status"] for e in yaml.safe_load(done.stdout)] == ["Succeeded", "Failed"]
    done = falcon_run("exp", "wait", f"exp/{ok}", "-o", "json")  # one id: its object
    assert done.returncode == 0 and json.loads(done.stdout)["id"] == ok, done.stderr


def test_wait_timeout_covers_the_whole_wait(logged_in, files, falcon_run):
    first, second = (_created(logged_in, files, name) for name in ("slow-1", "slow-2"))
    done = falcon_run("exp", "wait", str(first), str(second), "--timeout", "0")
    assert done.returncode == ExitCode.TIMEOUT, done.stderr
    assert done.stderr.splitlines() == [
        f"error: gave up waiting for experiment {first} after 0s; it is still Created",
        f"error: gave up waiting for experiment {second} after 0s; it is still Created"]
    # One deadline for both: the second is read once, after the first's timeout ran out (its
    # time counts from the start), not given a second of its own.
    done = falcon_run("exp", "wait", str(first), str(second), "--timeout", "1",
                      "--interval", "0.2")
    assert done.returncode == ExitCode.TIMEOUT, done.stderr
    lines = [line for line in done.stdout.splitlines() if f"experiment {second}" in line]
    assert len(lines) == 1 and not lines[0].startswith("[0s]"), done.stdout
    assert done.stderr.splitlines()[1].startswith(
        f"error: gave up waiting for experiment {second} after ")


def test_wait_by_selector_waits_for_every_match(logged_in, files, falcon_run):
    matched = [_created(logged_in, files, f"batch-{i}") for i in range(2)]
    other = _created(logged_in, files, "other")
    for exp_id in matched:
        _label(logged_in, exp_id, "batch=7")
        _end(exp_id, "Succeeded")
    done = falcon_run("exp", "wait", "-l", "batch=7", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert sorted(e["id"] for e in json.loads(done.stdout)) == sorted(matched)
    _end(other, "Failed")
    _label(logged_in, other, "batch=7")
    done = falcon_run("exp", "wait", "-l", "batch=7")
    assert done.returncode == ExitCode.EXP_FAILED, done.stderr
    assert done.stderr == f"error: experiment {other} ended Failed\n"
    done = falcon_run("exp", "wait", "-l", "batch=8")
    assert done.returncode == ExitCode.NOT_FOUND, done.stderr
    assert "no experiments match -l batch=8" in done.stderr
    for args in ([], [str(other), "-l", "batch=7"]):
        done = falcon_run("exp", "wait", *args)
        assert done.returncode == ExitCode.USAGE, (args, done.stderr)


def test_label_on_analyses_is_refused_with_the_way_through_experiments(logged_in, files,
                                                                        falcon_run):
    import os
    import subprocess

    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory
    from analysis.models import AnalysisRecord
    from analysis.tests.factories import make_analysis, make_finished_exp

    from .conftest import EMAIL
    from .test_ergonomics import ROOT, SCRIPT

    for args in (["list"], ["cancel", "an-1"], ["delete", "an-1", "--yes"]):
        done = falcon_run("analysis", *args, "-l", "team=x")
        assert done.returncode == ExitCode.USAGE and done.stdout == "", done.stderr
        assert done.stderr.startswith("error: analyses have no labels"), done.stderr
        assert "falcon exp list -l team=x -o name | xargs -n1 falcon analysis list" \
            in done.stderr
        assert f"falcon analysis {args[0]}" in done.stderr
    assert "-l/--label is refused" in " ".join(
        falcon_run("analysis", "list", "--help").stdout.split())

    # The pipeline the message and `analysis list --help` print works as written.
    alice = UserFactory(user_id=local_subject(EMAIL), email=EMAIL)
    exps = [make_finished_exp(creator=alice, name=f"e{i}") for i in range(3)]
    analyses = [make_analysis(exp=exp).pk for exp in exps]
    AnalysisRecord.objects.update(status="failed")
    for exp in exps[:2]:
        _label(logged_in, exp.pk, "team=x")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FALCON_")}
    environ.update({"PATH": f"{SCRIPT.parent}{os.pathsep}{environ.get('PATH', '')}",
                    "PYTHONPATH": str(ROOT), "FALCON_CONFIG_DIR": str(logged_in.config_dir),
                    "FALCON_SERVER": logged_in.server})

    def pipeline(text: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", "-c", text], cwd=ROOT, env=environ, capture_output=True,
                              text=True, timeout=120)

    assert SCRIPT.exists()  # the installed console script, as the pipeline names it
    done = pipeline("falcon exp list -l team=x -o name | xargs -n1 falcon analysis list --exp")
    assert done.returncode == 0, done.stderr
    assert analyses[0] in done.stdout and analyses[1] in done.stdout
    assert analyses[2] not in done.stdout
    done = pipeline("falcon exp list -l team=x -o name | xargs -n1 falcon analysis list -o name "
                    "--exp | xargs falcon analysis delete --yes")
    assert done.returncode == 0, done.stderr
    assert list(AnalysisRecord.objects.values_list("pk", flat=True)) == [analyses[2]]
