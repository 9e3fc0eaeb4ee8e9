"""`falcon exp abort`, `delete` and `wait`."""
from __future__ import annotations

from typing import Any

import rich_click as click

from core.domain.statuses import EXP_TERMINAL, ExpStatus

from ..errors import CLIError, exit_for, run_each
from ..exit_codes import ExitCode
from ..options import (
    FiniteFloat,
    confirm_delete,
    exp_ids_argument,
    output_option,
    pass_env,
    server_option,
    yes_option,
)
from ..visible import visible
from ..outages import OutageGrace
from .group import DEFAULT_INTERVAL, EXPS, PAGE_SIZE, exp_group
from .inputs import selector_option


def _targets(env, client, exp_ids: tuple[int, ...], selectors: tuple[str, ...],
             verb: str) -> tuple[list[int], dict[int, dict[str, Any]]]:
    """The experiments a command acts on: its ids, or those matching `-l` (never both).

    Returns:
        The ids, and the rows read for them (`-l` lists them; empty for ids given).

    Raises:
        CLIError(USAGE): neither or both given.
    """
    from .read import MAX_ROWS

    if exp_ids and selectors:
        raise CLIError(f"give experiment ids or -l/--label to choose what to {verb}, not both",
                       ExitCode.USAGE)
    if exp_ids:
        return list(dict.fromkeys(exp_ids)), {}
    if not selectors:
        raise CLIError(f"give the experiment ids to {verb} (e.g. 12 or exp/12), or -l "
                       "KEY=VALUE for every experiment with that label", ExitCode.USAGE)
    params = [("label", selector) for selector in selectors] + [("page_size", str(PAGE_SIZE))]
    rows = {exp["id"]: exp for exp in client.paginate(EXPS, params=params, limit=MAX_ROWS)}
    return list(rows), rows


@exp_group.command("abort")
@exp_ids_argument
@selector_option
@click.option("--wait", "wait_", is_flag=True,
              help="Then show its status live until it is Aborted (exit 0), as `exp wait` "
                   "(one experiment only).")
@click.option("--interval", type=FiniteFloat(min=0.1), default=DEFAULT_INTERVAL,
              show_default=True, help="Seconds between two polls of --wait.")
@click.option("--timeout", type=FiniteFloat(min=0), default=None,
              help="With --wait: give up after this many seconds (exit code 7).")
@output_option
@server_option
@pass_env
def abort(env, exp_ids: tuple[int, ...], selectors: tuple[str, ...], wait_: bool,
          interval: float, timeout: float | None, output: str, server: str) -> None:
    """Abort experiments (AbortExp), by id or every one matching -l; repeating it is harmless.

    Each experiment is aborted and reported in turn; one that fails is reported and the others
    are still aborted (exit code: the first failure's). With --wait (one experiment): exit 0 once
    it is Aborted; 6 when it ended Succeeded or Failed before the abort reached it; 7 on
    --timeout.

    \b
    Examples:
      falcon exp abort 12
      falcon exp abort 12 13 exp/14
      falcon exp abort -l team=infra
      falcon exp abort 12 --wait --timeout 300
    """
    from .. import output as out
    from ..client import open_client
    from ..listing import emit_objects

    with open_client(env, server) as client:
        targets, _ = _targets(env, client, exp_ids, selectors, "abort")
        if wait_ and (len(targets) != 1 or selectors):
            raise CLIError("--wait follows one experiment; give one id (or run `falcon exp "
                           "wait ID` for each)", ExitCode.USAGE)
        if not targets:
            env.print_err("No experiments match.")
            return
        exps: list[dict[str, Any]] = []

        def abort_one(exp_id: int) -> None:
            exp = client.request("POST", f"{EXPS}/{exp_id}/abort")
            exps.append(exp)
            if output == "table" and not wait_:
                env.print_out(visible(f"experiment {exp['id']} ({exp['name']}) is "
                                      f"{exp['status']}"))

        failure = run_each(env, targets, abort_one)
        if wait_ and failure is None:
            wait_for(env, client, targets[0], interval=interval, timeout=timeout, output=output,
                     until=ExpStatus.ABORTED)
            return
    if output != "table":
        emit_objects(env, exps, output, out.exp_detail, several=len(targets) > 1, kind="exp")
    exit_for(failure)


@exp_group.command("delete")
@exp_ids_argument
@selector_option
@yes_option
@click.option("--purge", is_flag=True,
              help="Also delete the stored artifact files and the replicas' logs.")
