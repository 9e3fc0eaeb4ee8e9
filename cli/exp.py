"""`falcon exp`: the ExperimentService over HTTP.

Only click is imported at module level; httpx, rich and yaml are imported inside the commands.
"""
from __future__ import annotations

from typing import Any

import rich_click as click

from core.statuses import CONFIG_ENV, EXP_TERMINAL, ExpStatus

from .errors import CLIError
from .exit_codes import ExitCode
from .options import exp_id_argument, output_option, pass_env, server_option
from .visible import visible

EXPS = "/api/v1/exps"
# Plain strings: click.Choice would offer an enum's member names (CREATED), not its values.
STATUSES = tuple(status.value for status in ExpStatus)
DEFAULT_INTERVAL = 2.0  # seconds between polls of `exp wait`
PAGE_SIZE = 500  # rows per ListExps page: the server's maximum, so few round trips
# The server's FALCON_CONFIG_MAX_BYTES: the config reaches a task as `CUSTOM_CONFIG_KEY=<config>`,
# and Linux caps one environment string with its NUL at MAX_ARG_STRLEN = 128 KiB.
CONFIG_MAX_BYTES = 128 * 1024 - len(f"{CONFIG_ENV}=") - 1
TASKS_MAX_BYTES = 1024 * 1024  # a tasks file of a few roles is a few KiB
# Seconds `exp wait` keeps polling a server that stopped answering (a restart) before giving up.
UNAVAILABLE_GRACE = 60.0
# Tries of a create (it carries an Idempotency-Key, so a repeat cannot make a second experiment)
# and of a read, when the server cannot be reached or the connection drops.
ATTEMPTS = 4
IDEMPOTENCY_HEADER = "Idempotency-Key"


class LabelArg(click.ParamType):
    """A `--label` of create: `key=value`, checked as a Kubernetes label before any request."""

    name = "KEY=VALUE"

    def convert(self, value, param, ctx):
        from experiments.labels import key_problem, value_problem

        if "=" not in value:
            self.fail(f"{value!r} is not key=value (e.g. --label baseline=true)", param, ctx)
        key, _, label_value = value.partition("=")
        problem = key_problem(key) or value_problem(key, label_value)
        if problem:
            self.fail(problem, param, ctx)
        return key, label_value


