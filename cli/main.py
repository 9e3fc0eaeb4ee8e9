"""The `falcon` command: the top-level group and the console-script entry point.

Startup matters (`falcon --help` in well under 0.3 s): this module and the command modules import
only click/rich-click; urllib3, rich, yaml and pyjwt are imported inside the commands that use them
(`bench/cli_startup.py` measures it).
"""
from __future__ import annotations

import os
import sys

import importlib

import rich_click as click

from .env import Environment, columns_from
from .errors import CLIError
from .exit_codes import ExitCode
from .options import RecordsHelp, RefusesRepeats
from .start import escape_unencodable, silence_closed_streams, whole_writes

VERSION = "0.1.0"


def _click_version_from_dist_info() -> None:
    """Set `click.__version__` from the name of click's installed `.dist-info` directory.

    rich-click reads `click.__version__` before it draws any help or usage error, and click 8.2+
    computes that (deprecated) attribute with `importlib.metadata.version("click")`, which
    imports importlib.metadata and scans every distribution on `sys.path`: ~0.03 s of CPU, a
    third of `falcon --help`'s budget (docs/decisions.md#dec-cli-startup). The directory's name
    (`click-8.5.1.dist-info`, the wheel's normalized name) holds the same version; when there is
    not exactly one (a source checkout, an egg), click's own lookup is left in place.
    """
    import click as plain_click

    if "__version__" in vars(plain_click):
        return
    site = os.path.dirname(os.path.dirname(plain_click.__file__))
    try:
        names = [name for name in os.listdir(site)
                 if name.startswith("click-") and name.endswith(".dist-info")]
    except OSError:
        return
    if len(names) == 1:
        plain_click.__version__ = names[0][len("click-"):-len(".dist-info")]


_click_version_from_dist_info()

# The command groups, imported only when one is run (or its own help is asked for): `falcon
# --help` shows these one-line summaries without importing a command module (a test keeps each
# equal to its command's own short help). name -> (module, attribute, summary)
LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "analysis": ("cli.analysis", "analysis_group",
                 "Run plugins or commands over an experiment's artifact, and read their results."),
    "auth": ("cli.auth", "auth_group", "Log in to a Falcon server, show the session, log out."),
    "completion": ("cli.completion", "completion_command",
                   "Print the shell completion script for bash, zsh or fish."),
    "config": ("cli.contexts", "config_group",
               "Named contexts: which Falcon server commands talk to (as kubectl config)."),
    "exp": ("cli.exp", "exp_group", "Create, inspect, abort, delete and wait for experiments."),
    "plugins": ("cli.analysis", "plugins_group",
                "The analysis plugin catalog: what `falcon analysis create --plugin` can run."),
}


def load_command(name: str) -> click.Command:
    """Import and return the top-level command `name` (a key of `LAZY_COMMANDS`)."""
    module, attribute, _ = LAZY_COMMANDS[name]
    return getattr(importlib.import_module(module), attribute)


class FalconGroup(RefusesRepeats, RecordsHelp, click.RichGroup):
    """The root group (its `--server` given twice is a usage error, `RefusesRepeats`): turns a `CLIError` from any command into one stderr line and its code.

    Unexpected exceptions are reported the same way (set FALCON_DEBUG=1 for the traceback), so a
    user never sees a traceback for a server's answer. Its commands are imported lazily
    (`LAZY_COMMANDS`, the pattern of click's "lazily loading subcommands" docs).
    """

    _summarising = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(LAZY_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in LAZY_COMMANDS:
            return None
        if self._summarising:  # the root's help lists the summaries only
            return click.RichCommand(cmd_name, help=LAZY_COMMANDS[cmd_name][2])
        return load_command(cmd_name)

    def format_help(self, ctx, formatter) -> None:
        self._summarising = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._summarising = False

    def make_context(self, info_name, args, parent=None, **extra):
        """Parse the command line (`--help` and `--version` print here): a closed pipe is quiet.

        A `COLUMNS` that is not a positive integer gives the help and usage errors 80 columns
        (rich would take `0` literally and print nothing).
        """
        if parent is None and extra.get("terminal_width") is None:
            env = extra.get("obj")
            environ = env.environ if isinstance(env, Environment) else os.environ
            width = columns_from(environ)
            if width is not None:
                extra["terminal_width"] = width
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except BrokenPipeError:
            raise _output_closed() from None

    def invoke(self, ctx: click.Context):
        """Invoke the chosen command and map its `CLIError` to `error: ...` and an exit code.

        A reader that closed stdout or stderr (`falcon ... | head -1`) ends the command quietly
        with exit code 141 (`ExitCode.OUTPUT_CLOSED`), even while an error is being reported.
        """
        try:
            return self._invoke(ctx)
        except BrokenPipeError:
            raise _output_closed() from None

    def _invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise
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


def _output_closed() -> click.exceptions.Exit:
    """The exit of a command whose output pipe was closed: quiet, code 141 (128 + SIGPIPE)."""
    silence_closed_streams()
    return click.exceptions.Exit(int(ExitCode.OUTPUT_CLOSED))


def _env(ctx: click.Context) -> Environment:
    env = ctx.find_object(Environment)
    return env if env is not None else Environment()


@click.group(cls=FalconGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, "--version", prog_name="falcon")
@click.option("--server", "server", metavar="URL", default=None,
              help="The Falcon API server for every command (as a subcommand's own --server). "
                   "Precedence: a subcommand's --server, this flag, env FALCON_SERVER, the "
                   "current context (`falcon config use-context`), http://127.0.0.1:8000.")
@click.pass_context
def falcon(ctx: click.Context, server: str | None) -> None:
    """Falcon: run ML experiments on a cluster and track them.

    Log in once with `falcon auth login`, then e.g. `falcon exp create --name ... --cluster ...
    --type ... --role-to-task-spec tasks.yaml --config config.yaml`.
    Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict, 5 not logged in, 6 experiment
    failed, 7 timeout, 8 invalid input, 9 server unavailable, 10 forbidden, 11 analysis failed
    or cancelled, 12 `exp diff` failed (its 1 means they differ), 13 `exp compare --fail-on`
    gate failed, 130 interrupted (Ctrl-C; `exp list --watch` ends with 0 on Ctrl-C, as kubectl
    get -w), 141 output closed (e.g. `| head`; the command stopped quietly).

    \b
    Examples:
      falcon auth login --email you@example.com
      falcon exp list --status Running
      falcon --server https://falcon.example.com exp get 12
      falcon config use-context prod
    """
    ctx.ensure_object(Environment)


def main(argv: list[str] | None = None) -> None:
    """Run `falcon` with `argv` (default: `sys.argv[1:]`); exits the process with its code.

    A stdout or stderr whose encoding cannot write a character (`PYTHONIOENCODING=latin-1`,
    `LC_ALL=C`) writes it as a backslash escape instead of failing the command; a write into a
    pipe is never taken as done before every byte is written (`cli.start.WholeWrites`).
    """
    whole_writes()
    escape_unencodable()
    # rich reads COLUMNS and LINES itself (e.g. for a usage error) and int() of 4300+ digits
    # raises: keep only what `columns_from` accepts.
    for name in ("COLUMNS", "LINES"):
        if os.environ.get(name, "").strip():
            os.environ[name] = str(columns_from({"COLUMNS": os.environ[name]}))
    try:
        falcon.main(args=argv, prog_name="falcon")
    except BrokenPipeError:  # while click reported a usage error on a closed stderr
        silence_closed_streams()
        sys.exit(int(ExitCode.OUTPUT_CLOSED))


if __name__ == "__main__":
    main()
