"""Which Falcon server a command talks to: the named contexts file and `resolve_server`.

A context names a Falcon server (`falcon config`, `cli.contexts`). The current one is the server
of every command that gets none from `--server` (a command's or `falcon --server`) or
`FALCON_SERVER`. Tokens stay in `credentials.json`, keyed by server, so switching contexts never
moves a token to another server.

File: `<config dir>/config.json`, written as the credentials file is (0600 from creation,
renamed over the old one, in a 0700 folder):

    {"version": 1, "current-context": "prod",
     "contexts": {"prod": {"server": "https://falcon.example.com"}}}

No click command lives here, so the options (`cli.options`), the completion of ids
(`cli.completers`) and the `config` commands (`cli.contexts`) all read it without importing
one another.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import rich_click as click

from .env import DEFAULT_SERVER, Environment
from .errors import CLIError
from .exit_codes import ExitCode
from .token_cache import write_private_json

FILE_NAME = "config.json"
FORMAT_VERSION = 1
# A context name: what kubectl users type (letters, digits, `-`, `_`, `.`, `@`, `:`, `/`).
NAME_RE = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.@:/]{0,252}")


def path_of(config_dir: Path) -> Path:
    """Return the contexts file of `config_dir`."""
    return Path(config_dir) / FILE_NAME


def load(config_dir: Path) -> dict[str, Any]:
    """Return the contexts file's data (an empty one when there is no file).

    Raises:
        CLIError(USAGE): the file is unreadable, not UTF-8 JSON, or not a contexts file.
    """
    path = path_of(config_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": FORMAT_VERSION, "current-context": None, "contexts": {}}
    except (UnicodeDecodeError, ValueError):
        data = None
    except OSError as exc:
        raise CLIError(f"cannot read {path}: {exc.strerror}", ExitCode.USAGE) from None
    if (not isinstance(data, dict) or not isinstance(data.get("contexts"), dict)
            or not all(isinstance(c, dict) and isinstance(c.get("server"), str)
                       for c in data["contexts"].values())
            or not isinstance(data.get("current-context"), (str, type(None)))):
        raise CLIError(f"{path} is not a Falcon contexts file (JSON written by `falcon config "
                       "set-context`); fix or delete it", ExitCode.USAGE)
    return data


def save(config_dir: Path, data: dict[str, Any]) -> None:
    """Write the contexts file: 0600 from creation, atomically, in a 0700 folder."""
    write_private_json(path_of(Path(config_dir)), data)


def current_server(config_dir: Path) -> str | None:
    """Return the current context's server, or None when no context is chosen."""
    if not path_of(config_dir).exists():
        return None
    data = load(config_dir)
    name = data.get("current-context")
    if name is None:
        return None
    context = data["contexts"].get(name)
    if context is None:
        raise CLIError(f"the current context {name!r} is not defined in "
                       f"{path_of(config_dir)}; run `falcon config get-contexts` and `falcon "
                       "config use-context NAME`", ExitCode.USAGE)
    return context["server"]


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise CLIError(f"{name!r} is not a context name: use letters, digits and - _ . @ : / "
                       "(at most 253, starting with a letter or digit)", ExitCode.USAGE)
    return name



def resolve_server(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    """Choose the server: this command's `--server`, then the root's `falcon --server`, then
    env `FALCON_SERVER`, then the current context's server, then `DEFAULT_SERVER` (kubectl's
    order: flag, environment, kubeconfig)."""
    from click.core import ParameterSource

    if value and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE:
        return value
    root = ctx.find_root().params.get("server")
    if root:
        return root
    if value:  # from FALCON_SERVER
        return value
    env = ctx.find_object(Environment)
    found = current_server((env or Environment()).credentials_dir)
    return found or DEFAULT_SERVER
