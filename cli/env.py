"""The injectable environment of one `falcon` run (httpie's `httpie/context.py` idea).

Commands never reach for `sys.stdout`, `os.environ`, the clock or the network directly: they get
them from an `Environment`, so tests can capture output, move time and watch requests.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

DEFAULT_SERVER = "http://127.0.0.1:8000"
PIPE_WIDTH = 200  # columns of tables written to a pipe or file
FALLBACK_WIDTH = 80  # columns when COLUMNS is set but is not a positive integer
MAX_WIDTH = 10_000  # at most this many columns: rich pads every help line to the width
DEFAULT_HTTP_TIMEOUT = 30.0  # seconds per request (read); connecting gets at most 5 s
DEFAULT_LOGIN_TIMEOUT = 300.0  # seconds the browser login may take (an SSO round trip with MFA)


def open_in_browser(url: str) -> bool:
    """Open `url` in the user's browser (`webbrowser.open`); False when none could be started."""
    import webbrowser  # lazily: only the browser login needs it

    return webbrowser.open(url)


def default_config_dir(environ: Mapping[str, str]) -> Path:
    """Return the config directory: `$FALCON_CONFIG_DIR`, else `~/.config/falcon`.

    Args:
        environ: the process environment (or a test's stand-in).
    """
    value = environ.get("FALCON_CONFIG_DIR")
    if value:
        return Path(value).expanduser()
    return Path("~/.config/falcon").expanduser()


def is_terminal(stream: Any) -> bool:
    """True when `stream` is a terminal; False for a pipe, a file, a closed or replaced stream."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _stdin_is_terminal() -> bool:
    """True when the process's stdin is a terminal (a prompt can be answered)."""
    return sys.stdin is not None and is_terminal(sys.stdin)


def columns_from(environ: Mapping[str, str]) -> int | None:
    """Return the width `COLUMNS` asks for: None when unset or empty, `FALLBACK_WIDTH` when it is
    not a positive integer (`0`, `-3`, `abc`), which would otherwise make tables 0 columns wide
    and print nothing, and at most `MAX_WIDTH` (a width of 10^8 made `--help` pad each line to
    100 MB).

    Args:
        environ: the process environment (or a test's stand-in).
    """
    value = environ.get("COLUMNS", "").strip()
    if not value:
        return None
    if value.isascii() and value.isdigit() and value.strip("0"):
        digits = value.lstrip("0")  # int() refuses 4300+ digits; 6 already exceed MAX_WIDTH
        return MAX_WIDTH if len(digits) > 6 else min(int(digits), MAX_WIDTH)
    return FALLBACK_WIDTH


def _console_class():
    """Return a `rich.console.Console` whose closed pipe raises `BrokenPipeError`.

    rich's own `on_broken_pipe` exits 1; the root group turns `BrokenPipeError` into the
    documented 141 (`ExitCode.OUTPUT_CLOSED`), the code of every other output kind.
    """
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(32, "Broken pipe")

    return PipeConsole


def shows_styles(stream: Any) -> bool:
    """True when rich would treat `stream` as a terminal (and so could write colours): rich's
    own `Console.is_terminal` rule, from the process environment as rich reads it
    (`TTY_COMPATIBLE`, then `FORCE_COLOR`, then `isatty()`)."""
    tty_compatible = os.environ.get("TTY_COMPATIBLE", "")
    if tty_compatible in ("0", "1"):
        return tty_compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def can_encode(stream: Any, text: str) -> bool:
    """True when `stream`'s encoding can write `text` as it is (UTF-8 can; Latin-9 cannot
    write `日本`); a stream without an encoding is assumed to take any text."""
    encoding = getattr(stream, "encoding", None)
    if not encoding:
        return True
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


@dataclass
class Environment:
    """What a command may touch outside itself.

    Attributes:
        environ: environment variables (`FALCON_CONFIG_DIR`, `FALCON_DEBUG`, ...).
        config_dir: where the credentials file lives; None means `default_config_dir(environ)`.
        stdout, stderr: text streams; None means the process's streams at the time of use (so
            click's `CliRunner` captures them).
        clock: wall-clock seconds since the epoch (token expiry checks).
        monotonic: monotonic seconds (wait timeouts).
        sleep: sleeps for a number of seconds (the `exp wait` poll interval).
        transport: a `urllib3.PoolManager` to send requests through (tests record or answer
            them); None is the real network (`cli.client.pool_for`).
        http_timeout: seconds a request may take before the server counts as unavailable.
        open_browser: opens a URL in the user's browser, True when it did (`falcon auth login`
            in the cloudflare mode); tests pass a fake browser.
        login_timeout: seconds the browser login waits for the browser to come back.
        run: runs an external program (`subprocess.run`'s signature), for `--cloudflared`.
        interactive: True when a person can answer a prompt (stdin is a terminal); tests
            pretend either way.
    """

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    config_dir: Path | None = None
    stdout: IO[str] | None = None
    stderr: IO[str] | None = None
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    transport: Any = None
    http_timeout: float = DEFAULT_HTTP_TIMEOUT
    open_browser: Callable[[str], bool] = open_in_browser
    login_timeout: float = DEFAULT_LOGIN_TIMEOUT
    run: Callable[..., Any] | None = None
    interactive: Callable[[], bool] = _stdin_is_terminal
    _consoles: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def out(self) -> IO[str]:
        """The stream for results (stdout)."""
        return self.stdout if self.stdout is not None else sys.stdout

    @property
    def err(self) -> IO[str]:
        """The stream for errors and progress (stderr)."""
        return self.stderr if self.stderr is not None else sys.stderr

    @property
    def credentials_dir(self) -> Path:
        """The resolved config directory."""
        return self.config_dir if self.config_dir is not None else default_config_dir(self.environ)

    @property
    def debug(self) -> bool:
        """True when `FALCON_DEBUG` is set: unexpected errors then show their traceback."""
        return self.environ.get("FALCON_DEBUG", "") not in ("", "0")

    def console(self, *, stderr: bool = False):
        """Return a `rich.console.Console` on stdout (or stderr); imports rich on first use."""
        key = "err" if stderr else "out"
        stream = self.err if stderr else self.out
        cached = self._consoles.get(key)
        if cached is None or cached.file is not stream:
            cached = _console_class()(file=stream, highlight=False, soft_wrap=False)
            width = columns_from(self.environ)
            if width is not None:
                cached.width = width
            elif not cached.is_terminal:
                # Piped output is for grep and logs: do not squeeze tables into 80 columns.
                cached.width = PIPE_WIDTH
            elif cached.width < 1:  # a terminal that reports no size
                cached.width = FALLBACK_WIDTH
            self._consoles[key] = cached
        return cached

    def table_console(self):
        """Return where a line table (`cli/table.py`) is printed on stdout: the rich `console()`
        when the stream is a terminal (the statuses are coloured), else a `PlainConsole` of the
        same width, which writes the same text without importing rich's console."""
        stream = self.out
        if shows_styles(stream):
            return self.console()
        from .table import PlainConsole

        cached = self._consoles.get("plain")
        if cached is None or cached.file is not stream:
            width = columns_from(self.environ)
            cached = PlainConsole(stream, PIPE_WIDTH if width is None else width)
            self._consoles["plain"] = cached
        return cached

    def print_err(self, line: str) -> None:
        """Write one plain line to stderr (no markup, no wrapping)."""
        self.err.write(line.rstrip("\n") + "\n")
        self.err.flush()

    def print_out(self, text: str) -> None:
        """Write plain text to stdout, ending it with one newline."""
        self.out.write(text.rstrip("\n") + "\n")
        self.out.flush()
