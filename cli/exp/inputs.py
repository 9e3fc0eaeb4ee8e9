"""What `exp create` and `exp clone` read before sending anything: the tasks file, the config
file and `--label` values, each checked locally with an error that names the file or value."""
from __future__ import annotations

from typing import Any

import rich_click as click

from core.domain.statuses import CONFIG_ENV

from .group import ATTEMPTS, CONFIG_MAX_BYTES, EXPS, IDEMPOTENCY_HEADER, TASKS_MAX_BYTES



class LabelArg(click.ParamType):
    """A `--label` of create: `key=value`, checked as a Kubernetes label before any request."""

    name = "KEY=VALUE"

    def convert(self, value, param, ctx):
        from experiments.labels import key_problem, value_problem

        if "=" not in value:
            self.fail(f"{value!r} is not key=value (e.g. --label baseline=true)", param, ctx)
        key, _, label_value = value.partition("=")
        problem = key_problem(key) or value_problem(key, label_value)
        if problem:
            self.fail(problem, param, ctx)
        return key, label_value


class SelectorArg(click.ParamType):
    """A `--label` of list: `key=value` or `key` (the label is set), or several of them
    separated by commas (all must hold), as kubectl's -l; sent as one comma list."""

    name = "KEY[=VALUE][,...]"

    def convert(self, value, param, ctx):
        from experiments.labels import parse_selectors

        try:
            return ",".join(str(selector) for selector in parse_selectors(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def selector_option(func):
    """Add `--label/-l KEY[=VALUE]` (repeatable; all must match): the label selector of a
    command that lists or acts on the matching experiments."""
    return click.option("--label", "-l", "selectors", multiple=True, type=SelectorArg(),
                        help="Only experiments with this label: key=value, or key for any "
                             "value; several separated by commas or repeated (all must "
                             "match), e.g. -l team=infra,batch=1.")(func)


def labels_option(func):
    """Add `--label KEY=VALUE` (repeatable) to a command that creates an experiment."""
    return click.option("--label", "labels", multiple=True, type=LabelArg(),
                        help="A label key=value (repeatable), e.g. --label baseline=true; "
                             "Kubernetes label syntax.")(func)


def create_exp(env, client, body: dict[str, Any]) -> dict[str, Any]:
    """POST a CreateExp `body` with a fresh `Idempotency-Key` (uuid4), retried when the server
    cannot be reached or the connection drops: every try carries the same key, so the server
    makes at most one experiment for this invocation.

    Raises:
        CLIError: as `FalconClient.request`.
    """
    import uuid

    return client.request("POST", EXPS, json=body, attempts=ATTEMPTS,
                          headers={IDEMPOTENCY_HEADER: str(uuid.uuid4())})


def read_tasks_file(path: str) -> dict[str, dict[str, Any]]:
    """Read the `--role-to-task-spec` file: YAML mapping each role to its TaskSpec.

    The file is read by YAML 1.2 core-schema rules, names and env values as written, without
    anchors or aliases (`cli/tasks_yaml.py`), and at most `TASKS_MAX_BYTES`. Only the shape is
    checked here (a non-empty mapping of role name -> mapping, decimal `replica` and
    `device_count`, finite numbers); the fields of each TaskSpec are checked by the server, which
    names the field that is wrong.

    Args:
        path: the YAML file, e.g. `./tasks.yaml` with `main: {command: ..., replica: 1}`.

    Returns:
        `{role: {field: value}}`, ready to send as JSON.

    Raises:
        CLIError(USAGE): the file is missing, not a regular file, over `TASKS_MAX_BYTES`, not
            UTF-8, not YAML, or not that shape.
    """
    from ..files import decode_utf8, read_limited
    from ..tasks_yaml import parse_tasks

    what = "tasks file"
    data = read_limited(path, what, TASKS_MAX_BYTES, "a tasks file may hold")
    return parse_tasks(decode_utf8(data, path, what), path, what)


def read_config_file(path: str) -> str:
    """Read the `--config` file as UTF-8 text, byte for byte (no newline translation).

    The text is sent unparsed, stored verbatim and injected as CUSTOM_CONFIG_KEY
    (decisions.md#dec-config).

    Raises:
        CLIError(USAGE): the file is missing, not a regular file, over `CONFIG_MAX_BYTES`,
            unreadable or not UTF-8.
    """
    from ..files import decode_utf8, read_limited

    what = "config file"
    data = read_limited(path, what, CONFIG_MAX_BYTES,
                        f"the server accepts a config (given to every task as {CONFIG_ENV}, "
                        "which Linux caps with its name at 128 KiB) of")
    return decode_utf8(data, path, what)
