"""Options shared by several commands, defined once."""
from __future__ import annotations

import math
import re

import rich_click as click

from .env import Environment
from .servers import resolve_server

OUTPUT_FORMATS = ("table", "json", "yaml")
MAX_ID = 2**63 - 1  # ids are the database's 64-bit primary keys
# An analysis id is a string key, a DNS-1123 label (`analysis.models.ANALYSIS_ID_MAX`; the CLI
# does not import Django, a test keeps the two equal).
ANALYSIS_ID_MAX = 40
ANALYSIS_ID_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
ANALYSIS_ID_EXAMPLE = "an-127d556979606b76"

pass_env = click.make_pass_decorator(Environment, ensure=True)
"""Pass the run's `Environment` (created from the process when the caller gave none)."""


def server_option(func):
    """Add `--server URL` (env `FALCON_SERVER`, then the current context, default
    http://127.0.0.1:8000; see `resolve_server`)."""
    return click.option(
        "--server", envvar="FALCON_SERVER", default=None, show_envvar=True, metavar="URL",
        callback=resolve_server,
        help="The Falcon API server (default: `falcon --server`, then FALCON_SERVER, then the "
             "current context, then http://127.0.0.1:8000). Tokens are cached per server and "
             "sent only to it.",
    )(func)


class FiniteFloat(click.FloatRange):
    """A number of seconds (or any float option): as click's `FloatRange`, and NaN and the
    infinities refused as a usage error naming the option.

    click's float takes `nan`, `inf` and `-inf`, and a NaN passes every range check (each
    comparison is False): `--interval nan` then failed as "unexpected ValueError" in
    `time.sleep`, and `--timeout nan` never ran out. The one type of every float option.
    """

    def convert(self, value, param, ctx):
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number (NaN and infinities are refused).",
                      param, ctx)
        return super().convert(number, param, ctx)


def output_option(func):
    """Add `-o/--output table|json|yaml` (default table)."""
    return click.option(
        "-o", "--output", "output", type=click.Choice(OUTPUT_FORMATS), default="table",
        show_default=True, help="table for people; json or yaml for scripts (stdout only).",
    )(func)


def strip_kind(text: str, kind: str | None) -> str:
    """Return `text` without a leading `KIND/` (`exp/42` -> `42`): what `-o name` prints is
    taken back wherever an id is, as kubectl takes `pod/NAME` (`falcon exp list -o name |
    xargs falcon exp delete --yes`)."""
    if kind and text.startswith(f"{kind}/"):
        return text[len(kind) + 1:]
    return text


class IdType(click.ParamType):
    """A database id: ASCII digits, from 1 to `MAX_ID` (after an optional `KIND/`, as `-o name`
    prints it), checked before any request.

    click's `int` would take `-1`, `+5`, `1_000` or non-ASCII digits, and the server would only
    answer that no such endpoint exists.

    Args:
        entity: what the id names in the message, e.g. `an experiment`.
        lister: the command that lists the ids, e.g. `falcon exp list`.
    """

    name = "ID"

    def __init__(self, entity: str, lister: str, kind: str | None = None):
        self.entity = entity
        self.lister = lister
        self.kind = kind

    def convert(self, value, param, ctx):
        text = strip_kind(str(value), self.kind)
        if (not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_ID))
                or not 1 <= int(text) <= MAX_ID):
            shown = text if len(text) <= 60 else text[:57] + "..."
            self.fail(f"{shown!r} is not {self.entity} id: ids are whole numbers from 1 to "
                      f"{MAX_ID} (see `{self.lister}`)", param, ctx)
        return int(text)


class ExpIdType(IdType):
    """An experiment id (`IdType`); the shell completes it from `falcon exp list`."""

    def __init__(self):
        super().__init__("an experiment", "falcon exp list", kind="exp")

    def shell_complete(self, ctx, param, incomplete):
        from .completers import complete_ids

        return complete_ids(ctx, "/api/v1/exps", incomplete, max_id=MAX_ID)


class AnalysisIdType(click.ParamType):
    """An analysis id: a DNS-1123 label of at most `ANALYSIS_ID_MAX` characters (ASCII
    lower-case letters, digits and `-`, starting and ending with a letter or digit), e.g.
    `an-127d556979606b76`, or `analysis/ID` as `-o name` prints it. Checked before any request;
    converted to the id itself.

    The server answers 404 for a path that is no analysis id, so a typo would only read as "no
    such analysis"; the format names what is wrong.
    """

    name = "ID"

    def convert(self, value, param, ctx):
        text = strip_kind(str(value), "analysis")
        if not (text.isascii() and len(text) <= ANALYSIS_ID_MAX
                and ANALYSIS_ID_RE.fullmatch(text)):
            shown = text if len(text) <= 60 else text[:57] + "..."
            self.fail(f"{shown!r} is not an analysis id: ids are lower-case letters, digits "
                      f"and '-' (not first or last), at most {ANALYSIS_ID_MAX} characters, "
                      f"e.g. {ANALYSIS_ID_EXAMPLE} (see `falcon analysis list`)", param, ctx)
        return text

    def shell_complete(self, ctx, param, incomplete):
        from .completers import complete_ids

        return complete_ids(ctx, "/api/v1/analyses", incomplete)


