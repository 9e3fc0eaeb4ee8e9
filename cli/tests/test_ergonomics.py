"""kubectl users' conventions (issue 28, items 8-14), each tried on the installed `falcon` run
as a subprocess: bad local input is exit 2, `--server` and contexts, shell completion,
`Examples:` in every help, `exp abort --wait`, deletes that ask, and lazily loaded groups."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import rich_click as click
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.errors import CLIError
from cli.exit_codes import ExitCode
from cli.main import LAZY_COMMANDS, falcon, load_command
from cli.tasks_yaml import parse_tasks
from cli.token_cache import CredentialStore, normalize_server, token_expiry
from core.testing import wait_until

from .conftest import EMAIL, TASKS_YAML

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("falcon")
CLOSED = "http://127.0.0.1:9"  # nothing listens on the discard port


def run(*args: str, config_dir: Path, env: dict | None = None, input: str | None = None,
        server: str | None = None) -> subprocess.CompletedProcess:
    """Run the installed `falcon ARGS` (else `python -m cli`) in a fresh process."""
    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "cli"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FALCON_")}
    environ.update({"PYTHONPATH": str(ROOT), "FALCON_CONFIG_DIR": str(config_dir),
                    "COLUMNS": "200"})
    if server is not None:
        environ["FALCON_SERVER"] = server
    environ.update(env or {})
    return subprocess.run(cmd + list(args), cwd=ROOT, env=environ, input=input,
                          capture_output=True, text=True, timeout=120)


def flat(text: str) -> str:
    """The text with rich's box characters and line breaks folded to single spaces."""
    return " ".join(text.replace("│", " ").split())


# --- 8. bad local input is a usage error (exit 2), never "unexpected ...Error" ---------------

def _credentials(config_dir: Path, content: bytes) -> None:
    config_dir.mkdir(mode=0o700, exist_ok=True)
    (config_dir / "credentials.json").write_bytes(content)


@pytest.mark.parametrize("case", ["huge-replica", "unclosed-ipv6", "non-utf8-credentials",
                                  "truncated-credentials", "bad-contexts", "huge-id",
                                  "huge-columns-and-id"])
def test_bad_local_input_is_a_usage_error(case, tmp_path):
    config = tmp_path / "config"
    args, env = ["exp", "list"], {}
    server = CLOSED
    if case == "huge-replica":
        tasks = tmp_path / "tasks.yaml"
        tasks.write_text(f"main:\n  command: echo\n  replica: {'9' * 5000}\n")
        args = ["exp", "create", "--name", "n", "--cluster", "c", "--type", "t",
                "--role-to-task-spec", str(tasks)]
        want = "main.replica: the number of 5000 characters is too long"
    elif case == "unclosed-ipv6":
        server, want = "http://[::1", "server URL 'http://[::1' is not valid"
    elif case == "non-utf8-credentials":
        _credentials(config, b'{"version": 1, "servers": {"\xff\xfe": {}}}')
        want = "is not a Falcon credentials file"
    elif case == "truncated-credentials":
        _credentials(config, b'{"version": 1, "serv')
        want = "is not a Falcon credentials file"
    elif case == "bad-contexts":
        config.mkdir()
        (config / "config.json").write_bytes(b'{"contexts": [')
        server, want = None, "is not a Falcon contexts file"
    elif case == "huge-id":
        args, want = ["exp", "get", "9" * 5000], "is not an experiment id"
    else:
        args, env = ["exp", "get", "1" + "0" * 5000], {"COLUMNS": "9" * 5000}
        want = "is not an experiment id"
    done = run(*args, config_dir=config, env=env, server=server)
    assert done.returncode == ExitCode.USAGE == 2, done.stderr
    assert want in flat(done.stderr)
    assert "unexpected" not in done.stderr and "Traceback" not in done.stderr


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_server_url_is_normalized_or_a_usage_error(url):
    try:
        normalize_server(url)
    except CLIError as exc:
        assert exc.code is ExitCode.USAGE


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("main:cmdreplica 0123456789-.[]{}'\"\n#&*!"),
               max_size=80)
       | st.builds(lambda sign, n: f"main:\n  replica: {sign}{'9' * n}\n",
                   st.sampled_from(["", "-", "+"]), st.integers(1, 6000)))