@server_option
@pass_env
def delete(env, exp_ids: tuple[int, ...], selectors: tuple[str, ...], yes: bool, server: str,
           purge: bool = False) -> None:
    """Delete finished experiments (DeleteExp), by id or every one matching -l, with their jobs
    and artifact record (and with --purge their stored files and logs). Asks first, listing what
    will be deleted; --yes skips the question (needed without a terminal: exit 2 otherwise).

    Each experiment is deleted and reported in turn; one that fails is reported and the others
    are still deleted (exit code: the first failure's).

    \b
    Examples:
      falcon exp delete 12
      falcon exp delete 12 13 --purge --yes
      falcon exp list -o name -l team=data | xargs falcon exp delete --yes
      falcon exp delete -l stage=scratch
    """
    from ..client import open_client

    with open_client(env, server) as client:
        targets, rows = _targets(env, client, exp_ids, selectors, "delete")
        if not targets:
            env.print_err("No experiments match.")
            return
        failure = None
        if not yes:
            shown: list[dict[str, Any]] = list(rows.values())  # -l: the list just read
            if not selectors:
                failure = run_each(env, targets, lambda exp_id: shown.append(
                    client.request("GET", f"{EXPS}/{exp_id}")))
            if not shown:
                exit_for(failure)
            extra = " with their artifact files and logs" if purge else ""
            listing: list[str] = []
            if len(shown) == 1:
                exp = shown[0]
                question = (f"Delete experiment {exp['id']} ({exp['name']}, {exp['status']})"
                            + (" with its artifact files and logs" if purge else "") + "?")
                what = f"experiment {exp['id']}"
            else:
                listing = [f"  exp/{exp['id']}  {exp['name']}  {exp['status']}" for exp in shown]
                question = f"Delete these {len(shown)} experiments{extra}?"
                what = f"{len(shown)} experiments"
            confirm_delete(env, question, what=what, listing=listing)
            targets = [exp["id"] for exp in shown]

        def delete_one(exp_id: int) -> None:
            client.request("DELETE", f"{EXPS}/{exp_id}",
                           params={"purge": "true"} if purge else None)
            env.print_out(f"deleted experiment {exp_id}" + (" and its files" if purge else ""))

        failure = run_each(env, targets, delete_one) or failure
    exit_for(failure)


@exp_group.command("wait")
@exp_ids_argument
@selector_option
@click.option("--interval", type=FiniteFloat(min=0.1), default=DEFAULT_INTERVAL,
              show_default=True, help="Seconds between two polls.")
@click.option("--timeout", type=FiniteFloat(min=0), default=None,
              help="Give up after this many seconds of the whole wait, however many "
                   "experiments (exit code 7). Default: wait forever.")
@output_option
@server_option
@pass_env
def wait(env, exp_ids: tuple[int, ...], selectors: tuple[str, ...], interval: float,
         timeout: float | None, output: str, server: str) -> None:
    """Show experiments' status live until each Succeeded, Failed or was Aborted.

    Exit code 0 only when every one Succeeded; 6 when one Failed or was Aborted; 7 on
    --timeout; 3 for an id not found, or -l matching none (nothing to wait for is an error, as
    `kubectl wait -l`). With several experiments (ids, `exp/ID`, or every one matching -l when
    the wait starts) each is followed in turn, in the order given, until all have ended; one
    that fails is reported and the others still waited for (exit code: the first failure's in
    that order). --timeout bounds the whole run, listing included: once it is past, each id
    left is read once and reported as ended or still running. With -l, an experiment the list
    shows ended is reported from it (no further request), only the others are polled, and once
    the deadline is past each one left is reported as the list showed it. With -o json|yaml:
    the ended experiments, a list for several.

    \b
    Examples:
      falcon exp wait 12
      falcon exp wait 12 13 exp/14 --timeout 3600
      falcon exp wait -l batch=7 -o json
    """
    from .. import output as out
    from ..client import open_client
    from ..listing import emit_objects

    start = env.monotonic()  # --timeout bounds the whole run (kubectl's), the -l list included
    with open_client(env, server) as client:
        targets, listed = _targets(env, client, exp_ids, selectors, "wait for")
        if not targets:
            raise CLIError(f"no experiments match -l {','.join(selectors)}; nothing to wait "
                           "for", ExitCode.NOT_FOUND)
        ended: list[dict[str, Any]] = []

        def wait_one(exp_id: int) -> None:
            row = listed.get(exp_id)
            if row is not None and row.get("status") in EXP_TERMINAL:
                exp = row  # -l: the list just read shows it ended; a GET each adds nothing
            else:
                # After Ctrl-C, the hint resumes the whole wait: the selector, or this id and
                # every one after it (none of them is known to have ended).
                import shlex

                resume = (" ".join(f"-l {shlex.quote(s)}" for s in selectors) if selectors
                          else " ".join(str(i) for i in targets[targets.index(exp_id):]))
                exp = poll_until_ended(env, client, exp_id, interval=interval,
                                       timeout=timeout, output=output, start=start,
                                       listed=row, resume=resume)
            ended.append(exp)
            report_end(env, exp, until=ExpStatus.SUCCEEDED, output=output)

        failure = run_each(env, targets, wait_one)
    if output != "table":
        emit_objects(env, ended, output, out.exp_detail, several=len(targets) > 1, kind="exp")
    exit_for(failure)


def _fingerprint(exp: dict[str, Any]) -> tuple:
    jobs = tuple((j.get("role"), j.get("status")) for j in exp.get("jobs") or [])
    artifact = (exp.get("artifact") or {}).get("status")
    return exp.get("status"), jobs, artifact


