"""Options shared by several commands, defined once (house style, rule 10)."""
from __future__ import annotations

import rich_click as click

from .env import DEFAULT_SERVER, Environment

OUTPUT_FORMATS = ("table", "json", "yaml")

pass_env = click.make_pass_decorator(Environment, ensure=True)
"""Pass the run's `Environment` (created from the process when the caller gave none)."""


def server_option(func):
    """Add `--server URL` (env `FALCON_SERVER`, default http://127.0.0.1:8000)."""
    return click.option(
        "--server", envvar="FALCON_SERVER", default=DEFAULT_SERVER, show_default=True,
        show_envvar=True, metavar="URL",
        help="The Falcon API server. Tokens are cached per server and sent only to it.",
    )(func)


def output_option(func):
    """Add `-o/--output table|json|yaml` (default table)."""
    return click.option(
        "-o", "--output", "output", type=click.Choice(OUTPUT_FORMATS), default="table",
        show_default=True, help="table for people; json or yaml for scripts (stdout only).",
    )(func)
