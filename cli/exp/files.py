"""`falcon exp logs` and `falcon exp artifacts`: what an experiment's replicas printed and wrote.

Only click is imported at module level (`falcon --help` stays fast).
"""
from __future__ import annotations

from dataclasses import dataclass

import rich_click as click

from ..completion import complete_roles
from ..errors import CLIError
from ..exit_codes import ExitCode
from ..options import (
    ExpIdType,
    FiniteFloat,
    exp_id_argument,
    output_option,
    pass_env,
    server_option,
)
from .group import exp_group
from .inputs import SelectorArg

EXPS = "/api/v1/exps"
LOG_CHUNK = 256 * 1024  # bytes asked per logs request
FOLLOW_INTERVAL = 1.0  # seconds between polls of `logs --follow`
LIST_PAGE = 1000  # files per artifacts page: the server's maximum


class DurationType(click.ParamType):
    """A Go duration, as kubectl's `--since` reads it (`30s`, `5m`, `1h30m`; durationpy),
    more than 0; converted to whole seconds, rounded up."""

    name = "DURATION"

    def convert(self, value, param, ctx):
        import math

        import durationpy

        if isinstance(value, int):
            return value
        try:
            seconds = durationpy.from_str(str(value)).total_seconds()
        except durationpy.DurationError:
            self.fail(f"{value!r} is not a duration; write it as kubectl does: 30s, 5m, 2h, "
                      "1h30m", param, ctx)
        if seconds <= 0:
            self.fail(f"{value!r} must be more than 0 (e.g. 5m)", param, ctx)
        return max(1, math.ceil(seconds))


@dataclass(frozen=True)
class _Reading:
    """How every log of one `exp logs` is read: the first request's `tail` and `since_seconds`,
    the `timestamps` of every request, and `follow` with its poll `interval`."""

    tail: int | None
    since: int | None
    timestamps: bool
    follow: bool
    interval: float

    def first_query(self, query: dict[str, object]) -> dict[str, object]:
        """The query of the first request of a log (its tail, or its start by `since`)."""
        query = self.query(query)
        if self.since is not None:
            query["since_seconds"] = self.since
        if self.tail is not None:
            query["tail"] = self.tail
        else:
            query.update(offset=0, limit=LOG_CHUNK)
        return query

    def query(self, query: dict[str, object]) -> dict[str, object]:
        query = dict(query)
        if self.timestamps:
            query["timestamps"] = "true"
        return query


@exp_group.command("logs")
@click.argument("exp_id", type=ExpIdType(), metavar="[ID]", required=False)
@click.option("--label", "-l", "selectors", multiple=True, type=SelectorArg(),
              help="Instead of ID: the logs of every experiment with this label, key=value or "
                   "key (repeatable; all must match), as kubectl logs -l; each line is "
                   "prefixed with [exp/ID/role/replica-N].")
@click.option("--max-exps", type=click.IntRange(min=1, max=100), default=10,
              show_default=True,
              help="With -l: refuse when more experiments match (as kubectl's "
                   "--max-log-requests).")
@click.option("--role", "roles", multiple=True, shell_complete=complete_roles,
              help="The job's role (optional when the experiment has one role); repeat it for "
                   "several roles.")
@click.option("--replica", type=click.IntRange(min=0), default=None,
              help="Replica index (default 0); not with --all-replicas.")
@click.option("--all-replicas", is_flag=True,
              help="Every replica of the role(s) (every role when --role is not given).")
@click.option("--prefix/--no-prefix", default=None,
              help="Start each line with [role/replica-N] (kubectl logs --prefix); default: "
                   "on when more than one log is printed.")
@click.option("--tail", type=click.IntRange(min=-1), default=None,
              help="Only the last N lines (of each log); -1, as kubectl's default: all.")
@click.option("--timestamps", is_flag=True,
              help="Start each line with the time it was produced (RFC 3339, UTC, "
                   "nanoseconds), as kubectl logs --timestamps: when the runner or the "
                   "container runtime read it from the task's output.")
