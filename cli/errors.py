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
