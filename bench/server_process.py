"""The real gRPC API server in a process of its own, for the benchmarks' `--server-process`.

A benchmark that runs the server in its own process counts the server's memory and CPU with
the controller's; with `ServerProcess` each is known apart: the server is a child process
(this file run as a script: Django set up on the benchmark's database, `build_server` on a
free port) and the benchmark reads the child's RSS, peak RSS and CPU seconds from /proc.

    server = ServerProcess(workers=4)      # after the database is seeded
    channel = grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS)
    server.reset_peak(); before = server.figures(); ...; after = server.figures()
    server.close()

Run as a script it serves until its standard input closes (the parent went away).
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ProcessFigures:
    """A process's memory and CPU: RSS and peak RSS (MiB), user+system CPU seconds, and of
    the RSS the private memory (`anon_mib`: the heap) and the mapped files (`file_mib`: the
    code, and on SQLite the database file read through its memory map, pages the operating
    system shares between processes and drops first)."""

    rss_mib: float
    peak_mib: float
    cpu_s: float
    anon_mib: float
    file_mib: float


def figures_of(pid: int | str = "self") -> ProcessFigures:
    """The RSS (`VmRSS`), peak RSS since the last reset (`VmHWM`) and CPU seconds of `pid`."""
    status = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return ProcessFigures(rss_mib=int(status["VmRSS"].split()[0]) / 1024,
                          peak_mib=int(status["VmHWM"].split()[0]) / 1024,
                          cpu_s=(int(fields[11]) + int(fields[12])) / ticks,
                          anon_mib=int(status["RssAnon"].split()[0]) / 1024,
                          file_mib=int(status["RssFile"].split()[0]) / 1024)


def reset_peak(pid: int | str = "self") -> None:
    """Reset the peak RSS of `pid` (Linux: writing 5 to clear_refs resets VmHWM)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


class ServerProcess:
    """`build_server` in a child process on this process's settings (DATABASE_URL, token).

    Args:
        workers: the server's threads (`max_workers`).

    Attributes:
        target: `127.0.0.1:<port>` to open a channel to; pid: the child's process id.
    """

    def __init__(self, workers: int = 4):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.process = subprocess.Popen([sys.executable, __file__, str(workers)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=env, text=True)
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError(f"the gRPC server process did not start: {line!r}")
        self.target = f"127.0.0.1:{int(line)}"
        self.pid = self.process.pid

    def figures(self) -> ProcessFigures:
        return figures_of(self.pid)

    def reset_peak(self) -> None:
        reset_peak(self.pid)

    def close(self) -> None:
        """Stop the child (its standard input closes) and wait for it."""
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _serve(workers: int) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "falcon_site.settings")
    import django

    django.setup()
    from falcon_site.grpc.server import build_server

    server = build_server("127.0.0.1:0", max_workers=workers)
    server.start()
    print(server.port, flush=True)
    sys.stdin.read()  # until the parent closes it
    server.stop(grace=0)


if __name__ == "__main__":
    _serve(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