def test_any_tasks_text_parses_or_is_a_usage_error(text):
    try:
        parse_tasks(text, "tasks.yaml")
    except CLIError as exc:
        assert exc.code is ExitCode.USAGE


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120) | st.text(max_size=120).map(str.encode))
def test_any_credentials_file_reads_or_is_a_usage_error(tmp_path_factory, content):
    folder = tmp_path_factory.mktemp("creds")
    (folder / "credentials.json").write_bytes(content)
    try:
        CredentialStore(folder).get("http://127.0.0.1:8000")
    except CLIError as exc:
        assert exc.code in (ExitCode.USAGE, ExitCode.AUTH)  # AUTH: a malformed session entry


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_cached_token_has_an_expiry_or_is_an_auth_error(token):
    try:
        expiry = token_expiry(token)
    except CLIError as exc:
        assert exc.code is ExitCode.AUTH
    else:
        assert expiry is None or isinstance(expiry, int)


# --- 9. the global --server and named contexts -----------------------------------------------

def test_server_precedence_flag_env_context_default(tmp_path):
    config = tmp_path / "config"

    def server_of(*args, env_server=None):
        done = run(*args, "exp", "list", config_dir=config, server=env_server)
        assert done.returncode == ExitCode.AUTH, done.stderr  # nothing sent: not logged in
        return done.stderr.split("not logged in to ")[1].split(";")[0]

    assert server_of() == "http://127.0.0.1:8000"
    assert run("config", "set-context", "a", "--server", "http://127.0.0.1:7001",
               config_dir=config).returncode == 0
    assert server_of() == "http://127.0.0.1:8000"  # set-context does not switch
    done = run("config", "use-context", "a", config_dir=config)
    assert done.returncode == 0 and "switched to context a" in done.stdout
    assert server_of() == "http://127.0.0.1:7001"
    assert server_of(env_server="http://127.0.0.1:7002") == "http://127.0.0.1:7002"
    assert server_of("--server", "http://127.0.0.1:7003",
                     env_server="http://127.0.0.1:7002") == "http://127.0.0.1:7003"
    done = run("--server", "http://127.0.0.1:7003", "exp", "list", "--server",
               "http://127.0.0.1:7004", config_dir=config)
    assert "not logged in to http://127.0.0.1:7004" in done.stderr  # the command's own wins
    # The files keep the credentials file's modes.
    assert stat.S_IMODE(config.stat().st_mode) == 0o700
    assert stat.S_IMODE((config / "config.json").stat().st_mode) == 0o600


def test_contexts_list_show_and_refuse_unknown_names(tmp_path):
    config = tmp_path / "config"
    done = run("config", "current-context", config_dir=config)
    assert done.returncode == ExitCode.NOT_FOUND and "no current context" in done.stderr
    for name, port in (("prod", 7001), ("dev", 7002)):
        assert run("config", "set-context", name, "--server", f"http://127.0.0.1:{port}/",
                   config_dir=config).returncode == 0
    run("config", "use-context", "dev", config_dir=config)
    assert run("config", "current-context", config_dir=config).stdout == "dev\n"
    rows = json.loads(run("config", "get-contexts", "-o", "json", config_dir=config).stdout)
    assert rows == [{"name": "dev", "server": "http://127.0.0.1:7002", "current": True},
                    {"name": "prod", "server": "http://127.0.0.1:7001", "current": False}]
    table = run("config", "get-contexts", config_dir=config).stdout.splitlines()
    assert table[0].split() == ["CURRENT", "NAME", "SERVER"]
    assert table[1].split() == ["*", "dev", "http://127.0.0.1:7002"]
    done = run("config", "use-context", "stage", config_dir=config)
    assert done.returncode == ExitCode.NOT_FOUND
    assert "no context named 'stage' (defined: dev, prod)" in done.stderr
    assert run("config", "current-context", config_dir=config).stdout == "dev\n"
    done = run("config", "set-context", "bad name", "--server", "http://x", config_dir=config)
    assert done.returncode == ExitCode.USAGE
    done = run("config", "set-context", "x", "--server", "ftp://x", config_dir=config)
    assert done.returncode == ExitCode.USAGE and "is not valid" in done.stderr