@click.option("--since", type=DurationType(), default=None,
              help="Only lines produced in the last DURATION (5s, 2m, 3h, 1h30m), as kubectl "
                   "logs --since; with --tail, the last N of those.")
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing new output until the replica (every replica) ends.")
@click.option("--interval", type=FiniteFloat(min=0.1), default=FOLLOW_INTERVAL,
              show_default=True, help="Seconds between two polls with --follow.")
@server_option
@pass_env
def logs(env, exp_id: int | None, selectors: tuple[str, ...], max_exps: int,
         roles: tuple[str, ...], replica: int | None, all_replicas: bool, prefix: bool | None,
         tail: int | None, timestamps: bool, since: int | None, follow: bool,
         interval: float, server: str) -> None:
    """Print a replica's output (stdout and stderr), live or kept after it ended.

    Logs are read from the run while it is live on the local cluster, and from the artifact
    store once the replica ended (aborted runs included). The log is text: UTF-8, a byte that
    is not UTF-8 shown as U+FFFD; on a terminal, control characters are shown as escapes.
    Several logs (--role repeated, --all-replicas, -l) are printed one after the other, or
    with --follow interleaved as they grow, each line prefixed with its [role/replica-N]
    ([exp/ID/role/replica-N] with -l). With -l, an experiment without the --role or
    --replica asked for is left out.

    \b
    Examples:
      falcon exp logs 12
      falcon exp logs 12 --role worker --replica 1 --tail 50
      falcon exp logs 12 --follow --timestamps
      falcon exp logs 12 --since 5m
      falcon exp logs 12 --all-replicas --tail 20
      falcon exp logs 12 --role main --role worker --all-replicas -f
      falcon exp logs -l team=infra --role main --tail 5
    """
    from ..client import open_client

    if replica is not None and all_replicas:
        raise CLIError(f"--replica {replica} and --all-replicas contradict each other: give "
                       "--replica N for one replica, or --all-replicas for every one",
                       ExitCode.USAGE)
    replica = replica or 0
    tail = None if tail == -1 else tail
    if (exp_id is None) == (not selectors):
        raise CLIError("give an experiment ID or -l/--label KEY=VALUE (not both), e.g. "
                       "falcon exp logs 12, falcon exp logs -l team=infra", ExitCode.USAGE)
    reading = _Reading(tail, since, timestamps, follow, interval)
    with open_client(env, server) as client:
        try:
            if exp_id is None:
                streams = _labelled_streams(env, client, selectors, max_exps, roles, replica,
                                            all_replicas)
                if streams:
                    _print_many(env, client, streams, reading, prefix=prefix is not False,
                                with_exp=True)
                return
            if len(roles) <= 1 and not all_replicas and (roles or not prefix):
                params: dict[str, object] = {"replica": replica}
                if roles:
                    params["role"] = roles[0]
                label = f"[{roles[0]}/replica-{replica}] " if roles else None
                try:
                    _print_logs(env, client, exp_id, params, reading,
                                prefix=label if prefix else None)
                except CLIError as exc:
                    if roles or exc.code != ExitCode.INVALID:
                        raise
                    _refuse_without_role(client, exp_id, exc)
                return
            streams = [(exp_id, *pair) for pair in _streams(client, exp_id, roles, replica,
                                                             all_replicas)]
            _print_many(env, client, streams, reading, prefix=prefix is not False)
        except KeyboardInterrupt:
            raise CLIError("stopped following the log", ExitCode.INTERRUPTED) from None


def _labelled_streams(env, client, selectors, max_exps, roles, replica, all_replicas):
    """The (experiment, role, replica) logs of every experiment matching the label selectors,
    oldest experiment first; an experiment without the roles or replica asked for is left
    out. None matching prints a note on stderr (exit 0, as kubectl's "No resources found").

    Raises:
        CLIError(USAGE): more than `max_exps` experiments match.
    """
    params = [("label", selector) for selector in selectors] + [("page_size", "100")]
    exps = list(client.paginate(EXPS, params=params, limit=max_exps + 1))
    if len(exps) > max_exps:
        raise CLIError(f"more than {max_exps} experiments match {', '.join(selectors)}; "
                       "narrow the selector or raise --max-exps", ExitCode.USAGE)
    if not exps:
        env.print_err(f"No experiments match {', '.join(selectors)}.")
        return []
    streams = []
    for exp in sorted(exps, key=lambda e: int(e["id"])):
        pairs = _streams(client, exp["id"], roles, replica, all_replicas, strict=False)
        streams += [(exp["id"], role, index) for role, index in pairs]
    return streams


