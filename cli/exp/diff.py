"""`falcon exp diff`: compare experiments by key path (the server's DiffExps).

The comparison itself is the server's (`GET /api/v1/exps/diff`, `experiments.diff`); this
command asks for it and draws it. Only click is imported at module level.

Its exit status follows `diff` and `kubectl diff`, so a script can ask "do they differ?": 0 no
differences, 1 differences, 2 a usage error, and otherwise the code of `cli.exit_codes` (3 an id
that does not exist, 9 no server, ...), with 12 (`DIFF_FAILED`) for the unexpected failures
other commands exit 1 for.
"""
from __future__ import annotations

import rich_click as click

from ..errors import CLIError
from ..exit_codes import ExitCode
from ..options import ExpIdType, output_option, pass_env, server_option
from .group import EXPS, check_exp_ids, exp_group

MAX_EXPERIMENTS = 10  # the server's experiments.diff.MAX_EXPERIMENTS (a test keeps them equal)


@exp_group.command("diff")
@click.argument("exp_ids", nargs=-1, required=True, type=ExpIdType(), metavar="A B [C ...]")
@click.option("--all", "show_all", is_flag=True,
              help="Also show the paths whose values are equal in every experiment.")
@output_option
@server_option
@pass_env
def diff(env, exp_ids: tuple[int, ...], show_all: bool, output: str, server: str) -> None:
    """Compare experiments by key path: fields, labels, status and duration, each role's task
    spec (image, replica, devices, command, each env) and the config parsed as YAML.

    Keys are matched by name, so reordered or inserted keys show only what differs. Configs
    are read as YAML 1.2 (`010` is ten, `on` a string); equal values written differently
    (`3.10` and `3.1`) are a difference, shown with their text. A config that is not YAML is
    compared as text (a unified diff against the first experiment).

    Exit status, as `diff`: 0 no differences, 1 differences, 2 usage error, 3 an id not
    found, 12 an unexpected failure; other codes as every falcon command.

    \b
    Examples:
      falcon exp diff 12 15
      falcon exp diff 12 15 16 --all -o json
    """
    from .. import output as out
    from ..client import open_client

    check_exp_ids(exp_ids, MAX_EXPERIMENTS)
    params = [("ids", ",".join(map(str, exp_ids)))]
    if show_all:
        params.append(("all", "true"))
    try:
        with open_client(env, server) as client:
            answer = client.request("GET", f"{EXPS}/diff", params=params)
        out.emit(env, answer, output, out.exp_diff_table)
        differ = any(not row.get("equal") for row in answer.get("differences") or []) or any(
            text.get("diff") for text in answer.get("config_text_diffs") or [])
    except CLIError as exc:
        if exc.code == ExitCode.ERROR:  # 1 means "they differ" here
            exc.code = ExitCode.DIFF_FAILED
        raise
    except (BrokenPipeError, click.exceptions.Exit, click.exceptions.Abort, KeyboardInterrupt):
        raise
    except Exception as exc:  # a bug, or a malformed answer: not "they differ"
        if env.debug:
            raise
        raise CLIError(f"unexpected {type(exc).__name__}: {exc} (set FALCON_DEBUG=1 to see the "
                       "traceback)", ExitCode.DIFF_FAILED) from None
    if differ:
        raise click.exceptions.Exit(int(ExitCode.ERROR))
