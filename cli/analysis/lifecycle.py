"""`falcon analysis cancel` and `delete`."""
from __future__ import annotations

import rich_click as click

from ..errors import CLIError
from ..exit_codes import ExitCode
from ..options import (
    analysis_id_argument, confirm_delete, output_option, pass_env, server_option, yes_option,
)
from ..visible import visible
from .group import ANALYSES, analysis_group, api_errors


@analysis_group.command("cancel")
@analysis_id_argument
@output_option
@server_option
@pass_env
def cancel(env, analysis_id: str, output: str, server: str) -> None:
    """Cancel an analysis; an analysis that has already ended is left as it is.

    \b
    Examples:
      falcon analysis cancel an-127d556979606b76
    """
    from .. import output as out
    from ..client import open_client

    with open_client(env, server) as client, api_errors(analysis_id=analysis_id):
        analysis = client.request("POST", f"{ANALYSES}/{analysis_id}/cancel")
    if output == "table":
        env.print_out(visible(f"analysis {analysis.get('id')} is {analysis.get('status')}"))
    else:
        out.emit(env, analysis, output, out.analysis_detail)


@analysis_group.command("delete")
@analysis_id_argument
@click.option("--purge", is_flag=True,
              help="Also remove its results and log from the store.")
@yes_option
@server_option
@pass_env
def delete(env, analysis_id: str, purge: bool, yes: bool, server: str) -> None:
    """Delete an analysis that has ended (cancel it first if it has not); --purge also removes
    its results and log. Asks first, as `exp delete` does; --yes skips the question (needed
    without a terminal: exit 2 otherwise).

    \b
    Examples:
      falcon analysis delete an-127d556979606b76
      falcon analysis delete an-127d556979606b76 --purge --yes
    """
    from ..client import open_client

    if not yes:
        confirm_delete(env, f"Delete analysis {analysis_id}"
                       + (" and remove its results and log for good?" if purge else "?"),
                       what=f"analysis {analysis_id}")
    params = {"purge": "true"} if purge else None
    with open_client(env, server) as client:
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