@pytest.mark.django_db(transaction=True)
def test_a_context_reaches_the_live_server_and_keeps_its_token(live_server, tmp_path):
    config = tmp_path / "config"
    assert run("config", "set-context", "live", "--server", live_server.url,
               config_dir=config).returncode == 0
    assert run("config", "use-context", "live", config_dir=config).returncode == 0
    done = run("auth", "login", "--email", EMAIL, config_dir=config)
    assert done.returncode == 0, done.stderr
    done = run("exp", "list", "-o", "json", config_dir=config)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    # Another server named by the flag gets no token from the context's session.
    done = run("--server", CLOSED, "exp", "list", config_dir=config)
    assert done.returncode == ExitCode.AUTH and f"not logged in to {CLOSED}" in done.stderr


# --- 10. shell completion --------------------------------------------------------------------

def _complete(words: str, config: Path, server: str | None = None) -> list[str]:
    done = run(config_dir=config, server=server,
               env={"_FALCON_COMPLETE": "bash_complete", "COMP_WORDS": words,
                    "COMP_CWORD": str(len(words.split(" ")) - 1)})
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines() if line]


@pytest.mark.parametrize("shell,marker", [("bash", "complete -o nosort -F"),
                                          ("zsh", "#compdef falcon"),
                                          ("fish", "complete --no-files --command falcon")])
def test_completion_prints_the_shell_script(shell, marker, tmp_path):
    done = run("completion", shell, config_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    assert marker in done.stdout and "_FALCON_COMPLETE" in done.stdout


def test_completion_of_commands_options_and_statuses_without_a_server(tmp_path):
    assert _complete("falcon e", tmp_path) == ["exp"]
    assert "use-context" in _complete("falcon config ", tmp_path)
    assert "--all" not in _complete("falcon exp list --", tmp_path)
    assert {"--status", "--label", "--watch"} <= set(_complete("falcon exp list --", tmp_path))
    statuses = {s.lower() for s in _complete("falcon exp list --status ", tmp_path)}
    assert {"running", "succeeded", "aborted"} <= statuses
    # ids: no server to ask, so nothing, silently
    assert _complete("falcon exp get ", tmp_path, server=CLOSED) == []


@pytest.mark.django_db(transaction=True)
def test_completion_of_ids_asks_the_server(logged_in, files):
    from experiments.models import Experiment

    tasks = files("tasks.yaml", TASKS_YAML)
    for name in ("alpha", "beta"):
        result = logged_in("exp", "create", "--name", name, "--cluster", "c", "--type", "t",
                           "--role-to-task-spec", tasks)
        assert result.exit_code == 0, result.output
    ids = sorted(str(pk) for pk in Experiment.objects.values_list("pk", flat=True))
    offered = _complete("falcon exp get ", logged_in.config_dir, server=logged_in.server)
    assert sorted(offered) == ids
    assert _complete(f"falcon exp abort {ids[0]}", logged_in.config_dir,
                     server=logged_in.server) == [ids[0]] + [i for i in ids[1:]
                                                            if i.startswith(ids[0])]
    assert _complete("falcon analysis get ", logged_in.config_dir,
                     server=logged_in.server) == []


# --- 11. Examples: in every command's --help -------------------------------------------------

def _walk(command: click.Command, path: tuple[str, ...]):
    yield path, command
    if isinstance(command, click.Group):
        for name in command.list_commands(click.Context(command)):
            sub = command.get_command(click.Context(command), name)
            yield from _walk(sub, (*path, name))


def _all_commands():
    yield (), falcon
    for name in LAZY_COMMANDS:
        yield from _walk(load_command(name), (name,))


def test_every_command_has_examples():
    missing = [" ".join(path) for path, command in _all_commands()
               if "Examples:" not in (command.help or "")
               or "falcon " not in (command.help or "").split("Examples:")[1]]
    assert missing == []


@pytest.mark.parametrize("path", [("exp", "list"), ("config", "use-context"),
                                  ("completion",), ("analysis", "delete")])
def test_examples_show_in_the_installed_help(path, tmp_path):
    done = run(*path, "--help", config_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout.split("Examples:")[1]
    assert f"falcon {' '.join(path)}" in text


# --- 13. exp abort --wait; deletes ask unless --yes ------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_abort_wait_follows_the_experiment_until_aborted(logged_in, files):
    from experiments.models import Experiment
    from experiments.services import exp_update_status

    result = logged_in("exp", "create", "--name", "to-abort", "--cluster", "c", "--type", "t",
                       "--role-to-task-spec", files("tasks.yaml", TASKS_YAML), "-o", "json")
    exp_id = json.loads(result.stdout)["id"]
    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "cli"]
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "FALCON_CONFIG_DIR":
               str(logged_in.config_dir), "FALCON_SERVER": logged_in.server}
    proc = subprocess.Popen(cmd + ["exp", "abort", str(exp_id), "--wait", "--interval", "0.1"],
                            cwd=ROOT, env=environ, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: Experiment.objects.get(pk=exp_id).status == "Aborting",
                   timeout=60, what="the abort to arrive")
        exp_update_status(exp_id=exp_id, status="Aborted")  # what the controller does
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    # progress, as create --wait shows it (Aborting, or already Aborted at the first poll)
    assert out.startswith("[") and f"experiment {exp_id} Abort" in out.splitlines()[0]
    assert out.rstrip().endswith(f"experiment {exp_id} Aborted")