class SelectorArg(click.ParamType):
    """A `--label` of list: `key=value` or `key` (the label is set), as kubectl's -l."""

    name = "KEY[=VALUE]"

    def convert(self, value, param, ctx):
        from experiments.labels import parse_selector

        try:
            return str(parse_selector(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def labels_option(func):
    """Add `--label KEY=VALUE` (repeatable) to a command that creates an experiment."""
    return click.option("--label", "labels", multiple=True, type=LabelArg(),
                        help="A label key=value (repeatable), e.g. --label baseline=true; "
                             "Kubernetes label syntax.")(func)


def create_exp(env, client, body: dict[str, Any]) -> dict[str, Any]:
    """POST a CreateExp `body` with a fresh `Idempotency-Key` (uuid4), retried when the server
    cannot be reached or the connection drops: every try carries the same key, so the server
    makes at most one experiment for this invocation.

    Raises:
        CLIError: as `FalconClient.request`.
    """
    import uuid

    return client.request("POST", EXPS, json=body, attempts=ATTEMPTS,
                          headers={IDEMPOTENCY_HEADER: str(uuid.uuid4())})


def read_tasks_file(path: str) -> dict[str, dict[str, Any]]:
    """Read the `--role-to-task-spec` file: YAML mapping each role to its TaskSpec.

    The file is read by YAML 1.2 core-schema rules, names and env values as written, without
    anchors or aliases (`cli/tasks_yaml.py`), and at most `TASKS_MAX_BYTES`. Only the shape is
    checked here (a non-empty mapping of role name -> mapping, decimal `replica` and
    `device_count`, finite numbers); the fields of each TaskSpec are checked by the server, which
    names the field that is wrong.

    Args:
        path: the YAML file, e.g. `./tasks.yaml` with `main: {command: ..., replica: 1}`.

    Returns:
        `{role: {field: value}}`, ready to send as JSON.

    Raises:
        CLIError(USAGE): the file is missing, not a regular file, over `TASKS_MAX_BYTES`, not
            UTF-8, not YAML, or not that shape.
    """
    from .files import decode_utf8, read_limited
    from .tasks_yaml import parse_tasks

    what = "tasks file"
    data = read_limited(path, what, TASKS_MAX_BYTES, "a tasks file may hold")
    return parse_tasks(decode_utf8(data, path, what), path, what)


def read_config_file(path: str) -> str:
    """Read the `--config` file as UTF-8 text, byte for byte (no newline translation).

    The text is sent unparsed, stored verbatim and injected as CUSTOM_CONFIG_KEY
    (decisions.md#dec-config).

    Raises:
        CLIError(USAGE): the file is missing, not a regular file, over `CONFIG_MAX_BYTES`,
            unreadable or not UTF-8.
    """
    from .files import decode_utf8, read_limited

    what = "config file"
    data = read_limited(path, what, CONFIG_MAX_BYTES,
                        f"the server accepts a config (given to every task as {CONFIG_ENV}, "
                        "which Linux caps with its name at 128 KiB) of")
    return decode_utf8(data, path, what)


@click.group("exp")
def exp_group() -> None:
    """Create, inspect, abort, delete and wait for experiments."""


@exp_group.command("create")
@click.option("--name", required=True, help="Experiment name, e.g. model-profiling-001.")
@click.option("--cluster", "cluster_name", required=True, help="Cluster to run on.")
@click.option("--type", "exp_type", required=True, help="Experiment type, e.g. profiling.")
@click.option("--role-to-task-spec", "tasks_file", required=True, metavar="FILE",
              help="YAML file mapping each role to its task spec (command, replica, image, "
                   "device_count, device_type, device_topo, envs).")
@click.option("--config", "config_file", metavar="FILE",
              help="Config file sent as text, unparsed; stored verbatim and given to every "
                   "task as CUSTOM_CONFIG_KEY.")
@click.option("--priority", type=int, default=-1, show_default=True, help="Scheduling priority.")
@labels_option
@click.option("--wait", is_flag=True, help="Wait until the experiment ends (see `exp wait`).")
@output_option
@server_option
@pass_env
def create(env, name: str, cluster_name: str, exp_type: str, tasks_file: str,
           config_file: str | None, priority: int, labels: tuple[tuple[str, str], ...],
           wait: bool, output: str, server: str) -> None:
    """Create an experiment (CreateExp): one job per role, and its artifact.

    Safe to retry: the request carries an Idempotency-Key, and is sent again when the server
    cannot be reached, without ever making a second experiment.
    """
    from . import output as out
    from .client import open_client

    # Read and check both files before anything is sent.
    body = {"name": name, "cluster_name": cluster_name, "exp_type": exp_type,
            "role_to_task_spec": read_tasks_file(tasks_file),
            "config": read_config_file(config_file) if config_file else "",
            "priority": priority, "labels": dict(labels)}
    with open_client(env, server) as client:
        exp = create_exp(env, client, body)
        if not wait:
            out.emit(env, exp, output, out.exp_detail)
            return
        if output == "table":
            env.print_out(visible(f"created experiment {exp['id']} ({exp['name']})"))
        wait_for(env, client, exp["id"], interval=DEFAULT_INTERVAL, timeout=None, output=output)


@exp_group.command("get")
@exp_id_argument
@output_option
@server_option
@pass_env
def get(env, exp_id: int, output: str, server: str) -> None:
    """Show one experiment (GetExp) with its jobs, artifact and config."""
    from . import output as out
    from .client import open_client

    with open_client(env, server) as client:
        exp = client.request("GET", f"{EXPS}/{exp_id}")
    out.emit(env, exp, output, out.exp_detail)


@exp_group.command("list")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(STATUSES, case_sensitive=False),
              help="Only these statuses (repeatable).")
@click.option("--type", "exp_type", help="Only this experiment type.")
@click.option("--cluster", "cluster_name", help="Only this cluster.")
@click.option("--creator", help="Only experiments of this creator (email or user id).")
@click.option("--search", help="Only names starting with this text (case-insensitive).")
@click.option("--label", "selectors", multiple=True, type=SelectorArg(),
              help="Only experiments with this label: key=value, or key for any value "
                   "(repeatable; all must match).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many rows, newest first (pages are followed).")
@click.option("--watch", "-w", is_flag=True,
              help="Redraw the list as it changes, until Ctrl-C (table output).")
@click.option("--interval", type=click.FloatRange(min=0.5), default=DEFAULT_INTERVAL,
              show_default=True, help="Seconds between two polls of --watch.")
@output_option
@server_option
@pass_env
def list_(env, statuses: tuple[str, ...], exp_type: str | None, cluster_name: str | None,
          creator: str | None, search: str | None, selectors: tuple[str, ...], limit: int,
          watch: bool, interval: float, output: str, server: str) -> None:
    """List experiments (ListExps), newest first, with their age, run time and labels."""
    from . import output as out
    from .client import open_client

    if watch and output != "table":
        raise CLIError("--watch draws a table; drop -o/--output, or poll `falcon exp list -o "
                       f"{output}` yourself", ExitCode.USAGE)
    params: list[tuple[str, str]] = [("status", s) for s in statuses]
    for key, value in (("exp_type", exp_type), ("cluster_name", cluster_name),
                       ("creator", creator), ("search", search)):
        if value:
            params.append((key, value))
    params += [("label", selector) for selector in selectors]
    params.append(("page_size", str(min(limit, PAGE_SIZE))))
    with open_client(env, server) as client:
        if watch:
            watch_list(env, client, params=params, limit=limit, interval=interval)
            return
        exps = list(client.paginate(EXPS, params=params, limit=limit))
    out.emit(env, exps, output, lambda console, rows: out.exp_list_table(
        console, rows, now=_now(env)))


def _now(env):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(env.clock(), timezone.utc)


def watch_list(env, client, *, params: list[tuple[str, str]], limit: int,
               interval: float) -> None:
    """Poll ListExps every `interval` seconds and redraw the table until Ctrl-C (exit 0).

    On a terminal the table is redrawn in place (`rich.live.Live`); otherwise it is printed
    again each time a row's status, reason or labels change (or rows come and go), so a log
    of the output reads as a history. A server that stops answering is polled again (the
    table says so) rather than ending the watch.

    Args:
        env: the run's `Environment` (its `sleep` and `clock` pace the loop and the ages).
        client: a `FalconClient`.
        params: the ListExps query.
        limit: the most rows shown.
        interval: seconds between polls.
    """
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from . import output as out

    console = env.console()
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    last = None
    try:
        if live is not None:
            live.start()
        while True:
            note = None
            try:
                exps = list(client.paginate(EXPS, params=params, limit=limit))
            except CLIError as exc:
                if exc.code != ExitCode.UNAVAILABLE:
                    raise
                note = Text(f"server unavailable, retrying every {interval:g}s: {exc}",
                            style="yellow")
            if note is None:
                view = Group(out.exp_list_view(exps, now=_now(env)),
                             Text(f"every {interval:g}s; Ctrl-C to stop", style="dim"))
                key = tuple((e.get("id"), e.get("status"), e.get("reason"),
                             tuple(sorted((e.get("labels") or {}).items()))) for e in exps)
            else:
                view, key = note, ("unavailable",)
            if live is not None:
                live.update(view, refresh=True)
            elif key != last:
                console.print(view)
            last = key
            env.sleep(interval)
    except KeyboardInterrupt:
        return  # stopping a watch is its normal end
    finally:
        if live is not None:
            live.stop()


@exp_group.command("label")
@exp_id_argument
@click.argument("changes", nargs=-1, required=True, metavar="KEY=VALUE|KEY- ...")
@output_option
@server_option
@pass_env
def label(env, exp_id: int, changes: tuple[str, ...], output: str, server: str) -> None:
    """Set (key=value) or remove (key-) labels of an experiment, as `kubectl label` does.

    All changes are applied in one transaction; only the creator or a staff user may label.
    """
    from experiments.labels import parse_label_args

    from . import output as out
    from .client import open_client

    try:
        to_set, to_remove = parse_label_args(changes)
    except ValueError as exc:
        raise CLIError(str(exc), ExitCode.USAGE) from None
    patch: dict[str, Any] = {**to_set, **dict.fromkeys(to_remove)}
    with open_client(env, server) as client:
        answer = client.request("PATCH", f"{EXPS}/{exp_id}/labels", json={"labels": patch})
    labels = answer.get("labels") or {}
    if output == "table":
        env.print_out(visible(f"experiment {exp_id} labels: {out.labels_text(labels)}"))
    else:
        out.emit(env, {"id": exp_id, "labels": labels}, output, None)



@exp_group.command("abort")
@exp_id_argument
@output_option
@server_option
@pass_env
def abort(env, exp_id: int, output: str, server: str) -> None:
    """Abort an experiment (AbortExp); repeating it is harmless."""
    from . import output as out
    from .client import open_client

    with open_client(env, server) as client:
        exp = client.request("POST", f"{EXPS}/{exp_id}/abort")
    if output == "table":
        env.print_out(visible(f"experiment {exp['id']} ({exp['name']}) is {exp['status']}"))
    else:
        out.emit(env, exp, output, out.exp_detail)


@exp_group.command("delete")
@exp_id_argument
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--purge", is_flag=True,
              help="Also delete the stored artifact files and the replicas' logs.")
