"""What every built-in plugin shares: arguments, input discovery, opening files, writing JSONL.

Files are opened by their magic bytes (gzip starts with ``1f 8b``), never by their extension.
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

EXIT_OK = 0
EXIT_PARSE_ERROR = 1
EXIT_NO_INPUT = 2

GZIP_MAGIC = b"\x1f\x8b"
INPUT_ENV = "FALCON_INPUT_DIR"
OUTPUT_ENV = "FALCON_RESULT_FILE"
RESULT_VERSION = 1


class PluginError(Exception):
    """A failure that ends the plugin with ``exit_code`` (1: parse failure, 2: no usable input)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class InputFile:
    """One discovered input: ``path`` on disk and ``rel``, the name reported in the result."""

    path: Path
    rel: str

    @property
    def size_bytes(self) -> int:
        """The file's size on disk, in bytes."""
        return self.path.stat().st_size


def warn(message: str) -> None:
    """Write one progress or warning line to stderr (the analysis' output.log)."""
    print(message, file=sys.stderr, flush=True)


def argument_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The parser of the common calling convention; a plugin may add its own options to it."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--input", action="append", default=None, metavar="PATH",
                        help=f"file or directory (searched recursively); default ${INPUT_ENV}")
    parser.add_argument("--output", default=None, metavar="FILE.jsonl",
                        help=f"JSONL result; default ${OUTPUT_ENV}, else stdout")
    return parser


def resolve_io(args: argparse.Namespace) -> tuple[list[Path], Path | None]:
    """The input paths and the output file (None: stdout) from the arguments or the environment.

    Raises PluginError(exit 2) when neither ``--input`` nor ``$FALCON_INPUT_DIR`` is given.
    """
    inputs = args.input or ([os.environ[INPUT_ENV]] if os.environ.get(INPUT_ENV) else [])
    if not inputs:
        raise PluginError(f"no input: pass --input PATH or set ${INPUT_ENV}", EXIT_NO_INPUT)
    output = args.output or os.environ.get(OUTPUT_ENV) or None
    return [Path(p) for p in inputs], (Path(output) if output else None)


def discover(paths: Sequence[Path], accept: Callable[[Path], bool]) -> list[InputFile]:
    """The files to read: each file given as is, each directory searched recursively.

    ``accept(path)`` filters the files found in directories (files given explicitly are always
    taken). Results are sorted per directory and deduplicated. Raises PluginError(exit 2) naming
    a path that does not exist.
    """
    found: list[InputFile] = []
    seen: set[Path] = set()
    for root in paths:
        if root.is_file():
            candidates = [(root, root.name)]
        elif root.is_dir():
            candidates = [(p, p.relative_to(root).as_posix())
                          for p in sorted(root.rglob("*")) if p.is_file() and accept(p)]
        else:
            raise PluginError(f"{root}: no such file or directory", EXIT_NO_INPUT)
        for path, rel in candidates:
            if path.resolve() not in seen:
                seen.add(path.resolve())
                found.append(InputFile(path, rel))
    return found


def is_gzip(path: Path) -> bool:
    """True when the file starts with the gzip magic bytes ``1f 8b`` (whatever its name)."""
    with path.open("rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_binary(path: Path) -> BinaryIO:
    """Open ``path`` for reading bytes, decompressing it when its magic bytes say gzip.

    Multi-member gzip files read as the concatenation of their members.
    """
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return path.open("rb")


def open_text(path: Path) -> io.TextIOWrapper:
    """Open ``path`` as UTF-8 text (invalid bytes replaced), gunzipping by magic bytes."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace")


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _clean(value: Any) -> Any:
    """Replace non-finite floats (not valid JSON) by None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def dumps(record: dict[str, Any]) -> str:
    """One record as one line of compact JSON (non-finite floats become null)."""
    return json.dumps(_clean(record), separators=(",", ":"), ensure_ascii=False,
                      default=_json_default)


def write_jsonl(output: Path | None, records: Iterable[dict[str, Any]]) -> None:
    """Write ``records`` as JSONL to ``output`` (None: stdout).

    The file is written to ``output + '.tmp'`` and renamed at the end, so readers never see a
    partial result; on an exception the temporary file is removed and the exception re-raised.
    """
    if output is None:
        for record in records:
            sys.stdout.write(dumps(record) + "\n")
        sys.stdout.flush()
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for record in records:
                f.write(dumps(record) + "\n")
        os.replace(tmp, output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def meta_record(plugin: str, inputs: list[dict[str, Any]], **flags: Any) -> dict[str, Any]:
    """The header record every result starts with."""
    return {"kind": "meta", "plugin": plugin, "version": RESULT_VERSION, "inputs": inputs, **flags}


def run(main: Callable[[], int]) -> int:
    """Run a plugin body, turning a PluginError into its message on stderr and its exit code."""
    try:
        return main()
    except PluginError as exc:
        warn(f"error: {exc}")
        return exc.exit_code


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of ascending values, linear interpolation (numpy's default).

    Raises ValueError on an empty sequence.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