def _failed_exp(logged_in, files, name: str) -> int:
    """An experiment created through the CLI, then Failed (a finished one)."""
    from experiments.services import exp_update_status

    result = logged_in("exp", "create", "--name", name, "--cluster", "c", "--type", "t",
                       "--role-to-task-spec", files("tasks.yaml", TASKS_YAML), "-o", "json")
    exp_id = json.loads(result.stdout)["id"]
    exp_update_status(exp_id=exp_id, status="Failed")
    return exp_id


@pytest.mark.django_db(transaction=True)
def test_abort_wait_of_a_finished_experiment_says_how_it_ended(logged_in, files):
    exp_id = _failed_exp(logged_in, files, "done")
    done = run("exp", "abort", str(exp_id), "--wait", config_dir=logged_in.config_dir,
               server=logged_in.server)
    assert done.returncode in (ExitCode.EXP_FAILED, ExitCode.CONFLICT), done.stderr
    assert "unexpected" not in done.stderr


@pytest.mark.django_db(transaction=True)
def test_both_deletes_refuse_without_a_terminal_unless_yes(logged_in, files):
    from experiments.models import Experiment

    exp_id = _failed_exp(logged_in, files, "gone")
    for args in (["exp", "delete", str(exp_id)], ["analysis", "delete", "an-1"]):
        done = run(*args, config_dir=logged_in.config_dir, server=logged_in.server,
                   input="y\n")
        assert done.returncode == ExitCode.USAGE, done.stderr
        assert "without a terminal to confirm it, pass --yes" in flat(done.stderr)
    assert Experiment.objects.filter(pk=exp_id).exists()
    done = run("exp", "delete", str(exp_id), "--yes", config_dir=logged_in.config_dir,
               server=logged_in.server)
    assert done.returncode == 0, done.stderr
    assert not Experiment.objects.filter(pk=exp_id).exists()


# --- 14. startup: the groups load lazily -----------------------------------------------------

def test_root_help_summaries_are_the_commands_own():
    for name in LAZY_COMMANDS:
        command = load_command(name)
        assert command.name == name
        assert LAZY_COMMANDS[name][2] == command.get_short_help_str(limit=200), name


