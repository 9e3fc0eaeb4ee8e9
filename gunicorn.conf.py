"""gunicorn settings read from the working directory: the local mode listens on loopback only;
Prometheus metrics are added up across workers.

`gunicorn falcon_site.wsgi --bind ...` loads this file before binding. In the local mode
(`FALCON_AUTH_MODE` unset or `local`) a non-loopback `--bind` stops gunicorn unless
FALCON_LOCAL_ALLOW_NONLOOPBACK=1 (docs/decisions.md#auth-10), which prints a warning instead.

With several workers, `/metrics` must report every worker's counts, not the one that answered:
set `PROMETHEUS_MULTIPROC_DIR` to an empty, writable folder (prometheus-client's multiprocess
mode, `core.metrics`). It is emptied when gunicorn starts (files of a previous run would be
added in), and `child_exit` marks a dead worker's live gauges gone.
"""
import os
import sys


def on_starting(server):
    """Refuse (exit 1) or warn about the configured binds before gunicorn listens."""
    from core.ports import local_bind_problem

    mode = os.environ.get("FALCON_AUTH_MODE", "local")
    opt_in = os.environ.get("FALCON_LOCAL_ALLOW_NONLOOPBACK", "").strip().lower() in {
        "1", "true", "yes", "on"}
    _reset_multiproc_dir()
    for addr in server.cfg.bind:
        if addr.startswith(("unix:", "fd://")):
            continue
        refusal, warning = local_bind_problem(addr, mode=mode, opt_in=opt_in)
        if refusal:
            sys.stderr.write(f"gunicorn --bind {refusal}\n")
            sys.exit(1)
        if warning:
            sys.stderr.write(warning + "\n")


def _reset_multiproc_dir() -> None:
    """Empty `PROMETHEUS_MULTIPROC_DIR` (create it if missing) before any worker starts."""
    import shutil
    from pathlib import Path

    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        return
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    for child in path.iterdir():
        if child.is_file() and child.suffix == ".db":
            child.unlink()
        elif child.is_dir():
            shutil.rmtree(child)


def child_exit(server, worker):
    """A worker exited: prometheus-client's multiprocess mode forgets its live gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