@server_option
@pass_env
def delete(env, exp_id: int, yes: bool, server: str, purge: bool = False) -> None:
    """Delete a finished experiment (DeleteExp) with its jobs and artifact record (and with
    --purge its stored files and logs)."""
    from .client import open_client

    with open_client(env, server) as client:
        if not yes:
            exp = client.request("GET", f"{EXPS}/{exp_id}")
            try:
                confirmed = click.confirm(visible(
                    f"Delete experiment {exp_id} ({exp['name']}, {exp['status']})"
                    + (" with its artifact files and logs" if purge else "") + "?"),
                    default=False, err=True)
            except click.exceptions.Abort:  # end of input or Ctrl-C at the prompt
                env.print_err("")
                confirmed = False
            if not confirmed:
                raise CLIError(f"experiment {exp_id} was not deleted (pass --yes to delete "
                               "without a prompt)", ExitCode.ERROR)
        client.request("DELETE", f"{EXPS}/{exp_id}",
                       params={"purge": "true"} if purge else None)
    env.print_out(f"deleted experiment {exp_id}" + (" and its files" if purge else ""))


@exp_group.command("wait")
@exp_id_argument
@click.option("--interval", type=click.FloatRange(min=0.1), default=DEFAULT_INTERVAL,
              show_default=True, help="Seconds between two polls.")