def yes_option(func):
    """Add `--yes/-y`: delete without asking (both `delete` commands ask first otherwise)."""
    return click.option("--yes", "-y", is_flag=True,
                        help="Do not ask for confirmation (needed without a terminal).")(func)


def confirm_delete(env: Environment, question: str, *, what: str,
                   listing: list[str] | None = None) -> None:
    """Ask `question` on stderr before a delete; refuse without a terminal (docs/decisions.md,
    Deleting asks first).

    Both `exp delete` and `analysis delete` ask, as rm -i would: a delete cannot be undone, and
    unlike kubectl there is no controller to recreate what was deleted. Without a terminal
    nothing can answer, so the command stops (exit 2) instead of reading a script's stdin.

    Args:
        env: the run's environment (`interactive` says whether a person can answer).
        question: the yes/no question, e.g. `Delete experiment 4 (a, Failed)?`.
        what: what is deleted, for the refusal, e.g. `experiment 4`.
        listing: lines naming each thing deleted, printed on stderr above the question.

    Raises:
        click.UsageError: no terminal to answer.
        CLIError(ERROR): the answer was no (or end of input, Ctrl-C).
    """
    from .errors import CLIError
    from .exit_codes import ExitCode
    from .visible import visible

    if not env.interactive():
        raise click.UsageError(f"deleting {what} cannot be undone; without a terminal to "
                               "confirm it, pass --yes")
    for line in listing or ():
        env.print_err(visible(line))
    try:
        confirmed = click.confirm(visible(question), default=False, err=True)
    except click.exceptions.Abort:  # end of input or Ctrl-C at the prompt
        env.print_err("")
        confirmed = False
    if not confirmed:
        raise CLIError(f"{what} was not deleted (pass --yes to delete without a prompt)",
                       ExitCode.ERROR)


def exp_id_argument(func):
    """Add the `ID` argument: an experiment id (`ExpIdType`)."""
    return click.argument("exp_id", type=ExpIdType(), metavar="ID")(func)


def exp_ids_argument(func):
    """Add `ID...`: one or more experiment ids (`ExpIdType`), for the commands that act on
    each (`exp get`, `abort`, `delete`)."""
    return click.argument("exp_ids", type=ExpIdType(), metavar="ID...", nargs=-1)(func)


def analysis_id_argument(func):
    """Add the `ID` argument: an analysis id (`AnalysisIdType`)."""
    return click.argument("analysis_id", type=AnalysisIdType(), metavar="ID")(func)


def analysis_ids_argument(func):
    """Add `ID...`: one or more analysis ids (`AnalysisIdType`), for the commands that act on
    each (`analysis get`, `cancel`, `delete`)."""
    return click.argument("analysis_ids", type=AnalysisIdType(), metavar="ID...",
                          nargs=-1)(func)


HELP_SHOWN = "falcon.help_shown"


class RecordsHelp:
    """Mixed into every Falcon command class: a help page printed by the help option is kept in
    the help cache (`cli.helpcache`), so the same `--help` next time prints without drawing."""

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        option = super().get_help_option(ctx)
        if option is not None and not getattr(option, "_falcon_records", False):
            show = option.callback

            def callback(ctx: click.Context, param: click.Parameter, value: bool) -> None:
                if value and not ctx.resilient_parsing:
                    ctx.meta[HELP_SHOWN] = True
                return show(ctx, param, value)

            option.callback = callback
            option._falcon_records = True
        return option

    def get_help(self, ctx: click.Context) -> str:
        page = super().get_help(ctx)
        if ctx.meta.get(HELP_SHOWN):
            from . import helpcache

            helpcache.record(page + "\n")  # as rich-click prints it
        return page


class RefusesRepeats:
    """Mixed into a command or group class: a single-valued option given twice (`--exp 2 --exp
    4`, `falcon --server A --server B`) is a usage error (exit 2) naming the option.

    click keeps the last value silently, so a script that appends an option to a command line
    would change its meaning without a word. Options that repeat on purpose (`multiple=True`,
    `count=True`) and flags (`--wait --wait` means the same) are left alone. A group reads only
    its own options (those before the subcommand).
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            parser = self.make_parser(ctx)
            try:
                _, _, order = parser.parse_args(args=list(args))
            except click.UsageError:
                order = []  # click reports it below, in its own words
            seen: set[str] = set()
            for param in order:
                if not isinstance(param, click.Option) or param.multiple or param.count \
                        or param.is_flag:
                    continue
                if param.name in seen:
                    raise click.UsageError(
                        f"Option '{param.opts[-1]}' is given more than once; give it once "
                        "(it takes one value).", ctx=ctx)
                seen.add(param.name)
        return super().parse_args(ctx, args)


class SingleValueCommand(RefusesRepeats, RecordsHelp, click.RichCommand):
    """A command that refuses a single-valued option given twice (`RefusesRepeats`)."""


class FalconSubGroup(RecordsHelp, click.RichGroup):
    """A command group whose commands refuse a repeated single-valued option
    (`SingleValueCommand`)."""

    command_class = SingleValueCommand