def _refuse_without_role(client, exp_id: int, exc: CLIError) -> None:
    """The server refused a log without a role: when the experiment has several roles that is
    the user's choice to make, so a usage error naming them; otherwise `exc` as it was."""
    exp = client.request("GET", f"{EXPS}/{exp_id}")
    roles = sorted({job.get("role") for job in exp.get("jobs") or []})
    if len(roles) <= 1:
        raise exc
    raise CLIError(f"experiment {exp_id} has roles {', '.join(roles)}; choose one with --role "
                   "(repeat it for several), or give --all-replicas for every role",
                   ExitCode.USAGE) from None


def _streams(client, exp_id: int, roles: tuple[str, ...], replica: int,
             all_replicas: bool, *, strict: bool = True) -> list[tuple[str, int]]:
    """Return the (role, replica) pairs to print, from the experiment's jobs, in role order.

    Args:
        strict: a role or replica the experiment does not have is an error; else left out.

    Raises:
        CLIError(NOT_FOUND): a role the experiment does not have (naming the ones it has).
    """
    exp = client.request("GET", f"{EXPS}/{exp_id}")
    counts = {job.get("role"): int((job.get("task_spec") or {}).get("replica") or 1)
              for job in exp.get("jobs") or []}
    unknown = [role for role in roles if role not in counts]
    if unknown and strict:
        raise CLIError(f"experiment {exp_id} has no role {unknown[0]!r}; its roles: "
                       f"{', '.join(sorted(counts))}", ExitCode.NOT_FOUND)
    chosen = [role for role in dict.fromkeys(roles) if role in counts] if roles else sorted(
        counts)
    pairs = []
    for role in chosen:
        if all_replicas:
            pairs += [(role, index) for index in range(counts[role])]
        elif replica < counts[role]:
            pairs.append((role, replica))
        elif strict:
            raise CLIError(f"role {role!r} of experiment {exp_id} has {counts[role]} "
                           f"replica(s); --replica is 0 to {counts[role] - 1}",
                           ExitCode.NOT_FOUND)
    return pairs


def _print_many(env, client, streams, reading: _Reading, *, prefix: bool,
                with_exp: bool = False) -> None:
    """Print several logs, each read to its current end in turn (so without `follow` one after
    the other); with `follow`, poll them in turn until every one is complete.

    Args:
        streams: (experiment id, role, replica) of each log.
        prefix: start each line with `[role/replica-N]` (`[exp/ID/role/replica-N]` when
            `with_exp`).
    """
    def label(stream) -> str:
        exp_id, role, index = stream
        return f"[exp/{exp_id}/{role}/replica-{index}] " if with_exp else \
            f"[{role}/replica-{index}] "

    writers = {stream: _LineWriter(env, label(stream) if prefix else None)
               for stream in streams}
    offsets: dict = {stream: None for stream in streams}  # None: not read yet
    done: set = set()
    tail, follow = reading.tail, reading.follow
    while True:
        progressed = False
        for stream in streams:
            while stream not in done:
                try:
                    got = _read_chunk(env, client, stream, offsets, reading)
                except _NoLog:
                    done.add(stream)
                    break
                if got is None:  # no log (yet)
                    if not follow:
                        done.add(stream)
                    break
                data, complete, first = got
                if data:
                    writers[stream].write(data)
                    progressed = True
                if first and tail is not None:
                    if not follow:
                        done.add(stream)
                    break
                if not data:
                    if complete or not follow:
                        done.add(stream)
                    break
            if stream in done:
                writers[stream].close()
        if len(done) == len(streams):
            return
        if not progressed:
            env.sleep(reading.interval)


