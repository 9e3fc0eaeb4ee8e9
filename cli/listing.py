"""What every list command shares, as kubectl has it: `-o table|wide|name|json|yaml|
jsonpath=TEMPLATE`, `--no-headers` and `--sort-by`.

Only click is imported at module level; jsonpath-ng, rich and yaml are imported when used.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import rich_click as click

from .errors import CLIError
from .exit_codes import ExitCode

LIST_FORMATS = ("table", "wide", "name", "json", "yaml")
GET_FORMATS = ("table", "wide", "name", "json", "yaml")


class ListOutputType(click.ParamType):
    """`table`, `wide`, `name`, `json`, `yaml` or `jsonpath=TEMPLATE` (checked here, so a bad
    template is a usage error before any request)."""

    name = "FORMAT"
    formats = LIST_FORMATS
    example = "-o jsonpath='{.items[*].id}'"

    def convert(self, value, param, ctx):
        text = str(value)
        if text in self.formats:
            return text
        if text.startswith("jsonpath="):
            try:
                parse_template(text[len("jsonpath="):])
            except ValueError as exc:
                self.fail(f"{text!r}: {exc}", param, ctx)
            return text
        self.fail(f"{text!r} is not one of {', '.join(self.formats)} or jsonpath=TEMPLATE "
                  f"(e.g. {self.example})", param, ctx)


class GetOutputType(ListOutputType):
    """The `-o` of a command that shows one object: `table`, `name`, `json`, `yaml` or
    `jsonpath=TEMPLATE` (applied to the object, as `kubectl get pod NAME -o jsonpath`)."""

    formats = GET_FORMATS
    example = "-o jsonpath='{.status}'"


class ObjectOutputType(GetOutputType):
    """The `-o` of `exp create` and `exp describe`: as `GetOutputType` but without `wide` (as
    `kubectl create`; a description is no list row)."""

    formats = tuple(f for f in GET_FORMATS if f != "wide")


def object_output_option(func):
    """Add `-o/--output table|name|json|yaml|jsonpath=TEMPLATE` to a command that shows the
    objects it created or describes (`emit_object`, `emit_objects`)."""
    return click.option(
        "-o", "--output", "output", type=ObjectOutputType(), default="table",
        show_default=True,
        help="table for people; name: KIND/ID; json or yaml for scripts (stdout only); "
             "jsonpath=TEMPLATE: kubectl's template applied to the -o json object, e.g. "
             "-o jsonpath='{.status}'.")(func)


def get_output_option(func):
    """Add `-o/--output table|wide|name|json|yaml|jsonpath=TEMPLATE` to a command that shows one
    object (`emit_object`): `wide` is the object's row with every column of the wide list, as
    `kubectl get KIND NAME -o wide` (the command draws it)."""
    return click.option(
        "-o", "--output", "output", type=GetOutputType(), default="table", show_default=True,
        help="table for people; wide: the object's row of the wide list (every column, "
             "nothing elided); name: KIND/ID; json or yaml for scripts (stdout only); "
             "jsonpath=TEMPLATE: kubectl's template applied to the -o json object, e.g. "
             "-o jsonpath='{.status}'.")(func)


def emit_object(env, obj: Any, output: str, *, kind: str, id_key: str,
                table: Callable[..., None]) -> None:
    """Write one object in a `GetOutputType` format: `name` prints `KIND/ID`, `jsonpath=`
    exactly the template's text; the others as `output.emit`."""
    from .output import emit

    if output == "name":
        env.print_out(f"{kind}/{obj.get(id_key)}")
    elif output.startswith("jsonpath="):
        env.out.write(render_template(output[len("jsonpath="):], obj))
        env.out.flush()
    else:
        emit(env, obj, output, table)


