"""`falcon analysis cancel` and `delete`."""
from __future__ import annotations

from typing import Any

import rich_click as click

from ..errors import CLIError, exit_for, run_each
from ..exit_codes import ExitCode
from ..listing import emit_objects
from ..options import (
    analysis_ids_argument, confirm_delete, output_option, pass_env, server_option, yes_option,
)
from ..visible import visible
from .group import (
    ANALYSES, analysis_group, analysis_ids_of, api_errors, no_label_option,
)


@analysis_group.command("cancel")
@analysis_ids_argument
@no_label_option("cancel")
@output_option
@server_option
@pass_env
def cancel(env, analysis_ids: tuple[str, ...], output: str, server: str) -> None:
    """Cancel analyses; one that has already ended is left as it is. Several ids are cancelled
    and reported in turn (exit code: the first failure's).

    \b
    Examples:
      falcon analysis cancel an-127d556979606b76
      falcon analysis cancel an-127d556979606b76 an-5e0c1f2a33b4d6e7
    """
    from .. import output as out
    from ..client import open_client

    done: list[dict[str, Any]] = []

    def cancel_one(analysis_id: str) -> None:
        with api_errors(analysis_id=analysis_id):
            analysis = client.request("POST", f"{ANALYSES}/{analysis_id}/cancel")
        done.append(analysis)
        if output == "table":
            env.print_out(visible(f"analysis {analysis.get('id')} is {analysis.get('status')}"))

    with open_client(env, server) as client:
        failure = run_each(env, analysis_ids_of(analysis_ids), cancel_one)
    if output != "table":
        emit_objects(env, done, output, out.analysis_detail, several=len(analysis_ids) > 1,
                     kind="analysis")
    exit_for(failure)


@analysis_group.command("delete")
@analysis_ids_argument
@no_label_option("delete")
@click.option("--purge", is_flag=True,
              help="Also remove their results and log from the store.")
@yes_option
@server_option
@pass_env
def delete(env, analysis_ids: tuple[str, ...], purge: bool, yes: bool, server: str) -> None:
    """Delete analyses that have ended (cancel one first if it has not); --purge also removes
    their results and log. Asks first, as `exp delete` does; --yes skips the question (needed
    without a terminal: exit 2 otherwise). Several ids are deleted and reported in turn (exit
    code: the first failure's).

    \b
    Examples:
      falcon analysis delete an-127d556979606b76
      falcon analysis delete an-127d556979606b76 --purge --yes
    """
    from ..client import open_client

    ids = analysis_ids_of(analysis_ids)
    if not yes:
        if len(ids) == 1:
            confirm_delete(env, f"Delete analysis {ids[0]}"
                           + (" and remove its results and log for good?" if purge else "?"),
                           what=f"analysis {ids[0]}")
        else:
            confirm_delete(env, f"Delete these {len(ids)} analyses"
                           + (" and remove their results and logs for good?" if purge
                              else "?"),
                           what=f"{len(ids)} analyses",
                           listing=[f"  analysis/{analysis_id}" for analysis_id in ids])
    params = {"purge": "true"} if purge else None

    def delete_one(analysis_id: str) -> None:
        try:
            with api_errors(analysis_id=analysis_id):
                client.request("DELETE", f"{ANALYSES}/{analysis_id}", params=params)
        except CLIError as exc:
            if exc.status == 409:
                # The server says why and to cancel it first; name the command that does.
                raise CLIError(f"{exc.message.rstrip('.')} (`falcon analysis cancel "
                               f"{analysis_id}`)", ExitCode.CONFLICT, status=409) from None
            raise
        env.print_out(f"deleted analysis {analysis_id}"
                      + (" with its results and log" if purge else ""))

    with open_client(env, server) as client:
        failure = run_each(env, ids, delete_one)
    exit_for(failure)
