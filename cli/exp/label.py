"""`falcon exp label`."""
from __future__ import annotations

from typing import Any

import rich_click as click

from ..errors import CLIError
from ..exit_codes import ExitCode
from ..options import exp_id_argument, output_option, pass_env, server_option
from ..visible import visible
from .group import EXPS, exp_group


@exp_group.command("label")
@exp_id_argument
@click.argument("changes", nargs=-1, required=True, metavar="KEY=VALUE|KEY- ...")
@click.option("--overwrite", is_flag=True,
              help="Allow changing the value of a label the experiment already has (refused "
                   "otherwise, exit 2, as kubectl label).")
@output_option
@server_option
@pass_env
def label(env, exp_id: int, changes: tuple[str, ...], overwrite: bool, output: str,
          server: str) -> None:
    """Set (key=value) or remove (key-) labels of an experiment, as `kubectl label` does.

    All changes are applied in one transaction; only the creator or a staff user may label.
    Changing the value of a label it already has needs --overwrite (the server checks it in the
    same transaction, so a concurrent change is never overwritten unseen).

    \b
    Examples:
      falcon exp label 12 baseline=true team=infra
      falcon exp label 12 team=ml --overwrite
      falcon exp label 12 baseline-
    """
    from experiments.labels import parse_label_args

    from .. import output as out
    from ..client import open_client

    try:
        to_set, to_remove = parse_label_args(changes)
    except ValueError as exc:
        raise CLIError(str(exc), ExitCode.USAGE) from None
    patch: dict[str, Any] = {**to_set, **dict.fromkeys(to_remove)}
    with open_client(env, server) as client:
        try:
            answer = client.request("PATCH", f"{EXPS}/{exp_id}/labels", json={"labels": patch},
                                    params={"overwrite": "true" if overwrite else "false"})
        except CLIError as exc:
            if exc.status != 409:
                raise
            message = exc.message.rstrip(".")
            raise CLIError(message.replace("allow overwriting", "pass --overwrite")
                           if "allow overwriting" in message
                           else f"{message} (pass --overwrite)", ExitCode.USAGE) from None
    labels = answer.get("labels") or {}
    if output == "table":
        env.print_out(visible(f"experiment {exp_id} labels: {out.labels_text(labels)}"))
    else:
        out.emit(env, {"id": exp_id, "labels": labels}, output, None)