def test_root_help_imports_no_command_module(tmp_path):
    probe = ("import sys\nfrom cli.main import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print(','.join(sorted(m for m in sys.modules if m.startswith('cli.'))),"
             " file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    loaded = set(done.stderr.strip().splitlines()[-1].split(","))
    assert loaded.isdisjoint({"cli.exp", "cli.analysis", "cli.auth", "cli.contexts",
                              "cli.client"}), loaded
    assert "exp" in done.stdout and "config" in done.stdout


def test_the_command_tree_is_complete():
    assert sorted(falcon.list_commands(click.Context(falcon))) == sorted(LAZY_COMMANDS)


# --- 12. exp logs of many replicas and roles, with a prefix per line -------------------------

@pytest.mark.django_db(transaction=True)
def test_logs_of_every_replica_and_role_with_prefixes(logged_in, tmp_path):
    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory
    from artifacts.store import replica_log_url
    from experiments.services import exp_update_status
    from experiments.tests.factories import make_exp
    from jobs.services import job_update_status

    from .test_exp_files import put

    alice = UserFactory(user_id=local_subject(EMAIL), email=EMAIL)
    exp = make_exp(creator=alice, name="many", roles=("main", "worker"), replica=2)
    for role in ("main", "worker"):
        for index in (0, 1):
            text = f"{role} {index} a\n{role} {index} b" + ("" if index else "\n")
            put(replica_log_url(exp.artifact_path, role, index), text.encode(), tmp_path)
    for job in exp.jobs.all():
        for status in ("Running", "Succeeded"):
            job_update_status(job_id=job.pk, status=status)
    exp_update_status(exp_id=exp.pk, status="Running")
    exp_update_status(exp_id=exp.pk, status="Succeeded")

    def logs(*args):
        done = run("exp", "logs", str(exp.pk), *args, config_dir=logged_in.config_dir,
                   server=logged_in.server)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert logs("--all-replicas") == [
        f"[{role}/replica-{index}] {role} {index} {line}"
        for role in ("main", "worker") for index in (0, 1) for line in "ab"]
    assert logs("--role", "worker", "--all-replicas", "--tail", "1") == [
        "[worker/replica-0] worker 0 b", "[worker/replica-1] worker 1 b"]
    assert logs("--role", "worker", "--role", "main", "--replica", "1", "--no-prefix") == [
        "worker 1 a", "worker 1 b", "main 1 a", "main 1 b"]
    assert logs("--role", "main", "--prefix") == ["[main/replica-0] main 0 a",
                                                 "[main/replica-0] main 0 b"]
    assert logs("--role", "main", "--all-replicas", "--follow")[-1] == \
        "[main/replica-1] main 1 b"  # a last line without its newline still ends whole
    done = run("exp", "logs", str(exp.pk), "--role", "main", "--role", "ps",
               config_dir=logged_in.config_dir, server=logged_in.server)
    assert done.returncode == ExitCode.NOT_FOUND
    assert "has no role 'ps'; its roles: main, worker" in done.stderr


# --- public kubectl bug reports, tried on falcon ---------------------------------------------

@pytest.fixture
def silent_server():
    """A TCP port that accepts connections (the kernel's backlog) and never answers."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


def _connections(sock) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def test_completion_script_and_current_context_never_contact_the_server(silent_server,
                                                                        tmp_path):
    # kubernetes/kubectl#1247, kubernetes/kubernetes#122845: `kubectl completion bash` and
    # `config current-context` took 5 s when the current context's server was unreachable.
    url = f"http://127.0.0.1:{silent_server.getsockname()[1]}"
    run("config", "set-context", "far", "--server", url, config_dir=tmp_path)
    run("config", "use-context", "far", config_dir=tmp_path)
    for args in (["completion", "bash"], ["config", "current-context"],
                 ["config", "get-contexts"], ["--help"], ["exp", "list", "--help"]):
        assert run(*args, config_dir=tmp_path).returncode == 0, args
    assert _connections(silent_server) == 0


def test_id_completion_gives_up_on_a_server_that_never_answers(silent_server, tmp_path):
    # evanlucas/fish-kubectl-completions#1, kubernetes/kubectl#1757: Tab hung on a cluster
    # that did not answer. Falcon's completion gives up after COMPLETION_TIMEOUT, silently.
    from cli.token_cache import Session

    url = f"http://127.0.0.1:{silent_server.getsockname()[1]}"
    CredentialStore(tmp_path).put(Session(
        server=url, token="eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDB9.c2ln", email=EMAIL,
        expires_at=4102444800, method="local", obtained_at=0))
    assert _complete("falcon exp get ", tmp_path, server=url) == []
    assert _connections(silent_server) >= 1  # it did ask


def test_switching_contexts_keeps_the_file_private_whatever_the_umask(tmp_path):
    # vvbogdanov87/gnome-shell-extension-kubeconfig#11: switching contexts made the config
    # group- and world-readable.
    config = tmp_path / "config"
    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "cli"]
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "FALCON_CONFIG_DIR": str(config)}
    for args in (["config", "set-context", "a", "--server", "http://a"],
                 ["config", "use-context", "a"]):
        # umask 0 through a shell, not `preexec_fn`: a preexec_fn makes subprocess fork this
        # process, whose gRPC threads then abort the child before it execs (seen under load).
        done = subprocess.run(["sh", "-c", 'umask 0 && exec "$@"', "sh", *cmd, *args],
                              cwd=ROOT, env=environ, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert stat.S_IMODE((config / "config.json").stat().st_mode) == 0o600
        assert stat.S_IMODE(config.stat().st_mode) == 0o700


# --- exp logs --timestamps, --since and -l ----------------------------------------------------

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z"


@pytest.mark.django_db(transaction=True)
def test_logs_timestamps_of_a_real_local_replica(logged_in):
    """The local runner records when it read each line; `--timestamps` prints it before the
    line (RFC 3339, UTC, nanoseconds), from the run folder and from the stored copy."""
    import re
    import time
    from datetime import datetime

    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory
    from controllers.cluster_backends import LocalBackend
    from experiments.files import local_state_dir
    from experiments.tests.factories import make_exp
    from experiments.tests.test_exp_files import job_view
    from jobs.models import Job
    from jobs.services import job_update_status

    alice = UserFactory(user_id=local_subject(EMAIL), email=EMAIL)
    exp = make_exp(creator=alice, name="stamped", command="echo one; echo two >&2; echo three")
    job = Job.objects.select_related("experiment").get(experiment_id=exp.pk)
    backend = LocalBackend(local_state_dir(job.cluster_name))
    view = job_view(job)
    before = time.time_ns()
    result = backend.submit(view)
    job_update_status(job_id=job.pk, status="Pending", cluster_job_name=result.cluster_job_name)
    wait_until(lambda: backend.observe([view])[view.id].terminal, what="the replica to end")
    after = time.time_ns()

    def logs(*args):
        done = run("exp", "logs", str(exp.pk), *args, config_dir=logged_in.config_dir,
                   server=logged_in.server)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    lines = logs("--timestamps")
    assert [line.split(" ", 1)[1] for line in lines] == ["one", "two", "three"]
    stamps = [line.split(" ", 1)[0] for line in lines]
    assert all(re.fullmatch(STAMP, stamp) for stamp in stamps), stamps
    seconds = [datetime.fromisoformat(stamp[:26] + "+00:00").timestamp() for stamp in stamps]
    assert all(before / 1e9 - 1e-6 <= s <= after / 1e9 for s in seconds), (before, seconds)
    assert logs("--since", "5m") == ["one", "two", "three"]
    prefixed = logs("--timestamps", "--prefix", "--tail", "1")
    assert re.fullmatch(rf"\[main/replica-0\] {STAMP} three", prefixed[0]), prefixed


@pytest.mark.django_db(transaction=True)
def test_logs_since_cuts_by_time_and_is_refused_for_a_log_without_times(logged_in, tmp_path):
    import time

    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory
    from artifacts.store import replica_log_url
    from core.processes.logtimes import RECORD, times_name
    from experiments.tests.factories import make_exp

    from .test_exp_files import put

    alice = UserFactory(user_id=local_subject(EMAIL), email=EMAIL)
    now, hour = time.time_ns(), 3600 * 10**9
    exp = make_exp(creator=alice, name="since", roles=("main", "worker"))
    for role in ("main", "worker"):
        url = replica_log_url(exp.artifact_path, role, 0)
        put(times_name(url), RECORD.pack(0, now - 2 * hour) + RECORD.pack(4, now), tmp_path)
        put(url, f"old\n{role} new\n".encode(), tmp_path)
    bare = make_exp(creator=alice, name="bare")
    put(replica_log_url(bare.artifact_path, "main", 0), b"no times\n", tmp_path)

    def logs(*args):
        return run("exp", "logs", *args, config_dir=logged_in.config_dir,
                   server=logged_in.server)

    done = logs(str(exp.pk), "--role", "main", "--since", "1h")
    assert (done.returncode, done.stdout) == (0, "main new\n"), done.stderr
    assert logs(str(exp.pk), "--role", "main", "--since", "1h30m", "--timestamps",
                "--follow").stdout.split(" ", 1)[1] == "main new\n"
    assert logs(str(exp.pk), "--role", "main", "--since", "3h").stdout == "old\nmain new\n"
    assert logs(str(exp.pk), "--all-replicas", "--since", "10m").stdout.splitlines() == [
        "[main/replica-0] main new", "[worker/replica-0] worker new"]
    for bad, why in (("5", "is not a duration"), ("5x", "is not a duration"),
                     ("0s", "must be more than 0"), ("-5m", "must be more than 0")):
        done = logs(str(exp.pk), "--role", "main", "--since", bad)
        assert done.returncode == ExitCode.USAGE and why in flat(done.stderr), (bad, done)
        assert "--since" in done.stderr
    # A log kept without times: --since is refused (naming it), --timestamps says so once.
    done = logs(str(bare.pk), "--since", "1h")
    assert done.returncode == ExitCode.CONFLICT, done.stderr
    assert "since_seconds" in flat(done.stderr) and "without line times" in flat(done.stderr)
    done = logs(str(bare.pk), "--timestamps")
    assert (done.returncode, done.stdout) == (0, "no times\n")
    assert "kept without line times" in flat(done.stderr)


@pytest.mark.django_db(transaction=True)
def test_logs_of_every_experiment_matching_a_label(logged_in, tmp_path):
    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory
    from artifacts.store import replica_log_url
    from experiments.tests.factories import make_exp

    from .test_exp_files import put

    alice = UserFactory(user_id=local_subject(EMAIL), email=EMAIL)
    exps = [make_exp(creator=alice, name=f"lab-{i}", roles=("main", "worker"), replica=2)
            for i in range(3)]
    for exp in exps:
        for role in ("main", "worker"):
            for index in (0, 1):
                put(replica_log_url(exp.artifact_path, role, index),
                    f"{exp.pk} {role} {index}\n".encode(), tmp_path)
    a, b, other = exps
    for exp, team in ((a, "infra"), (b, "infra"), (other, "web")):
        assert logged_in("exp", "label", str(exp.pk), f"team={team}").exit_code == 0

    def logs(*args):
        return run("exp", "logs", *args, config_dir=logged_in.config_dir,
                   server=logged_in.server)

    done = logs("-l", "team=infra", "--role", "main")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"[exp/{e.pk}/main/replica-0] {e.pk} main 0"
                                        for e in (a, b)]
    done = logs("-l", "team=infra", "--all-replicas", "--tail", "1")
    assert len(done.stdout.splitlines()) == 8 and done.returncode == 0
    assert f"[exp/{b.pk}/worker/replica-1] {b.pk} worker 1" in done.stdout.splitlines()
    done = logs("-l", "team", "--role", "ps")  # no experiment has the role: nothing, exit 0
    assert (done.returncode, done.stdout) == (0, "")
    done = logs("-l", "team=nobody")
    assert done.returncode == 0 and "No experiments match team=nobody" in done.stderr
    done = logs("-l", "team", "--max-exps", "2")
    assert done.returncode == ExitCode.USAGE and "--max-exps" in flat(done.stderr)
    for args in ((), (str(a.pk), "-l", "team=infra")):
        done = logs(*args)
        assert done.returncode == ExitCode.USAGE
        assert "give an experiment ID or -l/--label" in flat(done.stderr)
