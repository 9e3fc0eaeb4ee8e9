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
A page is stored behind its SHA-256 (a file cut short or damaged is drawn and written again),
only in a folder that is this user's, not a link and not writable by others, and read without
following a link. Anything unexpected (an unreadable folder, a full disk, a closed stdout)
turns the cache off for that run: the help is then drawn as before. This module imports only
the standard library's light modules.
"""
from __future__ import annotations

import os
import stat
import sys

HELP_FLAGS = frozenset({"--help", "-h"})
VOLATILE = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
MAX_ENTRIES = 256  # pages kept; past it the oldest go
MAX_PAGE = 1 << 20  # bytes stored: a longer page (COLUMNS=10000) is drawn each time
FORMAT = "falcon-help-1"
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

    def feed(text: str) -> None:  # each part behind its length: no two inputs run together
        data = text.encode("utf-8", "surrogateescape")
        digest.update(len(data).to_bytes(8, "big") + data)

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


def _private_folder(folder: str) -> bool:
    """True when `folder` is a real folder (not a link) of this user that nobody else may
    write: only such a folder's pages are read or written."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def seal(page: str) -> bytes:
    """`page` as stored: a first line naming the format and the page's SHA-256, then the page."""
    import hashlib

    body = page.encode("utf-8", "surrogateescape")
    return f"{FORMAT} {hashlib.sha256(body).hexdigest()}\n".encode() + body


def unseal(data: bytes) -> str | None:
    """The page of a stored file, or None when the file is not whole (cut short, emptied,
    overwritten): such a file is drawn and written again."""
    import hashlib

    head, newline, body = data.partition(b"\n")
    if not newline or head != f"{FORMAT} {hashlib.sha256(body).hexdigest()}".encode():
        return None
    return body.decode("utf-8", "surrogateescape")


def serve(argv: list[str]) -> bool:
    """Print the cached help page of `argv` and return True; False when there is none (and the
    command should run). Remembers the key so that the page drawn by this run is recorded."""
    global _pending
    _pending = None
    if HELP_FLAGS.isdisjoint(argv) or sys.stdout is None \
            or os.environ.get("FALCON_NO_HELP_CACHE", "") not in ("", "0"):
        return False
    try:
        folder = cache_dir(os.environ)
        key = cache_key(argv, os.environ)
    except (OSError, ValueError, UnicodeError):
        return False
    _pending = (folder, key)
    if not _private_folder(folder):
        return False
    try:
        fd = os.open(os.path.join(folder, key), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            page = unseal(fh.read(MAX_PAGE + 1))
    except OSError:
        return False
    if page is None:
        return False
    _pending = None
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
        if not _private_folder(folder):
            return
        data = seal(page)
        if len(data) > MAX_PAGE:
            return
        tmp = os.path.join(folder, f".{key}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
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
