"""`falcon exp diff`: compare experiments by key path (the server's DiffExps).

The comparison itself is the server's (`GET /api/v1/exps/diff`, `experiments.diff`); this
command asks for it and draws it. Only click is imported at module level.
"""
from __future__ import annotations

import rich_click as click

from .errors import CLIError
from .exit_codes import ExitCode
from .exp import EXPS, exp_group
from .options import ExpIdType, output_option, pass_env, server_option

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

    Keys are matched by name, so reordered or inserted keys show only what differs; a config
    that is not YAML is compared as text (a unified diff against the first experiment).
    """
    from . import output as out
    from .client import open_client

    if not 2 <= len(exp_ids) <= MAX_EXPERIMENTS:
        raise CLIError(f"give 2 to {MAX_EXPERIMENTS} experiment ids to compare; got "
                       f"{len(exp_ids)}", ExitCode.USAGE)
    twice = sorted({i for i in exp_ids if exp_ids.count(i) > 1})
    if twice:
        raise CLIError(f"experiment {', '.join(map(str, twice))} is given more than once; "
                       "give each id once", ExitCode.USAGE)
    params = [("ids", ",".join(map(str, exp_ids)))]
    if show_all:
        params.append(("all", "true"))
    with open_client(env, server) as client:
        answer = client.request("GET", f"{EXPS}/diff", params=params)
    out.emit(env, answer, output, out.exp_diff_table)
