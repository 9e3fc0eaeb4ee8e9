"""The one exception type the commands raise to stop with a message and an exit code."""
from __future__ import annotations

from .exit_codes import ExitCode
from .visible import visible


class CLIError(Exception):
    """Stop the command: print `error: <message>` as one line on stderr and exit with `code`.

    Args:
        message: one line for a human, saying what went wrong and what to do; its whitespace is
            folded and its control characters escaped (it often quotes the server or a file).
        code: the process exit status (`ExitCode`).
        status: the HTTP status of the server's answer that caused it, None otherwise (a command
            may reword e.g. a 503 or a 404 for its own resource).
    """

    def __init__(self, message: str, code: ExitCode = ExitCode.ERROR, *,
                 status: int | None = None):
        super().__init__(message)
        self.message = visible(" ".join(message.split()))  # one line, whatever the server sent
        self.code = code
        self.status = status


def run_each(env, items, action) -> CLIError | None:
    """Run `action(item)` for every item, as kubectl acts on each name it is given: a
    `CLIError` is reported at once (`error: ...` on stderr) and the next item is still tried.
    Ctrl-C (a `CLIError` with `INTERRUPTED`, as `exp wait` raises it) stops the whole command:
    it is raised, not reported, and no further item is tried.

    Returns:
        The first failure, or None when every item succeeded; the caller ends with
        `exit_for(failure)` once it has printed what succeeded.
    """
    first: CLIError | None = None
    for item in items:
        try:
            action(item)
        except CLIError as exc:
            if exc.code == ExitCode.INTERRUPTED:
                raise
            env.print_err(f"error: {exc.message}")
            first = first or exc
    return first


def exit_for(failure: CLIError | None) -> None:
    """Exit with the first failure's code (already reported by `run_each`), if any: a command
    given several ids exits non-zero when any of them failed."""
    if failure is not None:
        import click

        raise click.exceptions.Exit(int(failure.code))
