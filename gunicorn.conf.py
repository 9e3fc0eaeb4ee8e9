"""gunicorn settings read from the working directory: the local mode listens on loopback only.

`gunicorn falcon_site.wsgi --bind ...` loads this file before binding. In the local mode
(`FALCON_AUTH_MODE` unset or `local`) a non-loopback `--bind` stops gunicorn unless
FALCON_LOCAL_ALLOW_NONLOOPBACK=1 (docs/decisions.md#auth-10), which prints a warning instead.
"""
import os
import sys


def on_starting(server):
    """Refuse (exit 1) or warn about the configured binds before gunicorn listens."""
    from core.ports import local_bind_problem

    mode = os.environ.get("FALCON_AUTH_MODE", "local")
    opt_in = os.environ.get("FALCON_LOCAL_ALLOW_NONLOOPBACK", "").strip().lower() in {
        "1", "true", "yes", "on"}
    for addr in server.cfg.bind:
        if addr.startswith(("unix:", "fd://")):
            continue
        refusal, warning = local_bind_problem(addr, mode=mode, opt_in=opt_in)
        if refusal:
            sys.stderr.write(f"gunicorn --bind {refusal}\n")
            sys.exit(1)
        if warning:
            sys.stderr.write(warning + "\n")