def _read_chunk(env, client, stream, offsets, reading: _Reading):
    """Read the next chunk of one replica's log: (data, complete, was-first), or None when it
    has no log (a note on stderr once the experiment is over or without `follow`)."""
    exp_id, role, index = stream
    query: dict[str, object] = {"role": role, "replica": index}
    first = offsets[stream] is None
    if first:
        query = reading.first_query(query)
    else:
        query = reading.query({**query, "offset": offsets[stream], "limit": LOG_CHUNK})
    try:
        chunk = client.request("GET", f"{EXPS}/{exp_id}/logs", params=query)
    except CLIError as exc:
        if exc.code != ExitCode.NOT_FOUND:
            raise
        if not reading.follow or client.request("GET", f"{EXPS}/{exp_id}").get("status") in (
                "Succeeded", "Failed", "Aborted"):
            env.print_err(f"note: no log of {role}/replica-{index}: {exc.message}")
            offsets[stream] = offsets[stream] or 0
            raise _NoLog() from None
        return None
    if first:
        _note_no_times(env, chunk, reading, f"{role}/replica-{index}")
    offsets[stream] = chunk["next_offset"]
    return chunk["data"], chunk["complete"], first


def _note_no_times(env, chunk: dict, reading: _Reading, which: str) -> None:
    """Say once on stderr that a log asked `--timestamps` of was kept without times."""
    if reading.timestamps and chunk.get("has_times") is False:
        env.print_err(f"note: the log of {which} was kept without line times (before Falcon "
                      "recorded them); printed without timestamps")


class _NoLog(Exception):
    """A replica has no log and will get none: its stream is over."""


class _LineWriter:
    """Write a log's text, starting each line with `prefix` (a partial last line is kept
    until its end arrives, so two logs' lines never mix)."""

    def __init__(self, env, prefix: str | None):
        from ..env import is_terminal

        self.env, self.prefix, self.pending, self.open_line = env, prefix, "", False
        self.raw = not is_terminal(env.out)

    def write(self, text: str) -> None:
        from ..visible import visible

        if self.prefix is None:
            self.env.out.write(text if self.raw else visible(text, multiline=True))
            self.env.out.flush()
            self.open_line = not text.endswith("\n")
            return
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        if lines:
            body = "".join(f"{self.prefix}{line}\n" for line in lines)
            self.env.out.write(body if self.raw else visible(body, multiline=True))
            self.env.out.flush()

    def close(self) -> None:
        """End the log's last line if it had no newline (the next log starts on its own)."""
        if self.pending:
            self.write("\n")
        elif self.open_line:
            self.env.out.write("\n")
            self.env.out.flush()
            self.open_line = False


def _print_logs(env, client, exp_id, params, reading: _Reading, *,
                prefix: str | None = None) -> None:
    """Print the log from the start (or its last `tail` lines, or its lines since `since`),
    then, with `follow`, what is appended until the log is complete; with `follow` a log that
    does not exist yet is waited for while the experiment runs."""
    from ..env import is_terminal
    from ..visible import visible

    path = f"{EXPS}/{exp_id}/logs"
    raw = not is_terminal(env.out)
    writer = _LineWriter(env, prefix) if prefix is not None else None
    offset, first = 0, True
    tail, follow = reading.tail, reading.follow
    while True:
        if first:
            query = reading.first_query(params)
        else:
            query = reading.query({**params, "offset": offset, "limit": LOG_CHUNK})
        try:
            chunk = client.request("GET", path, params=query)
        except CLIError as exc:
            if not (follow and exc.code == ExitCode.NOT_FOUND):
                raise
            # No log yet (not started; on Kubernetes kept once the replica ends): wait, unless
            # the experiment itself is gone (404 again) or over.
            exp = client.request("GET", f"{EXPS}/{exp_id}")
            if exp.get("status") in ("Succeeded", "Failed", "Aborted"):
                raise
            env.sleep(reading.interval)
            continue
        if first:
            _note_no_times(env, chunk, reading, f"{chunk.get('role')}/replica-"
                                                f"{chunk.get('replica')}")
        if chunk["data"] and writer is not None:
            writer.write(chunk["data"])
        elif chunk["data"]:
            # A terminal sees control characters as escapes (a task's output must not drive
            # it); a pipe gets the text as written, as `analysis logs` does.
            env.out.write(chunk["data"] if raw else visible(chunk["data"], multiline=True))
            env.out.flush()
        offset = chunk["next_offset"]
        if first and tail is not None:
            first = False
            if not follow:
                break
            continue
        first = False
        if chunk["data"]:
            continue  # more may be there already: read on without waiting
        if chunk["complete"] or not follow:
            break
        env.sleep(reading.interval)
    if writer is not None:
        writer.close()


