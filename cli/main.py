"""The `falcon` command: the top-level group and the console-script entry point.

Startup matters (`falcon --help` in well under 0.3 s): this module and the command modules import
only click/rich-click; httpx, rich, yaml and pyjwt are imported inside the commands that use them
(`bench/cli_startup.py` measures it).
"""
from __future__ import annotations

import rich_click as click

from .auth import auth_group
from .env import Environment
from .errors import CLIError
from .exit_codes import ExitCode
from .exp import exp_group

VERSION = "0.1.0"


class FalconGroup(click.RichGroup):
    """The root group: turns a `CLIError` from any command into one stderr line and its code.

    Unexpected exceptions are reported the same way (set FALCON_DEBUG=1 for the traceback), so a
    user never sees a traceback for a server's answer.
    """

    def invoke(self, ctx: click.Context):
        """Invoke the chosen command and map its `CLIError` to `error: ...` and an exit code."""
        try:
            return super().invoke(ctx)
        except CLIError as exc:
            _env(ctx).print_err(f"error: {exc.message}")
            ctx.exit(int(exc.code))
        except (click.exceptions.ClickException, click.exceptions.Exit,
                click.exceptions.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug: say so in one line rather than a traceback
            env = _env(ctx)
            if env.debug:
                raise
            env.print_err(f"error: unexpected {type(exc).__name__}: {exc} "
                          "(set FALCON_DEBUG=1 to see the traceback)")
            ctx.exit(int(ExitCode.ERROR))


def _env(ctx: click.Context) -> Environment:
    env = ctx.find_object(Environment)
    return env if env is not None else Environment()


@click.group(cls=FalconGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, "--version", prog_name="falcon")
@click.pass_context
def falcon(ctx: click.Context) -> None:
    """Falcon: run ML experiments on a cluster and track them.

    Log in once with `falcon auth login`, then e.g. `falcon exp create --name ... --cluster ...
    --type ... --role-to-task-spec tasks.yaml --config config.yaml`.
    Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict, 5 not logged in, 6 experiment
    failed, 7 timeout, 8 invalid input, 9 server unavailable, 10 forbidden, 130 interrupted
    (Ctrl-C).
    """
    ctx.ensure_object(Environment)


falcon.add_command(auth_group)
falcon.add_command(exp_group)


def main(argv: list[str] | None = None) -> None:
    """Run `falcon` with `argv` (default: `sys.argv[1:]`); exits the process with its code."""
    falcon.main(args=argv, prog_name="falcon")


if __name__ == "__main__":
    main()