@click.option("--timeout", type=click.FloatRange(min=0), default=None,
              help="Give up after this many seconds (exit code 7). Default: wait forever.")
@output_option
@server_option
@pass_env
def wait(env, exp_id: int, interval: float, timeout: float | None, output: str,
         server: str) -> None:
    """Show an experiment's status live until it Succeeded, Failed or was Aborted.

    Exit code 0 only when it Succeeded; 6 when it Failed or was Aborted; 7 on --timeout.
    """
    from .client import open_client

    with open_client(env, server) as client:
        wait_for(env, client, exp_id, interval=interval, timeout=timeout, output=output)


def _fingerprint(exp: dict[str, Any]) -> tuple:
    jobs = tuple((j.get("role"), j.get("status")) for j in exp.get("jobs") or [])
    artifact = (exp.get("artifact") or {}).get("status")
    return exp.get("status"), jobs, artifact


def _status_line(exp: dict[str, Any], elapsed: float) -> str:
    from .output import duration

    jobs = " ".join(f"{j.get('role')}:{j.get('status')}" for j in exp.get("jobs") or [])
    artifact = (exp.get("artifact") or {}).get("status", "-")
    return visible(f"[{duration(elapsed)}] experiment {exp.get('id')} {exp.get('status')}"
                   f" (jobs {jobs or '-'}; artifact {artifact})")


