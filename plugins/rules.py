"""Rules of an analysis request shared by the API server, the analyzer controller and the CLI
(Django-free, no I/O): the script's size limit and file name, and the resource override.

Each check returns a problem as a sentence naming the fix (None or {} when there is none); the
caller files it under its own field name (`resources.<key>` over HTTP,
`resource_override.<key>` over gRPC).
"""
from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

from .catalog import QUANTITY_RE, RESOURCE_KEYS

SCRIPT_NAME_MAX_CHARS = 255
# The largest user script, in UTF-8 bytes (the analyzer design: at most 1 MB; 1 MiB here): the
# API server, the analyzer's CreateAnalysis and the CLI all read this one.
SCRIPT_MAX_BYTES = 1024 * 1024
# The largest sensible values of an override: beyond them a value is a typo (e.g. 2000 for 2).
MAX_CPU = Decimal(1024)
MAX_MEMORY = Decimal(16 * 2**40)
MAX_TEXT = {"cpu": "1024 cores", "memory": "16Ti"}
EXAMPLES = {"cpu": "500m or 2", "memory": "512Mi or 4Gi"}
# What the runner keeps in the work folder itself: a script may not take these names.
RESERVED_NAMES = ("input", "output", "output.log")


def script_name_problem(name: object) -> str | None:
    """What is wrong with `name` as the script's file name in the run's work folder, or None.

    A plain file name: a string of at most 255 characters, no '/', no NUL, not "." or "..",
    none of `RESERVED_NAMES`.
    Empty is fine (the script is saved as `script` only).
    """
    if not isinstance(name, str):
        return "must be a string: the script's file name, e.g. run.py."
    if not name:
        return None
    if "\x00" in name:
        return "contains a NUL character; send the script's plain file name, e.g. run.py."
    if "/" in name:
        return (f"must be a plain file name without '/' (got {name[:80]!r}); send its base "
                "name, e.g. run.py.")
    if name in (".", ".."):
        return f"must be a file name, not {name!r}; send e.g. run.py."
    if name in RESERVED_NAMES:
        return (f"{name!r} is a name the run's work folder uses itself ({', '.join(RESERVED_NAMES)});"
                " rename the script file.")
    if len(name) > SCRIPT_NAME_MAX_CHARS:
        return (f"must be at most {SCRIPT_NAME_MAX_CHARS} characters; got {len(name)}. "
                "Rename the script file.")
    return None


def script_problem(script: object) -> str | None:
    """What is wrong with `script` as the analysis' script text, or None (None: no script).

    A string with no NUL character of at most `SCRIPT_MAX_BYTES` UTF-8 bytes.
    """
    if script is None:
        return None
    if not isinstance(script, str):
        return "must be a string (the script's text)."
    if "\x00" in script:
        return "contains a NUL character; send a text script."
    size = len(script.encode("utf-8", "surrogatepass"))
    if size > SCRIPT_MAX_BYTES:
        return (f"is {size} bytes in UTF-8; the limit is {SCRIPT_MAX_BYTES} bytes (1 MiB). "
                "Store a larger input as an artifact and read it from the script.")
    return None


def lone_script_name_problem(script_name: object, script: object) -> str | None:
    """A script file name sent without a script is refused, not ignored."""
    if script_name and not script:
        return ("names the script's file, but no script was sent; send the script too, or "
                "leave script_name out.")
    return None


def plugin_or_command_problem(plugin_name: object, command: object) -> str | None:
    """An analysis runs a catalog plugin or a command: one of them must not be blank."""
    if not str(plugin_name or "").strip() and not str(command or "").strip():
        return ("a plugin or a command is required: name a catalog plugin (falcon plugins "
                "list) or give a command.")
    return None


def script_with_plugin_problem(plugin_name: object, script: object, *,
                               script_field: str = "script_content",
                               command_field: str = "command",
                               plugin_field: str = "plugin_name") -> str | None:
    """A script goes with a command; a plugin runs its catalog command, so a script with a
    plugin is refused, not ignored. The fields are named as the caller's transport names them.
    """
    if script and str(plugin_name or "").strip():
        return (f"a script goes with a command, and a plugin runs its catalog command; drop "
                f"{script_field}, or send {command_field} instead of {plugin_field}.")
    return None


def _parse(value: str) -> Decimal | None:
    if not QUANTITY_RE.fullmatch(value):
        return None
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def resource_problems(override: Mapping[str, str],
                      defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """The problems of a resource override, by key (cpu_request, cpu_limit, memory_request,
    memory_limit); {} when there is none.

    Args:
        override: the keys the user set (empty values are ignored: the default applies).
        defaults: the plugin's quantities, checked against the override (a request above the
            plugin's limit when only the request is overridden); None or {} for a command.

    A value must be a Kubernetes quantity above 0, at most 1024 cores of CPU or 16Ti of memory,
    and a request may not exceed its limit (the override's or the plugin's). A request over a
    limit is filed under the overridden key (the request when both are overridden).

    Returns:
        `{key: problem}`, each problem a sentence naming the fix.
    """
    problems: dict[str, str] = {}
    values: dict[str, Decimal] = {}
    given = {key: value for key, value in override.items() if value}
    for key, value in given.items():
        kind = key.split("_", 1)[0]
        quantity = _parse(value)
        if quantity is None:
            problems[key] = (f"{value[:40]!r} is not a Kubernetes quantity; send e.g. "
                             f"{EXAMPLES.get(kind, '500m, 2, 512Mi')}.")
        elif quantity <= 0:
            problems[key] = (f"must be above 0 (got {value}); send e.g. {EXAMPLES[kind]}, or "
                             "leave it out for the plugin's default.")
        elif quantity > (MAX_CPU if kind == "cpu" else MAX_MEMORY):
            problems[key] = (f"{value} is more than {MAX_TEXT[kind]}; check the unit (e.g. "
                             f"{EXAMPLES[kind]}).")
        else:
            values[key] = quantity
    for kind in ("cpu", "memory"):
        request_key, limit_key = f"{kind}_request", f"{kind}_limit"
        if request_key not in given and limit_key not in given:
            continue
        request_text = given.get(request_key) or (defaults or {}).get(request_key, "")
        limit_text = given.get(limit_key) or (defaults or {}).get(limit_key, "")
        request = values.get(request_key) if request_key in given else _parse(request_text or "")
        limit = values.get(limit_key) if limit_key in given else _parse(limit_text or "")
        if request is None or limit is None or request <= limit:
            continue
        if request_key in given:
            whose = "" if limit_key in given else "the plugin's "
            problems[request_key] = (
                f"{request_text} is above {whose}{limit_key} {limit_text}; a request may not "
                f"exceed its limit: lower {request_key} or raise {limit_key}.")
        else:
            problems[limit_key] = (
                f"{limit_text} is below the plugin's {request_key} {request_text}; a limit may "
                f"not be under its request: raise {limit_key} or lower {request_key} too.")
    return problems


__all__ = ["RESERVED_NAMES", "RESOURCE_KEYS", "SCRIPT_NAME_MAX_CHARS", "resource_problems", "script_name_problem"]