def _status_line(exp: dict[str, Any], elapsed: float) -> str:
    from ..output import duration

    jobs = " ".join(f"{j.get('role')}:{j.get('status')}" for j in exp.get("jobs") or [])
    artifact = (exp.get("artifact") or {}).get("status", "-")
    return visible(f"[{duration(elapsed)}] experiment {exp.get('id')} {exp.get('status')}"
                   f" (jobs {jobs or '-'}; artifact {artifact})")


def wait_for(env, client, exp_id: int, *, interval: float, timeout: float | None,
             output: str, until: str = ExpStatus.SUCCEEDED) -> None:
    """Follow one experiment until it ends (`poll_until_ended`), then write it for `output`
    other than `table` and say how it ended (`report_end`): `exp create --wait`, `exp clone
    --wait` and `exp abort --wait`.

    Args:
        env: the run's `Environment`.
        client: a `FalconClient` for the server.
        exp_id: the experiment's id.
        interval: seconds between polls.
        timeout: seconds before giving up, or None to wait forever.
        output: `table`, or a `GetOutputType` format (`json`, `name`, ...) for the final
            experiment alone on stdout.
        until: the final status that is a success (`exp abort --wait`: Aborted).

    Raises:
        CLIError: as `poll_until_ended` and `report_end`.
    """
    exp = poll_until_ended(env, client, exp_id, interval=interval, timeout=timeout,
                           output=output)
    if output != "table":
        from .. import output as out
        from ..listing import emit_object

        emit_object(env, exp, output, kind="exp", id_key="id", table=out.exp_detail)
    report_end(env, exp, until=until, output=output)


def report_end(env, exp: dict[str, Any], *, until: str, output: str) -> None:
    """Say how an ended experiment ended: `experiment N <until>` on stdout for `table`.

    Raises:
        CLIError(EXP_FAILED): it ended in another final status than `until`.
    """
    status = exp.get("status")
    if status != until:
        detail = ": ".join(str(v) for v in (exp.get("reason"), exp.get("message")) if v)
        raise CLIError(f"experiment {exp.get('id')} ended {status}"
                       + (f" ({detail})" if detail else ""), ExitCode.EXP_FAILED)
    if output == "table":
        env.print_out(f"experiment {exp.get('id')} {until}")


def poll_until_ended(env, client, exp_id: int, *, interval: float, timeout: float | None,
                     output: str, start: float | None = None,
                     listed: dict[str, Any] | None = None,
                     resume: str | None = None) -> dict[str, Any]:
    """Poll GetExp until the experiment is terminal, showing its progress; return it as it
    ended. The one polling loop of `exp wait`, `create --wait`, `clone --wait` and `abort
    --wait`.

    On a terminal console the view is a live `rich` display; otherwise one line is printed per
    change of the experiment's, a job's or the artifact's status. The progress goes to stdout for
    `table` and to stderr for `json`/`yaml`, whose stdout holds only the final experiment.

    Args:
        env: the run's `Environment` (its `sleep` and `monotonic` pace the loop).
        client: a `FalconClient` for the server.
        exp_id: the experiment's id.
        interval: seconds between polls.
        timeout: seconds before giving up, or None to wait forever.
        output: `table` (the progress on stdout), or another format (on stderr: stdout is
            kept for the final experiment).
        start: the `env.monotonic()` time the wait began (default: now): the time shown and
            `timeout` count from it, so several experiments followed in turn share one
            deadline (`exp wait A B`); once it is past, the experiment is read once (or, when
            `listed`, not at all).
        listed: the experiment as a list just showed it (`exp wait -l`): past the deadline it
            is reported from this, so the requests never run past `timeout`.
        resume: the arguments of `falcon exp wait` (and `exp abort`) the Ctrl-C hint names,
            e.g. `299 298` or `-l team=x`; default: `exp_id`.

    Raises:
        CLIError: TIMEOUT when `timeout` elapses, UNAVAILABLE when the server stays
            unreachable for `UNAVAILABLE_GRACE` seconds, INTERRUPTED on Ctrl-C, or any other
            error of the request (NOT_FOUND; AUTH when the session expires meanwhile).
    """
    from rich.live import Live

    from .. import output as out

    console = env.console(stderr=output != "table")
    start = env.monotonic() if start is None else start
    grace = OutageGrace(env.monotonic)
    if listed is not None and timeout is not None and env.monotonic() - start >= timeout:
        exp = listed
    else:
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
                grace.answered()
            except CLIError as exc:
                if not grace.tolerates(exc):  # a restart is not the experiment's end
                    raise
            if live is not None:
                live.refresh()
    except KeyboardInterrupt:
        # Ctrl-C stops the waiting, not the experiment: say so, or "Aborted!" reads as an abort.
        resume = resume or str(exp_id)
        raise CLIError(f"stopped waiting; experiment {exp_id} is still {exp.get('status')} "
                       f"(`falcon exp wait {resume}` resumes, `falcon exp abort {resume}` "
                       "stops it)", ExitCode.INTERRUPTED) from None
    finally:
        if live is not None:
            live.stop()

    return exp