def wait_for(env, client, exp_id: int, *, interval: float, timeout: float | None,
             output: str) -> None:
    """Poll GetExp until the experiment is terminal, showing its progress.

    On a terminal console the view is a live `rich` display; otherwise one line is printed per
    change of the experiment's, a job's or the artifact's status. The progress goes to stdout for
    `table` and to stderr for `json`/`yaml`, whose stdout holds only the final experiment.

    Args:
        env: the run's `Environment` (its `sleep` and `monotonic` pace the loop).
        client: a `FalconClient` for the server.
        exp_id: the experiment's id.
        interval: seconds between polls.
        timeout: seconds before giving up, or None to wait forever.
        output: `table`, `json` or `yaml`.

    Raises:
        CLIError: EXP_FAILED when it ends Failed or Aborted, TIMEOUT when `timeout` elapses,
            UNAVAILABLE when the server stays unreachable for `UNAVAILABLE_GRACE` seconds, or
            any other error of the request (AUTH when the session expires meanwhile).
    """
    from rich.live import Live

    from . import output as out

    console = env.console(stderr=output != "table")
    start = env.monotonic()
    down_since: float | None = None
    exp = client.request("GET", f"{EXPS}/{exp_id}")

    class _View:  # re-rendered on each refresh, so the elapsed time keeps ticking
        def __rich__(self):
            return out.exp_progress(exp, env.monotonic() - start)

    live = Live(_View(), console=console, refresh_per_second=4, transient=False,
                auto_refresh=True) if console.is_terminal else None
    last = None
    try:
        if live is not None:
            live.start()
        while True:
            if live is None and _fingerprint(exp) != last:
                last = _fingerprint(exp)
                console.file.write(_status_line(exp, env.monotonic() - start) + "\n")
                console.file.flush()
            if exp.get("status") in EXP_TERMINAL:
                break
            now = env.monotonic()
            if timeout is not None and now - start >= timeout:
                raise CLIError(f"gave up waiting for experiment {exp_id} after "
                               f"{out.duration(now - start)}; it is still {exp.get('status')}",
                               ExitCode.TIMEOUT)
            delay = interval if timeout is None else min(interval, start + timeout - now)
            env.sleep(max(delay, 0.0))
            try:
                exp = client.request("GET", f"{EXPS}/{exp_id}")
                down_since = None
            except CLIError as exc:
                # A server restarting (runlocal, a rolling deploy) is not the experiment's end:
                # keep polling for UNAVAILABLE_GRACE seconds before giving up.
                if exc.code != ExitCode.UNAVAILABLE:
                    raise
                down_since = env.monotonic() if down_since is None else down_since
                if env.monotonic() - down_since > UNAVAILABLE_GRACE:
                    raise
            if live is not None:
                live.refresh()
    except KeyboardInterrupt:
        # Ctrl-C stops the waiting, not the experiment: say so, or "Aborted!" reads as an abort.
        raise CLIError(f"stopped waiting; experiment {exp_id} is still {exp.get('status')} "
                       f"(`falcon exp wait {exp_id}` resumes, `falcon exp abort {exp_id}` "
                       "stops it)", ExitCode.INTERRUPTED) from None
    finally:
        if live is not None:
            live.stop()

    if output != "table":
        out.emit(env, exp, output, out.exp_detail)
    status = exp.get("status")
    if status != ExpStatus.SUCCEEDED:
        detail = ": ".join(str(v) for v in (exp.get("reason"), exp.get("message")) if v)
        raise CLIError(f"experiment {exp_id} ended {status}" + (f" ({detail})" if detail else ""),
                       ExitCode.EXP_FAILED)
    if output == "table":
        env.print_out(f"experiment {exp_id} {ExpStatus.SUCCEEDED}")


__all__ = ["create_exp", "exp_group", "read_config_file", "read_tasks_file", "wait_for"]

# The commands defined in their own modules register on `exp_group` when imported (they import
# only click at module level, like this one).
from . import exp_clone, exp_diff  # noqa: E402,F401

# `falcon exp describe` lives in its own module (cli/describe.py).
from .describe import describe as _describe  # noqa: E402

exp_group.add_command(_describe)

# `falcon exp compare` (cli/exp_compare.py).
from .exp_compare import compare as _compare  # noqa: E402

exp_group.add_command(_compare)