def emit_objects(env, objs: list[dict], output: str, table, *, several: bool,
                 kind: str) -> None:
    """Write the objects of a command given one or several ids: one id writes its object
    (`listing.emit_object`), several a list as a list command writes it (JSON/YAML array, one
    `KIND/ID` per line, a template reading them as `.items`) or one table after the other."""
    from . import output as out

    if not several:
        for obj in objs:
            emit_object(env, obj, output, kind=kind, id_key="id", table=table)
    elif not _emit_rows(env, objs, output, kind=kind, id_key="id"):
        for index, obj in enumerate(objs):
            if index:
                env.print_out("")
            out.emit(env, obj, output, table)


def list_options(func):
    """Add `-o/--output`, `--no-headers` and `--sort-by` to a list command."""
    func = click.option(
        "--sort-by", "sort_by", metavar="FIELD",
        help="Sort the rows by this field of the -o json rows (kubectl's JSONPath form, e.g. "
             "'.name' or '{.created_at}'); rows without it come last.")(func)
    func = click.option("--no-headers", "no_headers", is_flag=True,
                        help="Print tables without their header line.")(func)
    return click.option(
        "-o", "--output", "output", type=ListOutputType(), default="table", show_default=True,
        help="table for people (wide: every column, nothing elided); name: KIND/ID per line; "
             "json or yaml for scripts (every matching row unless --limit); "
             "jsonpath=TEMPLATE: kubectl's template, the rows under .items as kubectl's "
             "list, e.g. -o jsonpath='{.items[*].id}' ({[*].id} also reads the rows); "
             "{range} is not supported.")(func)


def _expression(text: str):
    from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
    from jsonpath_ng.ext import parse

    text = text.strip()
    if not text.startswith("$"):
        text = "$" + text if text.startswith((".", "[")) else "$." + text
    try:
        return parse(text)
    except (JsonPathLexerError, JsonPathParserError, Exception) as exc:  # noqa: B014
        raise ValueError(f"{text!r} is not a JSONPath expression ({exc})") from None


class _Expr:
    """One `{...}` expression of a template: its text and its parsed JSONPath."""

    def __init__(self, text: str):
        self.text = text
        self.parsed = _expression(text)
        bare = text.strip().lstrip("$")
        # `.items...`: the list's rows, as kubectl's List object holds them.
        self.on_items = bare.lstrip(".").startswith("items") and (
            bare.lstrip(".")[len("items"):][:1] in ("", ".", "["))

    def find(self, data: Any, items: list[Any] | None) -> list[Any]:
        root = {"items": items} if items is not None and self.on_items else data
        return [match.value for match in self.parsed.find(root)]


UNSUPPORTED = ("range", "end", "if", "else")  # kubectl template actions jsonpath-ng has not


def parse_template(template: str) -> list[Any]:
    """Split a kubectl JSONPath template into literal text and parsed expressions.

    `{...}` holds an expression (`{.name}`, `{.items[*].id}`) or a quoted literal (`{"\\n"}`);
    text outside braces is printed as it is. kubectl's `{range}...{end}` is refused rather than
    read as a field named `range`. Raises ValueError naming the bad part.
    """
    parts: list[Any] = []
    rest = template
    while rest:
        start = rest.find("{")
        if start < 0:
            parts.append(rest)
            break
        if start:
            parts.append(rest[:start])
        end = rest.find("}", start)
        if end < 0:
            raise ValueError("a '{' is never closed")
        inner = rest[start + 1:end].strip()
        if len(inner) >= 2 and inner[0] == inner[-1] == '"':
            parts.append(json.loads(inner))
        elif not inner:
            raise ValueError("'{}' holds no expression")
        elif inner.split()[0] in UNSUPPORTED:
            raise ValueError(f"'{{{inner}}}': {{{inner.split()[0]}}} is not supported (no "
                             "{range}...{end}); print a field of every row with "
                             "{.items[*].field}, or use -o json with jq")
        else:
            parts.append(_Expr(inner))
        rest = rest[end + 1:]
    if not parts:
        raise ValueError("the template is empty")
    return parts


