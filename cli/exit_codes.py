"""Exit codes of the `falcon` command, one `IntEnum` for every command.

Scripts branch on these numbers, so they are stable: never renumber, only add.

| code | name        | meaning                                                                   |
| ---- | ----------- | ------------------------------------------------------------------------- |
| 0    | OK          | the command did what was asked (`exp wait`: the experiment Succeeded)     |
| 1    | ERROR       | an unexpected failure: a 5xx answer, a malformed response, a cancelled    |
|      |             | confirmation; `exp diff`: the experiments differ (as `diff`, `kubectl     |
|      |             | diff`), its failures exit 12 instead                                      |
| 2    | USAGE       | the command line or a local input file is wrong (click's own code for     |
|      |             | usage errors; nothing was sent)                                           |
| 3    | NOT_FOUND   | the experiment (or endpoint) does not exist (HTTP 404)                    |
| 4    | CONFLICT    | the entity's state does not allow it, e.g. deleting a Running experiment  |
|      |             | (HTTP 409)                                                                |
| 5    | AUTH        | not logged in, the cached session expired, or the server refused the      |
|      |             | token (HTTP 401): run `falcon auth login`                                 |
| 6    | EXP_FAILED  | `exp wait` / `exp create --wait`: the experiment ended Failed or Aborted  |
| 7    | TIMEOUT     | `exp wait --timeout` (or `analysis create --wait --timeout`) elapsed      |
|      |             | before the experiment (analysis) reached a final state                    |
| 8    | INVALID     | the server rejected the input (HTTP 400/413 field errors)                 |
| 9    | UNAVAILABLE | the server could not be reached or did not answer in time, or (analysis   |
|      |             | and plugins commands) the server answered 503: the analyzer controller is |
|      |             | unavailable                                                               |
| 10   | FORBIDDEN   | logged in, but not allowed to do this, e.g. aborting another user's       |
|      |             | experiment (HTTP 403); logging in again does not help                     |
| 11   | ANALYSIS_   | `analysis create --wait`: the analysis ended failed or cancelled          |
|      | FAILED      |                                                                           |
| 12   | DIFF_FAILED | `exp diff`: an unexpected failure (what another command exits 1 for, as 1 |
|      |             | there means "they differ")                                                |
| 13   | GATE_FAILED | `exp compare --fail-on`: a condition held for a compared experiment, its  |
|      |             | metric was missing or NaN there, or the condition matched no metric (the  |
|      |             | command names each)                                                       |
| 130  | INTERRUPTED | Ctrl-C (SIGINT) stopped the command (`exp wait`: the experiment goes on)   |
| 141  | OUTPUT_     | the reader of stdout or stderr went away (`falcon ... | head -1`): the     |
|      | CLOSED      | command stopped quietly, without a message (an experiment it created or   |
|      |             | waited for goes on); 128 + SIGPIPE, what a shell reports for a program    |
|      |             | ended by a closed pipe                                                    |
"""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit status of `falcon`; see the module docstring for each meaning."""

    OK = 0
    ERROR = 1
    USAGE = 2
    NOT_FOUND = 3
    CONFLICT = 4
    AUTH = 5
    EXP_FAILED = 6
    TIMEOUT = 7
    INVALID = 8
    UNAVAILABLE = 9
    FORBIDDEN = 10  # 7 is TIMEOUT already: codes are never renumbered
    ANALYSIS_FAILED = 11
    DIFF_FAILED = 12  # `exp diff` exits 1 for "they differ", so its failures cannot
    GATE_FAILED = 13  # `exp compare --fail-on`: a regression gate, for CI pipelines
    INTERRUPTED = 130  # 128 + SIGINT, the shell's convention
    OUTPUT_CLOSED = 141  # 128 + SIGPIPE, the same convention
