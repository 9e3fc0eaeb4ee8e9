"""Rules of an analysis request shared by the API server, the analyzer controller and the CLI
(Django-free, no I/O): the script's file name.

Each check returns a problem as a sentence naming the fix (None when there is none); the caller
files it under its own field name.
"""
from __future__ import annotations

SCRIPT_NAME_MAX_CHARS = 255
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


__all__ = ["SCRIPT_NAME_MAX_CHARS", "script_name_problem"]
