"""A cache of the help pages `falcon ... --help` printed, so the next identical ask prints it
without importing click, rich-click or rich (docs/decisions.md#dec-help-cache).

Drawing a help page costs about 0.1 s of CPU, most of it importing rich; a Go CLI such as
kubectl answers in 0.04 s. The page is a pure function of the command line, the CLI's code and
libraries, the environment and the terminal, so the page printed once is kept under the config
directory (`cache/help/`, like kubectl's `~/.kube/cache`) and printed again when every one of
those inputs is the same. The key holds:

- the arguments, exactly;
- the CLI's code: path, size and modification time of every module of the `cli` package, and
  the modification time of every folder on `sys.path` (installing, upgrading or removing a
  library changes its site-packages folder), the interpreter and its version;
- the whole environment but the variables a shell changes on every command (`PWD`, ...);
- for stdin, stdout and stderr: whether each is a terminal and its size, and stdout's encoding.

Only a page printed by the help option is kept (`record` is called by the commands' help
path), never the output of a command that happened to receive `--help` as an option's value.
Anything unexpected (an unreadable folder, a full disk) turns the cache off for that run: the
help is then drawn as before. This module imports only the standard library's light modules.
"""
from __future__ import annotations

import os
import sys

HELP_FLAGS = frozenset({"--help", "-h"})
VOLATILE = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
MAX_ENTRIES = 256  # pages kept; past it the oldest go
_CLI_DIR = os.path.dirname(os.path.abspath(__file__))

_pending: tuple[str, str] | None = None  # (cache folder, key) of this run, when it may record


def _code_fingerprint(feed) -> None:
    for root, dirs, files in os.walk(_CLI_DIR):
        dirs[:] = sorted(d for d in dirs if d not in ("tests", "__pycache__"))
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(root, name))
                feed(f"{root}/{name}\0{st.st_size}\0{st.st_mtime_ns}")
    for entry in sys.path:
        try:
            feed(f"{entry}\0{os.stat(entry or '.').st_mtime_ns}")
        except OSError:
            feed(f"{entry}\0-")


def _streams(feed) -> None:
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            tty = os.isatty(fd)
            size = tuple(os.get_terminal_size(fd)) if tty else None
        except (AttributeError, OSError, ValueError):
            tty, size = None, None
        feed(f"{tty}\0{size}")
    feed(f"{getattr(sys.stdout, 'encoding', None)}\0{getattr(sys.stdout, 'errors', None)}")


def cache_key(argv: list[str], environ: dict[str, str] | os._Environ) -> str:
    """Return the key of the help page `argv` prints in this process's circumstances."""
    import hashlib  # only when help is asked for: every other command skips it

    digest = hashlib.sha256()

    def feed(text: str) -> None:
        digest.update(text.encode("utf-8", "surrogateescape") + b"\n")

    feed(sys.executable)
    feed(sys.version)
    feed("\0".join(argv))
    for name in sorted(environ):
        if name not in VOLATILE:
            feed(f"{name}={environ[name]}")
    _streams(feed)
    _code_fingerprint(feed)
    return digest.hexdigest()


def cache_dir(environ) -> str:
    """The folder of cached help pages: `cache/help` under the config directory."""
    base = environ.get("FALCON_CONFIG_DIR") or os.path.join("~", ".config", "falcon")
    return os.path.join(os.path.expanduser(base), "cache", "help")


def serve(argv: list[str]) -> bool:
    """Print the cached help page of `argv` and return True; False when there is none (and the
    command should run). Remembers the key so that the page drawn by this run is recorded."""
    global _pending
    _pending = None
    if HELP_FLAGS.isdisjoint(argv) or os.environ.get("FALCON_NO_HELP_CACHE", "") not in ("",
                                                                                      "0"):
        return False
    try:
        folder = cache_dir(os.environ)
        key = cache_key(argv, os.environ)
    except (OSError, ValueError, UnicodeError):
        return False
    try:
        with open(os.path.join(folder, key), encoding="utf-8", errors="surrogateescape") as fh:
            page = fh.read()
    except (OSError, UnicodeError):
        _pending = (folder, key)
        return False
    sys.stdout.write(page)
    sys.stdout.flush()
    return True


def record(page: str) -> None:
    """Keep `page` (the help just printed, with its final newline) for this run's key, if this
    run asked `serve` first; never fails the command."""
    global _pending
    if _pending is None:
        return
    folder, key = _pending
    _pending = None
    try:
        for level in (os.path.dirname(os.path.dirname(folder)), os.path.dirname(folder),
                      folder):  # the config folder, cache/, cache/help/: each 0700
            os.makedirs(level, mode=0o700, exist_ok=True)
        tmp = os.path.join(folder, f".{key}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(page)
            os.replace(tmp, os.path.join(folder, key))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _prune(folder)
    except (OSError, UnicodeError):
        pass


def _prune(folder: str) -> None:
    """Keep the newest `MAX_ENTRIES` pages."""
    with os.scandir(folder) as entries:
        pages = [e for e in entries if e.is_file() and not e.name.startswith(".")]
    if len(pages) <= MAX_ENTRIES:
        return
    pages.sort(key=lambda e: e.stat().st_mtime_ns)
    for entry in pages[:len(pages) - MAX_ENTRIES]:
        try:
            os.unlink(entry.path)
        except OSError:
            pass
