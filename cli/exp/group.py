"""The `exp` group and what its commands share: the API path, the limits and the polls.

Only click is imported at module level; urllib3, rich and yaml are imported inside the commands
(`falcon --help` stays fast).
"""
from __future__ import annotations

import importlib

import rich_click as click

from core.domain.statuses import CONFIG_ENV, ExpStatus

from ..options import FalconSubGroup

EXPS = "/api/v1/exps"
# Plain strings: click.Choice would offer an enum's member names (CREATED), not its values.
STATUSES = tuple(status.value for status in ExpStatus)
DEFAULT_INTERVAL = 2.0  # seconds between polls of `exp wait`
PAGE_SIZE = 500  # rows per ListExps page: the server's maximum, so few round trips
# The server's FALCON_CONFIG_MAX_BYTES: the config reaches a task as `CUSTOM_CONFIG_KEY=<config>`,
# and Linux caps one environment string with its NUL at MAX_ARG_STRLEN = 128 KiB.
CONFIG_MAX_BYTES = 128 * 1024 - len(f"{CONFIG_ENV}=") - 1
TASKS_MAX_BYTES = 1024 * 1024  # a tasks file of a few roles is a few KiB
# Tries of a create (it carries an Idempotency-Key, so a repeat cannot make a second experiment)
# and of a read, when the server cannot be reached or the connection drops.
ATTEMPTS = 4
IDEMPOTENCY_HEADER = "Idempotency-Key"


# Which module of this package defines each `exp` command (it registers it on `exp_group` when
# imported): `falcon exp list` imports `read` only (a test keeps this map complete).
COMMAND_MODULES: dict[str, str] = {
    "abort": "lifecycle", "artifacts": "files", "clone": "clone", "compare": "compare",
    "create": "create", "delete": "lifecycle", "describe": "describe", "diff": "diff",
    "get": "read", "label": "label", "list": "read", "logs": "files", "wait": "lifecycle",
}


class ExpGroup(FalconSubGroup):
    """The `exp` group: a command's module is imported when that command is looked up (the
    pattern of click's "lazily loading subcommands" docs); its help and completion import all."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None:
            importlib.import_module(f"{__package__}.{module}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in sorted(set(COMMAND_MODULES.values())):
            importlib.import_module(f"{__package__}.{module}")
        return super().list_commands(ctx)


@click.group("exp", cls=ExpGroup)
def exp_group() -> None:
    """Create, inspect, abort, delete and wait for experiments.

    \b
    Examples:
      falcon exp create --name matmul-001 --cluster local --type benchmark --role-to-task-spec tasks.yaml --wait
      falcon exp list --status Running
      falcon exp logs 12 --role main --follow
    """


def check_exp_ids(exp_ids: tuple[int, ...], maximum: int) -> None:
    """Refuse, as a usage error, fewer than 2 or more than `maximum` ids, or an id given twice
    (`exp diff` and `exp compare` take the same list)."""
    from ..errors import CLIError
    from ..exit_codes import ExitCode

    if not 2 <= len(exp_ids) <= maximum:
        raise CLIError(f"give 2 to {maximum} experiment ids to compare; got "
                       f"{len(exp_ids)}", ExitCode.USAGE)
    twice = sorted({i for i in exp_ids if exp_ids.count(i) > 1})
    if twice:
        raise CLIError(f"experiment {', '.join(map(str, twice))} is given more than once; "
                       "give each id once", ExitCode.USAGE)


def require_ids(exp_ids: tuple[int, ...]) -> None:
    """Refuse an empty id list (a usage error naming the way to find ids): `exp get` and
    `exp describe` take one or more ids."""
    from ..errors import CLIError
    from ..exit_codes import ExitCode

    if not exp_ids:
        raise CLIError("give one or more experiment ids (e.g. 12 or exp/12; see `falcon exp "
                       "list`)", ExitCode.USAGE)
