"""`falcon exp clone`: a new experiment from an old one, with changes (decisions.md#dec-clone).

The clone happens here, in the CLI: GetExp, edit, CreateExp with `cloned_from`. The server
stores configs verbatim and never edits them, so the round-trip YAML edit of `--set`
(`cli/yaml_set.py`, ruamel.yaml, imported only by this command) lives with the user, and the
new experiment goes through CreateExp's validation and idempotency like any other.
"""
from __future__ import annotations

from typing import Any

import rich_click as click

from ..errors import CLIError
from ..exit_codes import ExitCode
from ..options import exp_id_argument, output_option, pass_env, server_option
from ..visible import visible
from .group import EXPS, exp_group
from .inputs import create_exp, labels_option, read_config_file, read_tasks_file


def clone_body(source: dict[str, Any], *, name: str | None, config: str | None,
               tasks: dict[str, Any] | None, assignments: tuple[str, ...],
               labels: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """Return the CreateExp body of a clone of `source` (a GetExp answer) with the changes.

    Args:
        source: the experiment to copy: its cluster, type, priority, labels, task specs and
            config are kept unless replaced.
        name: the new name (None: the source's).
        config: a whole new config text (None: the source's).
        tasks: a whole new role -> TaskSpec map (None: the source's).
        assignments: `path=value` edits of the config (`cli.yaml_set.set_path`), in order,
            applied after `config`.
        labels: `(key, value)` labels set on top of the source's.

    Raises:
        CLIError(USAGE): an assignment is malformed or cannot be applied (its message names the
            path and the fix).
    """
    text = (source.get("config") or "") if config is None else config
    if assignments:
        from ..yaml_set import SetError, parse_assignment, set_path

        try:
            for assignment in assignments:
                path, raw = parse_assignment(assignment)
                text = set_path(text, path, raw)
        except SetError as exc:
            message = str(exc)
            if config is not None and message.startswith("the config is not YAML"):
                # The whole config was given: the fix is to edit that file, not to give it.
                message = (message.split(", so --set")[0] + " (the --config file), so --set "
                           "cannot edit it; put the change in the file and drop --set")
            raise CLIError(message, ExitCode.USAGE) from None
    return {"name": name or source["name"], "cluster_name": source["cluster_name"],
            "exp_type": source["exp_type"],
            "role_to_task_spec": tasks if tasks is not None else source["role_to_task_spec"],
            "config": text, "priority": source.get("priority", -1),
            "labels": {**(source.get("labels") or {}), **dict(labels)},
            "cloned_from": source["id"]}


@exp_group.command("clone")
@exp_id_argument
@click.option("--name", help="The new experiment's name (default: the same name).")
@click.option("--set", "assignments", multiple=True, metavar="PATH=VALUE",
              help="Change one config value by key path, typed as YAML reads it (repeatable), "
                   "e.g. --set optimizer.lr=0.001 --set layers.0.size=16; every other line of "
                   "the config is kept byte for byte.")
@click.option("--config", "config_file", metavar="FILE",
              help="Use this config instead of the source's (--set applies on top).")
@click.option("--role-to-task-spec", "tasks_file", metavar="FILE",
              help="Use these task specs instead of the source's (YAML, as for create).")
@labels_option
@click.option("--wait", is_flag=True, help="Wait until the new experiment ends.")
@output_option
@server_option
@pass_env
def clone(env, exp_id: int, name: str | None, assignments: tuple[str, ...],
          config_file: str | None, tasks_file: str | None, labels: tuple[tuple[str, str], ...],
          wait: bool, output: str, server: str) -> None:
    """Create a new experiment from experiment ID with changes; it records `cloned_from`.

    Safe to retry, as create: one Idempotency-Key per invocation.

    \b
    Examples:
      falcon exp clone 12 --name matmul-002 --set size=1024
      falcon exp clone 12 --config new.yaml --wait
    """
    from .. import output as out
    from ..client import open_client
    from .group import ATTEMPTS, DEFAULT_INTERVAL
    from .lifecycle import wait_for

    config = read_config_file(config_file) if config_file else None
    tasks = read_tasks_file(tasks_file) if tasks_file else None
    with open_client(env, server) as client:
        source = client.request("GET", f"{EXPS}/{exp_id}", attempts=ATTEMPTS)
        body = clone_body(source, name=name, config=config, tasks=tasks,
                          assignments=assignments, labels=labels)
        exp = create_exp(env, client, body)
        if not wait:
            out.emit(env, exp, output, out.exp_detail)
            return
        if output == "table":
            env.print_out(visible(f"created experiment {exp['id']} ({exp['name']}) from "
                                  f"experiment {exp_id}"))
        wait_for(env, client, exp["id"], interval=DEFAULT_INTERVAL, timeout=None, output=output)
