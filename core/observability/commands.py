"""What Falcon's long-running management commands print, as log records under JSON logs.

Under `FALCON_LOG_FORMAT=json` every line a process writes must be a JSON object, and Django's
commands print plain text (`self.stdout`, `self.stderr`: runserver's banner, a system check's
summary, `CommandError: ...`). `LoggedOutputMixin` gives such a command streams that log each
line (`core.observability.logs.LogWriter`): stdout lines at INFO, stderr lines at WARNING, on the logger
`falcon.commands.<command>`. Under `text` nothing changes: the lines are printed as written.
"""
from __future__ import annotations

import logging
from typing import Any

from core.observability.logs import LogWriter, log_format


class LoggedOutputMixin:
    """Put before `BaseCommand` (or a subclass) in a command's bases (see the module docstring).

    A caller that passes its own `stdout` or `stderr` (`call_command(..., stdout=buf)`) keeps
    it; `status` writes a line about the process itself (`running every 2 s`).
    """

    def _output_logger(self) -> logging.Logger:
        return logging.getLogger(f"falcon.commands.{type(self).__module__.rsplit('.', 1)[-1]}")

    def execute(self, *args: Any, **options: Any) -> Any:
        """Run the command, its printed lines logged under `json` (see the module docstring)."""
        if log_format() == "json":
            logger = self._output_logger()
            options["no_color"] = not options.get("force_color")
            if not options.get("stdout"):
                options["stdout"] = LogWriter(logger, logging.INFO)
            if not options.get("stderr"):
                options["stderr"] = LogWriter(logger, logging.WARNING)
        return super().execute(*args, **options)

    def status(self, text: str) -> None:
        """Say something about the process (started, listening, stopped): on stderr, written
        at once, under `text`; an INFO record under `json` (not a warning)."""
        if log_format() == "json":
            self._output_logger().info("%s", text)
        else:
            self.stderr.write(text)
            self.stderr.flush()