@exp_group.command("artifacts")
@exp_id_argument
@click.option("--download", "download_dir", metavar="DIR",
              type=click.Path(file_okay=False, writable=True),
              help="Fetch every file into DIR (keeping relative paths); files already complete "
                   "are skipped and partial ones resumed, so running it again finishes it. "
                   "Which version each file is is kept in DIR/.falcon-download: a file left "
                   "by another experiment or an older run is fetched whole.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="List at most this many files (default: all).")
@output_option
@server_option
@pass_env
def artifacts(env, exp_id: int, download_dir: str | None, limit: int | None, output: str,
              server: str) -> None:
    """List the files under an experiment's artifact path (name, size, modified time).

    \b
    Examples:
      falcon exp artifacts 12
      falcon exp artifacts 12 --download ./exp-12
    """
    from .. import output as out
    from ..client import open_client

    if download_dir is not None:
        _check_writable(download_dir)
    path = f"{EXPS}/{exp_id}/artifacts"
    with open_client(env, server) as client:
        files = list(client.paginate(path, params=[("page_size", str(LIST_PAGE))],
                                     limit=limit or 2 ** 62))
        if download_dir is None:
            out.emit(env, files, output, _files_table)
            return
        fetched, skipped, moved = _download(env, client, exp_id, files, download_dir)
    env.print_out(f"{len(files)} files in {download_dir}: {fetched} fetched, {skipped} already "
                  f"complete, {moved} bytes transferred")


def _files_table(console, files) -> None:
    from rich import box
    from rich.table import Table

    from ..output import plain, when

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("NAME", overflow="fold")
    table.add_column("SIZE", justify="right")
    table.add_column("MODIFIED")
    for item in files:
        table.add_row(plain(item.get("name")), plain(item.get("size")),
                      when(item.get("modified")))
    console.print(table)
    total = sum(int(f.get("size") or 0) for f in files)
    console.print(f"{len(files)} files, {total} bytes")


def _check_writable(dest: str) -> None:
    """Make `dest` (and its parents) and write a probe file in it, before any request.

    Raises:
        CLIError(USAGE): it cannot be made or written; the message names --download and the
            operating system's reason.
    """
    import tempfile
    from pathlib import Path

    try:
        Path(dest).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=dest):
            pass
    except OSError as exc:
        raise CLIError(f"--download: cannot write to {dest}: {exc.strerror or exc}; choose a "
                       "writable directory", ExitCode.USAGE) from None


# The validators of downloaded files, one small file per downloaded file at the same relative
# path below this folder of DIR: which version of the stored file the bytes in DIR are.
VERSIONS_DIR = ".falcon-download"


def _recorded_version(root, name: str) -> str | None:
    """The ETag recorded for `name` in DIR, None when there is none (or it cannot be read)."""
    import os

    from core.processes import safefs

    try:
        fd = safefs.open_in(root, f"{VERSIONS_DIR}/{name}")
    except (OSError, safefs.UnsafeName):
        return None
    try:
        return safefs.read_at(fd, 0, 1024).decode("ascii", "replace").strip() or None
    finally:
        os.close(fd)


def _record_version(root, name: str, etag: str) -> None:
    """Record (replace) the ETag of the bytes in DIR for `name`; written below DIR with no
    link followed, as the files are. Raises OSError, safefs.UnsafeName."""
    import os

    from core.processes import safefs

    fd = safefs.open_for_append_in(root, f"{VERSIONS_DIR}/{name}")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, etag.encode("ascii", "replace") + b"\n")
    finally:
        os.close(fd)