def render_template(template: str, data: Any, *, items: list[Any] | None = None) -> str:
    """Return `template` applied to `data`: several matches are joined by spaces (kubectl).

    Args:
        template: the text after `jsonpath=`.
        data: what an expression reads (a list's rows, or one object).
        items: a list's rows: an expression starting `.items` reads them as kubectl's List
            object holds them (`{.items[*].id}`); others read `data` (`{[*].id}`).
    """
    out = []
    for part in parse_template(template):
        if isinstance(part, str):
            out.append(part)
            continue
        values = part.find(data, items)
        out.append(" ".join(value if isinstance(value, str) else json.dumps(value,
                                                                            ensure_ascii=False)
                            for value in values))
    return "".join(out)


def sort_rows(rows: list[dict[str, Any]], sort_by: str | None) -> list[dict[str, Any]]:
    """Return `rows` sorted by the `--sort-by` field; rows without it last, numbers before
    text.

    Raises:
        CLIError(USAGE): the field is not a JSONPath, or no row has it (an empty list is
            returned as it is).
    """
    if not sort_by:
        return rows
    field = sort_by.strip()
    if field.startswith("{") and field.endswith("}"):
        field = field[1:-1]
    try:
        expression = _expression(field)
    except ValueError as exc:
        raise CLIError(f"--sort-by: {exc}", ExitCode.USAGE) from None

    found_any = False

    def key(row: dict[str, Any]):
        nonlocal found_any
        found = [match.value for match in expression.find(row)]
        found_any = found_any or bool(found)
        if not found or found[0] is None:
            return (2, 0, "")
        value = found[0]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return (0, value, "")
        return (1, 0, value if isinstance(value, str) else json.dumps(value, sort_keys=True))

    ordered = sorted(rows, key=key)
    if rows and not found_any:
        # kubectl: a field no row has is a typo, not an order ("couldn't find any field").
        fields = ", ".join(f".{name}" for name in rows[0])
        raise CLIError(f"--sort-by {sort_by!r}: no row has this field; the rows' fields are "
                       f"{fields}", ExitCode.USAGE)
    return ordered


def emit_list(env, rows: list[dict[str, Any]], *, output: str, kind: str, id_key: str,
              no_headers: bool, sort_by: str | None,
              table: Callable[..., None]) -> None:
    """Write a list in the chosen `-o` format.

    Args:
        env: the run's `Environment`.
        rows: the list's rows as the API returns them.
        output: a `ListOutputType` value.
        kind: the `-o name` prefix, e.g. `exp` (`exp/42`).
        id_key: the field `-o name` prints, e.g. `id`.
        no_headers: leave out the header line of a table.
        sort_by: the `--sort-by` field, or None for the server's order.
        table: draws the rows: `table(console, rows, wide=..., headers=..., fit=...)`, on
            `env.table_console()` (plain text where no colour shows); `fit` is True only on a
            terminal: into a pipe or a file no cell is elided, as kubectl's.

    No rows in a table or `-o name` write nothing to stdout and say so on stderr
    (`output.EMPTY`), as kubectl's "No resources found"; json and yaml write an empty list.
    """
    from .output import EMPTY

    rows = sort_rows(rows, sort_by)
    if not rows and (output in ("table", "wide", "name")):
        env.print_err(EMPTY[kind])
        return
    if not _emit_rows(env, rows, output, kind=kind, id_key=id_key):
        from .env import is_terminal

        table(env.table_console(), rows, wide=output == "wide", headers=not no_headers,
              fit=is_terminal(env.out))


def _emit_rows(env, rows: list[dict[str, Any]], output: str, *, kind: str,
               id_key: str) -> bool:
    """Write `rows` as a list for scripts (`-o name`, `jsonpath=`, `json`, `yaml`); return
    False, writing nothing, when `output` is a table for people."""
    if output == "name":
        if rows:
            env.print_out("\n".join(f"{kind}/{row.get(id_key)}" for row in rows))
    elif output.startswith("jsonpath="):
        # Exactly the template's text, as kubectl: add `{"\n"}` for a final newline.
        env.out.write(render_template(output[len("jsonpath="):], rows, items=rows))
        env.out.flush()
    elif output in ("json", "yaml"):
        from .output import emit

        emit(env, rows, output, None)
    else:
        return False
    return True