def _download(env, client, exp_id: int, files, dest: str) -> tuple[int, int, int]:
    """Fetch `files` into `dest`, skipping complete files and resuming partial ones, but
    only when they are the version listed.

    Size alone cannot tell: a half-downloaded file of experiment A and experiment B's file
    of the same name would be "resumed" into a file mixing both. So every file's `etag` from
    the listing (`DIR/.falcon-download/<name>`, written before its first byte) says which
    version the bytes in DIR are: a file of the listed size and version is skipped; a shorter
    one of that version is resumed with `Range: bytes=<its size>-` and `If-Range: <etag>`, so
    a server whose file changed meanwhile sends it whole (200); any other is fetched whole.
    A server that gives no `etag` is trusted by size, as before.

    Returns `(files fetched, files skipped, bytes transferred)`.

    Raises:
        CLIError(INVALID): a listed name would leave `dest`.
        CLIError(USAGE): a file cannot be written (the operating system's reason is named).
    """
    import os
    from pathlib import Path

    from core.processes import safefs

    root = Path(dest).resolve()
    fetched = skipped = moved = 0
    for item in files:
        name, size, etag = item["name"], int(item["size"]), str(item.get("etag") or "")
        try:
            safefs.name_parts(name)
        except safefs.UnsafeName as exc:
            raise CLIError(f"the server listed {name!r}, which is outside {root} ({exc}); not "
                           "fetched", ExitCode.INVALID) from None
        target = root / name
        try:
            # Every folder on the way and the file are opened below DIR without following a
            # link: a link already in DIR (to ~/.bashrc, to /) is refused, never written
            # through.
            fd = safefs.open_for_append_in(root, name)
        except FileNotFoundError:
            raise CLIError(f"--download: {target} (or a folder on its way) is a symbolic link "
                           "or not a regular file; links in DIR are never followed: remove it "
                           f"or choose another DIR; {fetched} files fetched so far",
                           ExitCode.USAGE) from None
        except OSError as exc:
            raise CLIError(f"--download: cannot write {target}: {exc.strerror or exc}; "
                           f"{fetched} files fetched so far (run it again to resume)",
                           ExitCode.USAGE) from None
        with os.fdopen(fd, "ab") as fh:
            have = os.fstat(fd).st_size
            same = not etag or _recorded_version(root, name) == etag
            if have == size and same:
                skipped += 1
                continue
            try:
                if have > size or not same:
                    fh.truncate(0)  # another version (or longer): fetched whole
                    have = 0
                headers = {"Range": f"bytes={have}-"} if have else {}
                if have and etag:
                    headers["If-Range"] = etag

                def remember(status, answer_headers, name=name):
                    # Before the first byte: the bytes about to be written are this version.
                    version = answer_headers.get("ETag") or etag
                    if version:
                        _record_version(root, name, version)

                status = client.stream_to(f"{EXPS}/{exp_id}/artifacts/file", fh,
                                          params={"name": name}, headers=headers or None,
                                          on_response=remember)
                fh.flush()
                end = os.fstat(fd).st_size
                moved += end - have
                if have and status != 206:  # the server sent the whole file: keep only that
                    data = os.pread(fd, end - have, have)
                    fh.truncate(0)
                    fh.write(data)
            except (OSError, safefs.UnsafeName) as exc:  # a full disk, a refused name, ...
                raise CLIError(f"--download: cannot write {target}: "
                               f"{getattr(exc, 'strerror', None) or exc}; "
                               f"{fetched} files fetched so far (run it again to resume)",
                               ExitCode.USAGE) from None
            except CLIError as exc:
                if exc.code == ExitCode.NOT_FOUND and not os.fstat(fd).st_size:
                    # Gone since it was listed: leave no empty file behind, the next listing
                    # will not name it.
                    safefs.remove_empty_in(root, name)
                    raise CLIError(f"{name} was listed but is gone from the artifact store "
                                   f"({exc}); {fetched} files fetched so far; run it again "
                                   "to fetch what is listed now", exc.code) from None
                raise
        fetched += 1
    return fetched, skipped, moved

